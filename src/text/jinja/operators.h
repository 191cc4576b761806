// Python operator semantics for jinja2 expressions: arithmetic with int/float/bool promotion, floor
// division and modulo with Python signs, str/list/tuple concatenation and repetition, Markup escaping on
// `+`, `in`, printf-style `%` formatting and slicing. Not comparisons (value.h) and not the evaluator.
// Invariants: int64 overflow raises Error instead of wrapping (Python has big ints; bunsen reports it);
// results are size-checked against the interpreter's limits before they are built.
#pragma once
#include <optional>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace bunsen::text::jinja {

Value binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b);
Value unary_op(bool negate, const Value& v);
bool contains(const Value& container, const Value& item);  // Python `item in container`
// `fmt % args` for strings (also the `format` filter): %s %r %d %i %f %F %e %E %g %G %x %X %o %c %%.
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args);
// str.format(*args, **kwargs) as jinja2's sandboxed formatter runs it.
std::string str_format(Interpreter& in, const std::string& fmt, CallArgs& args);
// Python slice of a sequence value (str, list, tuple); TypeError for anything else.
Value slice_value(const Value& v, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step);
// Python float divmod (CPython's float_divmod), used by // and %.
void float_divmod(double a, double b, double& div, double& mod);

}  // namespace bunsen::text::jinja
