// jinja2's built-in tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...), with Python's
// isinstance semantics: bool is a number but not an integer; dicts and strings are sequences; Undefined
// is iterable and a sequence (it has __len__/__iter__/__getitem__), generators are iterable only.
#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, const Value*);

const Value& need(const Value* other, const char* test) {
  if (!other) fail(strfmt("TypeError: test '%s' takes exactly 1 argument", test));
  return *other;
}

bool mod_is(Interpreter& in, const Value& v, const Value& n, int64_t want) {
  Value r = binary_op(in, BinOp::kMod, v, n);
  return py_eq(r, Value::integer(want));
}

bool t_odd(Interpreter& in, const Value& v, const Value*) { return mod_is(in, v, Value::integer(2), 1); }
bool t_even(Interpreter& in, const Value& v, const Value*) { return mod_is(in, v, Value::integer(2), 0); }
bool t_divisibleby(Interpreter& in, const Value& v, const Value* o) { return mod_is(in, v, need(o, "divisibleby"), 0); }
bool t_defined(Interpreter&, const Value& v, const Value*) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, const Value*) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, const Value*) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kBool; }
bool t_false(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kBool && !v.as_bool(); }
bool t_true(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kBool && v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kInt; }
bool t_float(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kFloat; }
bool t_number(Interpreter&, const Value& v, const Value*) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, const Value*) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, const Value*) { return v.kind() == Kind::kDict; }
bool t_escaped(Interpreter&, const Value& v, const Value*) { return v.markup(); }

bool sequence_kind(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kString: case Kind::kList: case Kind::kTuple: case Kind::kDict: return true;
    default: return false;
  }
}

bool t_sequence(Interpreter&, const Value& v, const Value*) { return sequence_kind(v); }

bool t_iterable(Interpreter&, const Value& v, const Value*) {
  return v.kind() == Kind::kObject ? v.object()->iterable() : sequence_kind(v);
}

bool t_callable(Interpreter&, const Value& v, const Value*) {
  // Undefined defines __call__ (to raise), so Python's callable() says True.
  return v.is_undefined() || (v.kind() == Kind::kObject && v.object()->callable());
}

bool t_sameas(Interpreter&, const Value& v, const Value* o) {
  const Value& other = need(o, "sameas");
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone: return true;
    case Kind::kBool: return v.as_bool() == other.as_bool();
    case Kind::kInt: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's small ints
    case Kind::kUndefined: case Kind::kFloat: return false;
    default: return v.identity() == other.identity();
  }
}

bool t_in(Interpreter&, const Value& v, const Value* o) { return contains(need(o, "in"), v); }
bool t_lower(Interpreter&, const Value& v, const Value*) { return py::is_lower(to_str(v)); }
bool t_upper(Interpreter&, const Value& v, const Value*) { return py::is_upper(to_str(v)); }
bool t_eq(Interpreter&, const Value& v, const Value* o) { return py_eq(v, need(o, "eq")); }
bool t_ne(Interpreter&, const Value& v, const Value* o) { return !py_eq(v, need(o, "ne")); }
bool t_lt(Interpreter&, const Value& v, const Value* o) { return py_compare(v, need(o, "lt"), CmpOp::kLt); }
bool t_le(Interpreter&, const Value& v, const Value* o) { return py_compare(v, need(o, "le"), CmpOp::kLe); }
bool t_gt(Interpreter&, const Value& v, const Value* o) { return py_compare(v, need(o, "gt"), CmpOp::kGt); }
bool t_ge(Interpreter&, const Value& v, const Value* o) { return py_compare(v, need(o, "ge"), CmpOp::kGe); }

bool t_filter(Interpreter&, const Value& v, const Value*) {
  py_hash(v);
  return v.is_string() && jinja_has_filter(v.str());
}

bool t_test(Interpreter&, const Value& v, const Value*) {
  py_hash(v);
  return v.is_string() && jinja_has_test(v.str());
}

struct Entry {
  const char* name;
  TestFn fn;
  bool takes_arg;
};

constexpr Entry kTests[] = {
    {"boolean", t_boolean, false}, {"callable", t_callable, false}, {"defined", t_defined, false},
    {"divisibleby", t_divisibleby, true}, {"eq", t_eq, true}, {"equalto", t_eq, true}, {"==", t_eq, true},
    {"escaped", t_escaped, false}, {"even", t_even, false}, {"false", t_false, false}, {"filter", t_filter, false},
    {"float", t_float, false}, {"ge", t_ge, true}, {">=", t_ge, true}, {"greaterthan", t_gt, true},
    {"gt", t_gt, true}, {">", t_gt, true}, {"in", t_in, true}, {"integer", t_integer, false},
    {"iterable", t_iterable, false}, {"le", t_le, true}, {"<=", t_le, true}, {"lessthan", t_lt, true},
    {"lower", t_lower, false}, {"lt", t_lt, true}, {"<", t_lt, true}, {"mapping", t_mapping, false},
    {"ne", t_ne, true}, {"!=", t_ne, true}, {"none", t_none, false}, {"number", t_number, false},
    {"odd", t_odd, false}, {"sameas", t_sameas, true}, {"sequence", t_sequence, false},
    {"string", t_string, false}, {"test", t_test, false}, {"true", t_true, false},
    {"undefined", t_undefined, false}, {"upper", t_upper, false},
};

const Entry* find_test(std::string_view name) {
  for (const auto& e : kTests)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

bool jinja_has_test(std::string_view name) { return find_test(name) != nullptr; }

bool apply_test(Interpreter& in, std::string_view name, CallArgs& args) {
  const Entry* e = find_test(name);
  if (!e) fail("TemplateRuntimeError: No test named '" + std::string(name) + "' found.");
  const size_t want = e->takes_arg ? 2 : 1;
  if (!args.kwargs.empty()) fail(strfmt("TypeError: test '%s' got an unexpected keyword argument", e->name));
  if (args.positional.size() != want)
    fail(strfmt("TypeError: test '%s' takes %zu positional argument(s) but %zu were given", e->name, want,
                args.positional.size()));
  return e->fn(in, args.positional[0], want == 2 ? &args.positional[1] : nullptr);
}

}  // namespace bunsen::text::jinja
