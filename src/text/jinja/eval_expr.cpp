// Expression evaluation (see interpreter.h): one case per ExprKind, with Python's short-circuit
// and/or (returning operands), chained comparisons, calls with *args/**kwargs, filters and tests.
// Not statements (eval_stmt.cpp). Invariant: evaluation order is Python's (left to right, obj before key).
#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

std::optional<int64_t> slice_index(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return v.as_int();
  if (v.is_undefined()) raise_undefined(v);
  fail("TypeError: slice indices must be integers or None or have an __index__ method");
}

}  // namespace

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  const auto arg = [&](size_t i) { return eval(*e.args[i], scope); };
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return resolve(e.name, *scope);
    case ExprKind::kList: case ExprKind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (size_t i = 0; i < e.args.size(); ++i) items.push_back(arg(i));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = arg(i);
        d.set(std::move(k), arg(i + 1));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: return getattr(arg(0), e.name);
    case ExprKind::kGetItem: {
      Value obj = arg(0);
      return getitem(obj, arg(1));
    }
    case ExprKind::kSlice: return eval_slice(e, scope);
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: {
      if (!e.args[0]) fail("internal error: filter without input");
      return apply_filter_chain(e, Value(), scope);
    }
    case ExprKind::kTest: {
      CallArgs a;
      a.positional.push_back(arg(0));
      eval_call_args(e, 1, scope, a);
      return Value::boolean(apply_test(*this, e.name, a));
    }
    case ExprKind::kNeg: case ExprKind::kPos: return unary_op(e.kind == ExprKind::kNeg, arg(0));
    case ExprKind::kNot: return Value::boolean(!truthy(arg(0)));
    case ExprKind::kAnd: {
      Value l = arg(0);
      return truthy(l) ? arg(1) : l;
    }
    case ExprKind::kOr: {
      Value l = arg(0);
      return truthy(l) ? l : arg(1);
    }
    case ExprKind::kBinary: {
      Value l = arg(0);
      return binary_op(*this, e.op, l, arg(1));
    }
    case ExprKind::kConcat: {
      std::string s;
      for (size_t i = 0; i < e.args.size(); ++i) {
        Value v = arg(i);
        s += autoescape_ && !v.markup() ? py::html_escape(to_str(v)) : to_str(v);
        check_size(s.size());
      }
      return Value::string(std::move(s), autoescape_);
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCondExpr:
      if (truthy(arg(1))) return arg(0);
      if (e.args[2]) return arg(2);
      return Value::undefined("", strfmt("UndefinedError: the inline if-expression on line %d evaluated to false and "
                                         "no else section was defined.", e.line));
  }
  fail("internal error: unknown expression");
}

// A filter chain: e.args[0] is the input expression, or null where `input` is the input (filter blocks).
Value Interpreter::apply_filter_chain(const Expr& e, Value input, const ScopePtr& scope) {
  CallArgs a;
  if (!e.args[0]) a.positional.push_back(std::move(input));
  else if (e.args[0]->kind == ExprKind::kFilter) a.positional.push_back(apply_filter_chain(*e.args[0], std::move(input), scope));
  else a.positional.push_back(eval(*e.args[0], scope));
  eval_call_args(e, 1, scope, a);
  step();
  return apply_filter(*this, e.name, a);
}

void Interpreter::eval_call_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) out.positional.push_back(eval(*e.args[i], scope));
  if (e.dyn_args) {
    List extra = iterate(eval(*e.dyn_args, scope));
    out.positional.insert(out.positional.end(), extra.begin(), extra.end());
  }
  auto add_kwarg = [&](std::string key, Value v) {
    for (const auto& kv : out.kwargs)
      if (kv.first == key) fail("TypeError: got multiple values for keyword argument '" + key + "'");
    out.kwargs.emplace_back(std::move(key), std::move(v));
  };
  for (const auto& [k, x] : e.kwargs) add_kwarg(k, eval(*x, scope));
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, scope);
    if (d.kind() != Kind::kDict) fail(strfmt("TypeError: argument after ** must be a mapping, not %s", type_name(d)));
    for (const auto& [k, x] : d.dict().entries()) {
      if (!k.is_string()) fail("TypeError: keywords must be strings");
      add_kwarg(k.str(), x);
    }
  }
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  Value callee = eval(*e.args[0], scope);
  CallArgs a;
  eval_call_args(e, 1, scope, a);
  return call(callee, a);
}

Value Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    bool r = false;
    switch (e.ops[i]) {
      case CompareOp::kEq: r = py_eq(left, right); break;
      case CompareOp::kNe: r = !py_eq(left, right); break;
      case CompareOp::kLt: r = py_compare(left, right, CmpOp::kLt); break;
      case CompareOp::kLe: r = py_compare(left, right, CmpOp::kLe); break;
      case CompareOp::kGt: r = py_compare(left, right, CmpOp::kGt); break;
      case CompareOp::kGe: r = py_compare(left, right, CmpOp::kGe); break;
      case CompareOp::kIn: r = contains(right, left); break;
      case CompareOp::kNotIn: r = !contains(right, left); break;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

// obj[start:stop:step]; e.args = {obj, start, stop, step} (null = omitted).
Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  if (e.args.size() != 4) fail("TypeError: slices inside a tuple subscript are not supported");
  Value obj = eval(*e.args[0], scope);
  std::optional<int64_t> idx[3];
  for (int k = 0; k < 3; ++k)
    if (e.args[k + 1]) idx[k] = slice_index(eval(*e.args[k + 1], scope));
  return slice_value(obj, idx[0], idx[1], idx[2]);
}

}  // namespace bunsen::text::jinja
