// Python methods of str, list, tuple, dict, int and float that templates call (`x.strip()`,
// `d.get('k')`, `d.items()`, ...), as jinja2's ImmutableSandboxedEnvironment exposes them: mutating
// list/dict methods (append, pop, update, ...) resolve to an "unsafe" Undefined that fails when used.
// dict views (items/keys/values) are returned as lists. Methods jinja2 would expose but bunsen does not
// implement (encode, translate, ...) fail when called. str methods themselves are in str_methods.cpp.
#include <cmath>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/objects.h"

namespace bunsen::text::jinja {
namespace {

constexpr const char* kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
constexpr const char* kListMethods[] = {"append", "clear", "copy", "count", "extend", "index",
                                        "insert", "pop", "remove", "reverse", "sort"};
constexpr const char* kListUnsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
constexpr const char* kTupleMethods[] = {"count", "index"};
constexpr const char* kDictMethods[] = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                        "pop", "popitem", "setdefault", "update", "values"};
constexpr const char* kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr const char* kIntMethods[] = {"as_integer_ratio", "bit_count", "bit_length", "conjugate", "from_bytes",
                                       "is_integer", "to_bytes"};
constexpr const char* kFloatMethods[] = {"as_integer_ratio", "conjugate", "fromhex", "hex", "is_integer"};

template <size_t N>
bool in_list(const char* const (&list)[N], std::string_view name) {
  for (const char* s : list)
    if (name == s) return true;
  return false;
}

Value seq_method(const Value& self, std::string_view name, CallArgs& args) {
  const std::string fname(name);
  ArgReader r(args, fname.c_str());
  args.positional.insert(args.positional.begin(), self);
  if (name == "copy") {
    r.done(1);
    return Value::list(self.items());
  }
  std::optional<Value> x = r.get(1, "value");
  r.done(2);
  if (!x) fail(strfmt("TypeError: %s() takes exactly one argument (0 given)", fname.c_str()));
  const List& items = self.items();
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!py_eq(items[i], *x)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") fail("ValueError: " + repr(*x) + " is not in list");
  return Value::integer(count);
}

Value dict_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const std::string fname(name);
  ArgReader r(args, fname.c_str());
  args.positional.insert(args.positional.begin(), self);
  const Dict& d = self.dict();
  if (name == "get") {
    std::optional<Value> key = r.get(1, "key");
    Value def = r.get_or(2, "default", Value::none());
    r.done(3);
    if (!key) fail("TypeError: get expected at least 1 argument, got 0");
    const Value* v = d.find(*key);
    return v ? *v : def;
  }
  r.done(1);
  List out;
  if (name == "items") {
    for (const auto& [k, v] : d.entries()) out.push_back(Value::tuple({k, v}));
  } else if (name == "keys") {
    for (const auto& e : d.entries()) out.push_back(e.first);
  } else if (name == "values") {
    for (const auto& e : d.entries()) out.push_back(e.second);
  } else if (name == "copy") {
    return self;
  } else {
    fail("dict." + std::string(name) + "() is not supported by bunsen's template engine");
  }
  in.step(static_cast<int64_t>(out.size()) / 8);
  return Value::list(std::move(out));
}

}  // namespace

std::optional<Value> builtin_attribute(const Value& self, std::string_view name) {
  auto method = [&]() { return Value::object(std::make_shared<BoundMethod>(self, std::string(name))); };
  auto unsafe = [&]() {
    return Value::undefined(std::string(name), strfmt("SecurityError: access to attribute '%s' of '%s' object is unsafe.",
                                                      std::string(name).c_str(), type_name(self)));
  };
  switch (self.kind()) {
    case Kind::kString:
      if (in_list(kStrMethods, name)) return method();
      break;
    case Kind::kList:
      if (in_list(kListUnsafe, name)) return unsafe();
      if (in_list(kListMethods, name)) return method();
      break;
    case Kind::kTuple:
      if (in_list(kTupleMethods, name)) return method();
      break;
    case Kind::kDict:
      if (in_list(kDictUnsafe, name)) return unsafe();
      if (in_list(kDictMethods, name)) return method();
      break;
    case Kind::kBool: case Kind::kInt: case Kind::kFloat:
      if (name == "real") return self.kind() == Kind::kBool ? Value::integer(self.as_int()) : self;
      if (name == "imag") return self.kind() == Kind::kFloat ? Value::number(0.0) : Value::integer(0);
      if (self.kind() != Kind::kFloat && name == "numerator") return Value::integer(self.as_int());
      if (self.kind() != Kind::kFloat && name == "denominator") return Value::integer(1);
      if (self.kind() == Kind::kFloat ? in_list(kFloatMethods, name) : in_list(kIntMethods, name)) return method();
      break;
    default:
      break;
  }
  return std::nullopt;
}

Value call_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  switch (self.kind()) {
    case Kind::kString: return call_str_method(in, self, name, args);
    case Kind::kList: case Kind::kTuple: return seq_method(self, name, args);
    case Kind::kDict: return dict_method(in, self, name, args);
    default: break;
  }
  if (name == "is_integer" && args.positional.empty() && args.kwargs.empty())
    return Value::boolean(self.kind() != Kind::kFloat || std::floor(self.as_float()) == self.as_float());
  if (name == "conjugate" && args.positional.empty() && args.kwargs.empty()) return self;
  fail(strfmt("%s.%s() is not supported by bunsen's template engine", type_name(self), std::string(name).c_str()));
}

}  // namespace bunsen::text::jinja
