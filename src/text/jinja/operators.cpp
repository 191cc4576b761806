// Python operators for jinja2 (see operators.h): + - * / // % ** and unary -, `in`, slicing.
// Not comparisons (value.cpp) or string formatting (format.cpp).
// Invariant: int64 overflow and oversized results raise Error before anything wraps or is built.
#include "text/jinja/operators.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

bool is_intlike(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  fail(strfmt("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, type_name(a), type_name(b)));
}

[[noreturn]] void overflow() { fail("OverflowError: integer result does not fit in 64 bits"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > in.limits().max_output_bytes / s.size()) in.check_size(SIZE_MAX);
    in.step(static_cast<int64_t>(s.size()) * n / 64);
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out), seq.markup());
  }
  const List& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > in.limits().max_output_bytes / 16 / items.size()) in.check_size(SIZE_MAX);
  in.step(static_cast<int64_t>(items.size()) * n / 8);
  List out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value add(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) {
      return Value::integer(checked_add(a.as_int(), b.as_int()));
    }
    return Value::number(a.as_float() + b.as_float());
  }
  if (a.is_string() && b.is_string()) {
    const bool markup = a.markup() || b.markup();
    std::string l = markup && !a.markup() ? py::html_escape(a.str()) : a.str();
    const std::string r = markup && !b.markup() ? py::html_escape(b.str()) : b.str();
    in.check_size(l.size() + r.size());
    in.step(static_cast<int64_t>(l.size() + r.size()) / 256);
    return Value::string(l + r, markup);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    in.check_size((a.items().size() + b.items().size()) * 16);
    in.step(static_cast<int64_t>(a.items().size() + b.items().size()) / 8);
    List out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  unsupported("+", a, b);
}

Value floor_div(const Value& a, const Value& b) {
  if (is_intlike(a) && is_intlike(b)) {
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) overflow();
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value::integer(q);
  }
  if (b.as_float() == 0.0) fail("ZeroDivisionError: float floor division by zero");
  double div, mod;
  float_divmod(a.as_float(), b.as_float(), div, mod);
  return Value::number(div);
}

Value modulo(const Value& a, const Value& b) {
  if (is_intlike(a) && is_intlike(b)) {
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (y == -1) return Value::integer(0);
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::integer(m);
  }
  if (b.as_float() == 0.0) fail("ZeroDivisionError: float modulo");
  double div, mod;
  float_divmod(a.as_float(), b.as_float(), div, mod);
  return Value::number(mod);
}

Value power(const Value& a, const Value& b) {
  if (is_intlike(a) && is_intlike(b) && b.as_int() >= 0) {
    int64_t base = a.as_int(), e = b.as_int(), r = 1;
    while (e > 0) {
      if (e & 1) r = checked_mul(r, base);
      e >>= 1;
      if (e > 0) base = checked_mul(base, base);
    }
    return Value::integer(r);
  }
  const double x = a.as_float(), y = b.as_float();
  if (x == 0.0 && y < 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y) && std::isfinite(y)) fail("TypeError: complex results are not supported");
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail("OverflowError: (34, 'Numerical result out of range')");
  return Value::number(r);
}

}  // namespace

void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

Value binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  switch (op) {
    case BinOp::kAdd: return add(in, a, b);
    case BinOp::kSub:
      if (!a.is_number() || !b.is_number()) unsupported("-", a, b);
      if (is_intlike(a) && is_intlike(b)) {
        return Value::integer(checked_sub(a.as_int(), b.as_int()));
      }
      return Value::number(a.as_float() - b.as_float());
    case BinOp::kMul:
      if (a.is_number() && b.is_number()) {
        if (is_intlike(a) && is_intlike(b)) {
          return Value::integer(checked_mul(a.as_int(), b.as_int()));
        }
        return Value::number(a.as_float() * b.as_float());
      }
      if ((a.is_string() || a.is_sequence()) && is_intlike(b)) return repeat(in, a, b.as_int());
      if ((b.is_string() || b.is_sequence()) && is_intlike(a)) return repeat(in, b, a.as_int());
      unsupported("*", a, b);
    case BinOp::kDiv:
      if (!a.is_number() || !b.is_number()) unsupported("/", a, b);
      if (b.as_float() == 0.0) fail("ZeroDivisionError: division by zero");
      return Value::number(a.as_float() / b.as_float());
    case BinOp::kFloorDiv:
      if (!a.is_number() || !b.is_number()) unsupported("//", a, b);
      return floor_div(a, b);
    case BinOp::kMod:
      if (a.is_string()) return Value::string(percent_format(in, a.str(), b), a.markup());
      if (!a.is_number() || !b.is_number()) unsupported("%", a, b);
      return modulo(a, b);
    case BinOp::kPow:
      if (!a.is_number() || !b.is_number()) unsupported("** or pow()", a, b);
      return power(a, b);
  }
  fail("internal error: unknown operator");
}

Value unary_op(bool negate, const Value& v) {
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_number()) fail(strfmt("TypeError: bad operand type for unary %c: '%s'", negate ? '-' : '+', type_name(v)));
  if (v.kind() == Kind::kFloat) return Value::number(negate ? -v.as_float() : v.as_float());
  if (negate && v.as_int() == INT64_MIN) overflow();
  return Value::integer(negate ? -v.as_int() : v.as_int());
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string())
        fail(strfmt("TypeError: 'in <string>' requires string as left operand, not %s", type_name(item)));
      return c.str().find(item.str()) != std::string::npos;
    case Kind::kList: case Kind::kTuple:
      for (const auto& x : c.items())
        if (py_eq(x, item)) return true;
      return false;
    case Kind::kDict: return c.dict().find(item) != nullptr;
    case Kind::kObject:
      if (c.object()->iterable()) {
        for (const auto& x : c.object()->iterate())
          if (py_eq(x, item)) return true;
        return false;
      }
      [[fallthrough]];
    default:
      fail(strfmt("TypeError: argument of type '%s' is not iterable", type_name(c)));
  }
}

Value slice_value(const Value& v, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) fail("ValueError: slice step cannot be zero");
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_string()) return Value::string(py::slice(v.str(), start, stop, st), v.markup());
  if (!v.is_sequence()) fail(strfmt("TypeError: '%s' object is not subscriptable", type_name(v)));
  const List& items = v.items();
  const auto n = static_cast<int64_t>(items.size());
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t i = *x < 0 ? *x + n : *x;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  List out;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    out.push_back(items[static_cast<size_t>(i)]);
    if (st > 0 ? st >= e - i : st <= e - i) break;  // no int64 overflow for huge steps
    i += st;
  }
  return v.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace bunsen::text::jinja
