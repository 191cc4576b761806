// Registries of jinja2's built-in filters, tests, globals and Python methods, as the evaluator calls them.
// Each family lives in its own file (filters*.cpp, tests.cpp, methods.cpp, globals.cpp). Not the
// evaluator's control flow. Invariant: a name jinja2 knows but bunsen does not implement still counts as
// known (so compile-time checks match jinja2) and fails with a clear error only when it runs.
#pragma once
#include <optional>
#include <string_view>

#include "text/jinja/value.h"

namespace bunsen::text::jinja {

bool jinja_has_filter(std::string_view name);
bool jinja_has_test(std::string_view name);

// Applies filter `name` to args.positional[0] (the filtered value) and the remaining args.
Value apply_filter(Interpreter& in, std::string_view name, CallArgs& args);
// Runs test `name` on args.positional[0].
bool apply_test(Interpreter& in, std::string_view name, CallArgs& args);

// Python attribute `name` of a str/list/dict/int/float value: a bound method object, or nullopt where
// Python raises AttributeError. Mutating methods of list/dict return jinja2's unsafe-undefined.
std::optional<Value> builtin_attribute(const Value& self, std::string_view name);

// Calls Python method `name` of a str/list/dict/int/float value (a bound method created by
// builtin_attribute).
Value call_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args);
Value call_str_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args);

// The template globals: range, dict, namespace, joiner, cycler, lipsum, raise_exception, strftime_now.
std::optional<Value> builtin_global(std::string_view name);

// Helpers shared by the builtins.
Value make_namespace(Interpreter& in, CallArgs& args);
// Python-style parameter binding for builtins: parameter i (positional index, counting the filtered
// value as 0 for filters) or keyword `name`; done() rejects leftover positionals/keywords like Python.
class ArgReader {
 public:
  ArgReader(CallArgs& args, const char* fn) : args_(args), fn_(fn) {}
  std::optional<Value> get(size_t index, const char* name);
  Value get_or(size_t index, const char* name, Value def) { auto v = get(index, name); return v ? *v : def; }
  void done(size_t max_positional);
  CallArgs& args() { return args_; }

 private:
  CallArgs& args_;
  const char* fn_;
};

// An iterator/generator value (map/select/... results): always truthy, no len(), iterable once.
Value make_generator(List items, const char* type_name = "generator");

}  // namespace bunsen::text::jinja
