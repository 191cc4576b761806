// Internal declarations shared by the filter files (filters.cpp: registry + string/number filters,
// filters_seq.cpp: sequence filters, json.cpp: tojson). Not a public API.
// Invariant: every filter takes the filtered value as args.positional[0].
#pragma once
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"

namespace bunsen::text::jinja::filters {

using FilterFn = Value (*)(Interpreter&, CallArgs&);

// jinja2's soft_str: strings (and Markup) unchanged, everything else str().
Value soft_str(const Value& v);
// jinja2's ignore_case postprocessor: lower() for strings.
Value ignore_case(const Value& v);

// jinja2's make_attrgetter: "a.b.0" -> getitem chain; null attribute -> identity.
struct AttrGetter {
  std::vector<Value> parts;
  std::optional<Value> default_value;
  bool lower = false;
  AttrGetter(const std::optional<Value>& attribute, bool lower_strings, std::optional<Value> def = std::nullopt);
  Value operator()(Interpreter& in, const Value& item) const;
};

Value length(Interpreter& in, CallArgs& a);
Value first(Interpreter& in, CallArgs& a);
Value last(Interpreter& in, CallArgs& a);
Value join(Interpreter& in, CallArgs& a);
Value list(Interpreter& in, CallArgs& a);
Value reverse(Interpreter& in, CallArgs& a);
Value sort(Interpreter& in, CallArgs& a);
Value dictsort(Interpreter& in, CallArgs& a);
Value unique(Interpreter& in, CallArgs& a);
Value min(Interpreter& in, CallArgs& a);
Value max(Interpreter& in, CallArgs& a);
Value sum(Interpreter& in, CallArgs& a);
Value map(Interpreter& in, CallArgs& a);
Value select(Interpreter& in, CallArgs& a);
Value reject(Interpreter& in, CallArgs& a);
Value selectattr(Interpreter& in, CallArgs& a);
Value rejectattr(Interpreter& in, CallArgs& a);
Value batch(Interpreter& in, CallArgs& a);
Value slice(Interpreter& in, CallArgs& a);
Value items(Interpreter& in, CallArgs& a);
Value tojson(Interpreter& in, CallArgs& a);

}  // namespace bunsen::text::jinja::filters
