// jinja2's built-in filters: the registry (every name jinja2 3.1 defines, with HF's tojson) and the
// string/number filters; sequence filters are in filters_seq.cpp, tojson in json.cpp. Argument binding
// follows each jinja2 signature (positional or keyword). Filters jinja2 has but bunsen does not
// implement (filesizeformat, groupby, pprint, random, striptags, urlencode, urlize, wordwrap, xmlattr)
// fail when they run.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "text/jinja/filters_impl.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace filters {

Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(to_str(v)); }

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py::lower(v.str()), v.markup()) : v; }

namespace {

Value string_op(CallArgs& a, const char* fn, std::string (*op)(std::string_view)) {
  ArgReader r(a, fn);
  r.done(1);
  Value s = soft_str(a.positional.at(0));
  return Value::string(op(s.str()), s.markup());
}

Value f_upper(Interpreter&, CallArgs& a) { return string_op(a, "upper", py::upper); }
Value f_lower(Interpreter&, CallArgs& a) { return string_op(a, "lower", py::lower); }
Value f_capitalize(Interpreter&, CallArgs& a) { return string_op(a, "capitalize", py::capitalize); }

bool title_separator(char32_t c) {
  return py::is_space(c) || c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<';
}

// jinja2's do_title: words start after runs of [-\s({[<]; first char upper, the rest lower.
std::string title_words(std::string_view s) {
  std::string out;
  bool start = true;
  for (char32_t c : py::decode(s)) {
    std::string one;
    py::append_utf8(one, c);
    if (title_separator(c)) {
      out += one;
      start = true;
    } else {
      out += start ? py::upper(one) : py::lower(one);
      start = false;
    }
  }
  return out;
}

Value f_title(Interpreter&, CallArgs& a) { return string_op(a, "title", title_words); }

Value f_trim(Interpreter&, CallArgs& a) {
  ArgReader r(a, "trim");
  std::optional<Value> chars = r.get(1, "chars");
  r.done(2);
  Value s = soft_str(a.positional[0]);
  std::optional<std::string> set;
  if (chars && !chars->is_none()) {
    if (!chars->is_string()) fail("TypeError: strip arg must be None or str");
    set = chars->str();
  }
  return Value::string(py::strip(s.str(), set, true, true), s.markup());
}

Value f_replace(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "replace");
  std::optional<Value> old_v = r.get(1, "old"), new_v = r.get(2, "new"), count = r.get(3, "count");
  r.done(4);
  if (!old_v || !new_v) fail("TypeError: do_replace() missing required arguments 'old' and 'new'");
  const std::string s = to_str(a.positional[0]), o = to_str(*old_v), n = to_str(*new_v);
  int64_t c = -1;
  if (count && !count->is_none()) {
    if (count->kind() != Kind::kInt && count->kind() != Kind::kBool) fail("TypeError: 'count' must be an integer");
    c = count->as_int();
  }
  if (o.empty()) in.check_size((py::length(s) + 1) * n.size() + s.size());
  else if (n.size() > o.size()) in.check_size(s.size() / o.size() * n.size() + s.size());
  return Value::string(py::replace(s, o, n, c));
}

Value f_indent(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "indent");
  Value width = r.get_or(1, "width", Value::integer(4));
  const bool first = truthy(r.get_or(2, "first", Value::boolean(false)));
  const bool blank = truthy(r.get_or(3, "blank", Value::boolean(false)));
  r.done(4);
  std::string ind;
  if (width.is_string()) ind = width.str();
  else if (width.kind() == Kind::kInt || width.kind() == Kind::kBool) ind.assign(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1 << 20)), ' ');
  else fail("TypeError: can't multiply sequence by non-int");
  Value sv = soft_str(a.positional[0]);
  const std::string s = sv.str() + "\n";
  std::vector<std::string> lines = py::splitlines(s, false);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + ind;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += ind;
      out += lines[i];
      in.check_size(out.size());
    }
  }
  if (first) out = ind + out;
  in.check_size(out.size());
  return Value::string(std::move(out), sv.markup());
}

Value f_center(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "center");
  Value width = r.get_or(1, "width", Value::integer(80));
  r.done(2);
  Value s = soft_str(a.positional[0]);
  CallArgs m;
  m.positional.push_back(width);
  Value method = in.getattr(s, "center");
  return in.call(method, m);
}

Value f_wordcount(Interpreter&, CallArgs& a) {
  ArgReader r(a, "wordcount");
  r.done(1);
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(to_str(soft_str(a.positional[0])))) {
    const bool w = py::is_alnum(c) || c == U'_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_truncate(Interpreter&, CallArgs& a) {
  ArgReader r(a, "truncate");
  const int64_t length = r.get_or(1, "length", Value::integer(255)).as_int();
  const bool killwords = truthy(r.get_or(2, "killwords", Value::boolean(false)));
  const std::string end = to_str(r.get_or(3, "end", Value::string("...")));
  Value leeway_v = r.get_or(4, "leeway", Value::none());
  r.done(5);
  const int64_t leeway = leeway_v.is_none() ? 5 : leeway_v.as_int();
  const auto end_len = static_cast<int64_t>(py::length(end));
  if (length < end_len) fail(strfmt("AssertionError: expected length >= %lld, got %lld", (long long)end_len, (long long)length));
  if (leeway < 0) fail("AssertionError: expected leeway >= 0");
  const std::string s = to_str(a.positional[0]);
  if (static_cast<int64_t>(py::length(s)) <= length + leeway) return Value::string(s);
  const std::string head = py::slice(s, 0, length - end_len, 1);
  if (killwords) return Value::string(head + end);
  return Value::string(py::rsplit(head, std::string(" "), 1)[0] + end);
}

Value f_format(Interpreter& in, CallArgs& a) {
  if (a.positional.size() > 1 && !a.kwargs.empty())
    fail("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  Value fmt = soft_str(a.positional[0]);
  Value args;
  if (!a.kwargs.empty()) {
    Dict d;
    for (auto& [k, v] : a.kwargs) d.set(Value::string(k), v);
    args = Value::dict(std::move(d));
  } else {
    args = Value::tuple(List(a.positional.begin() + 1, a.positional.end()));
  }
  return Value::string(percent_format(in, fmt.str(), args), fmt.markup());
}

Value f_escape(Interpreter&, CallArgs& a) {
  ArgReader r(a, "escape");
  r.done(1);
  const Value& v = a.positional[0];
  if (v.markup()) return v;
  return Value::string(py::html_escape(to_str(v)), true);
}

Value f_forceescape(Interpreter&, CallArgs& a) {
  ArgReader r(a, "forceescape");
  r.done(1);
  return Value::string(py::html_escape(to_str(a.positional[0])), true);
}

Value f_safe(Interpreter&, CallArgs& a) {
  ArgReader r(a, "safe");
  r.done(1);
  return Value::string(to_str(a.positional[0]), true);
}

Value f_string(Interpreter&, CallArgs& a) {
  ArgReader r(a, "string");
  r.done(1);
  return soft_str(a.positional[0]);
}

Value f_default(Interpreter&, CallArgs& a) {
  ArgReader r(a, "default");
  Value def = r.get_or(1, "default_value", Value::string(""));
  const bool boolean = truthy(r.get_or(2, "boolean", Value::boolean(false)));
  r.done(3);
  const Value& v = a.positional[0];
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value f_attr(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "attr");
  std::optional<Value> name = r.get(1, "name");
  r.done(2);
  if (!name) fail("TypeError: do_attr() missing required argument 'name'");
  const Value& obj = a.positional[0];
  const std::string n = to_str(*name);
  if (obj.is_undefined()) raise_undefined(obj);
  if (obj.kind() == Kind::kObject) {
    if (auto v = obj.object()->attr(in, n)) return *v;
  } else if (auto m = builtin_attribute(obj, n)) {
    return *m;
  }
  return Value::undefined(n, strfmt("UndefinedError: '%s object' has no attribute '%s'", type_name(obj), n.c_str()));
}

Value f_abs(Interpreter&, CallArgs& a) {
  ArgReader r(a, "abs");
  r.done(1);
  const Value& v = a.positional[0];
  if (v.kind() == Kind::kFloat) return Value::number(std::fabs(v.as_float()));
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) {
    if (v.as_int() == INT64_MIN) fail("OverflowError: integer result does not fit in 64 bits");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) raise_undefined(v);
  fail(strfmt("TypeError: bad operand type for abs(): '%s'", type_name(v)));
}

std::optional<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return std::nullopt;
  if (std::isinf(d)) fail("OverflowError: cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t < -9.2e18 || t > 9.2e18) fail("OverflowError: integer too large (bunsen's templates use 64-bit integers)");
  return static_cast<int64_t>(t);
}

Value f_int(Interpreter&, CallArgs& a) {
  ArgReader r(a, "int");
  Value def = r.get_or(1, "default", Value::integer(0));
  Value base = r.get_or(2, "base", Value::integer(10));
  r.done(3);
  const Value& v = a.positional[0];
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_string()) {
    if (auto i = py::parse_int(v.str(), static_cast<int>(base.as_int()))) return Value::integer(*i);
    if (auto f = py::parse_float(v.str()))
      if (auto i = float_to_int(*f)) return Value::integer(*i);
    return def;
  }
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return Value::integer(v.as_int());
  if (v.kind() == Kind::kFloat) {
    if (auto i = float_to_int(v.as_float())) return Value::integer(*i);
  }
  return def;
}

Value f_float(Interpreter&, CallArgs& a) {
  ArgReader r(a, "float");
  Value def = r.get_or(1, "default", Value::number(0.0));
  r.done(2);
  const Value& v = a.positional[0];
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string())
    if (auto f = py::parse_float(v.str())) return Value::number(*f);
  return def;
}

// Python's round(x, ndigits) for floats: correctly rounded, ties to even on the exact binary value.
double round_float(double x, int64_t nd) {
  if (!std::isfinite(x) || nd > 330) return x;
  if (nd >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(nd), x);
    return std::strtod(buf, nullptr);
  }
  if (nd < -330) return std::copysign(0.0, x);
  const double p = std::pow(10.0, static_cast<double>(-nd));
  return std::nearbyint(x / p) * p;
}

Value f_round(Interpreter&, CallArgs& a) {
  ArgReader r(a, "round");
  Value prec_v = r.get_or(1, "precision", Value::integer(0));
  const std::string method = to_str(r.get_or(2, "method", Value::string("common")));
  r.done(3);
  if (method != "common" && method != "ceil" && method != "floor")
    fail("FilterArgumentError: method must be common, ceil or floor");
  const Value& v = a.positional[0];
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_number()) fail(strfmt("TypeError: type %s doesn't define __round__ method", type_name(v)));
  if (prec_v.kind() != Kind::kInt && prec_v.kind() != Kind::kBool)
    fail(strfmt("TypeError: '%s' object cannot be interpreted as an integer", type_name(prec_v)));
  const int64_t prec = prec_v.as_int();
  if (method == "common") {
    if (v.kind() == Kind::kFloat) return Value::number(round_float(v.as_float(), prec));
    if (prec >= 0) return Value::integer(v.as_int());
    if (prec < -18) return Value::integer(0);
    int64_t p = 1;
    for (int64_t i = 0; i < -prec; ++i) p *= 10;
    const double q = std::nearbyint(static_cast<double>(v.as_int()) / static_cast<double>(p));
    return Value::integer(static_cast<int64_t>(q) * p);
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

struct Entry {
  const char* name;
  FilterFn fn;  // null: jinja2 has it, bunsen does not implement it
};

constexpr Entry kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", length}, {"d", f_default}, {"default", f_default}, {"dictsort", dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"filesizeformat", nullptr}, {"first", first}, {"float", f_float},
    {"forceescape", f_forceescape}, {"format", f_format}, {"groupby", nullptr}, {"indent", f_indent},
    {"int", f_int}, {"items", items}, {"join", join}, {"last", last}, {"length", length}, {"list", list},
    {"lower", f_lower}, {"map", map}, {"max", max}, {"min", min}, {"pprint", nullptr}, {"random", nullptr},
    {"reject", reject}, {"rejectattr", rejectattr}, {"replace", f_replace}, {"reverse", reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", select}, {"selectattr", selectattr}, {"slice", slice},
    {"sort", sort}, {"string", f_string}, {"striptags", nullptr}, {"sum", sum}, {"title", f_title},
    {"tojson", tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", unique}, {"upper", f_upper},
    {"urlencode", nullptr}, {"urlize", nullptr}, {"wordcount", f_wordcount}, {"wordwrap", nullptr},
    {"xmlattr", nullptr},
};

const Entry* find_filter(std::string_view name) {
  for (const auto& e : kFilters)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace
}  // namespace filters

bool jinja_has_filter(std::string_view name) { return filters::find_filter(name) != nullptr; }

Value apply_filter(Interpreter& in, std::string_view name, CallArgs& args) {
  const filters::Entry* e = filters::find_filter(name);
  if (!e) fail("TemplateRuntimeError: No filter named '" + std::string(name) + "' found.");
  if (!e->fn) fail("filter '" + std::string(name) + "' is not supported by bunsen's template engine");
  return e->fn(in, args);
}

}  // namespace bunsen::text::jinja
