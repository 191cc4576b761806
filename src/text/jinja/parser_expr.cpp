// Jinja2 expression grammar (see parser.h), one function per jinja2.parser production, same precedence:
// condexpr < or < and < not < compare < + - < ~ < * / // % < ** (left-assoc) < unary < postfix/filters.
// Not statements. Invariant: recursive productions are depth-guarded; finish() bounds tree depth.
#include "core/status.h"
#include "text/jinja/parser.h"

namespace bunsen::text::jinja::detail {
namespace {

bool is_compare_op(const Token& t, CompareOp& op) {
  if (t.type != Tok::kOp) return false;
  const std::string& s = t.text;
  if (s == "==") op = CompareOp::kEq;
  else if (s == "!=") op = CompareOp::kNe;
  else if (s == "<") op = CompareOp::kLt;
  else if (s == "<=") op = CompareOp::kLe;
  else if (s == ">") op = CompareOp::kGt;
  else if (s == ">=") op = CompareOp::kGe;
  else return false;
  return true;
}

}  // namespace

Parser::Guard::Guard(Parser& p) : p_(p) {
  if (++p_.depth_ > kMaxParseDepth) p_.fail(strfmt("template nested deeper than %d levels", kMaxParseDepth));
}

ExprPtr Parser::node(ExprKind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::finish(ExprPtr e) const {
  int d = 0;
  for (const auto& a : e->args) if (a) d = std::max(d, a->depth);
  for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
  if (e->dyn_args) d = std::max(d, e->dyn_args->depth);
  if (e->dyn_kwargs) d = std::max(d, e->dyn_kwargs->depth);
  e->depth = d + 1;
  if (e->depth > kMaxExprDepth) fail(strfmt("expression nested deeper than %d levels", kMaxExprDepth));
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

bool Parser::is_tuple_end(const char* extra_end) const {
  const Tok t = cur().type;
  if (t == Tok::kVarEnd || t == Tok::kBlockEnd || is_op(")")) return true;
  return extra_end && is_name(extra_end);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const char* extra_end, bool explicit_parens) {
  Guard g(*this);
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail_unexpected();
  }
  auto e = node(ExprKind::kTuple, line);
  e->args = std::move(args);
  return finish(std::move(e));
}

ExprPtr Parser::parse_condexpr() {
  Guard g(*this);
  const int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    auto e = node(ExprKind::kCondExpr, line);
    ExprPtr cond = parse_or();
    ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
    e->args.push_back(std::move(expr1));
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(other));
    expr1 = finish(std::move(e));
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    auto e = node(ExprKind::kOr, cur().line);
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_and());
    left = finish(std::move(e));
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    auto e = node(ExprKind::kAnd, cur().line);
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_not());
    left = finish(std::move(e));
  }
  return left;
}

ExprPtr Parser::parse_not() {
  Guard g(*this);
  if (is_name("not")) {
    auto e = node(ExprKind::kNot, cur().line);
    next();
    e->args.push_back(parse_not());
    return finish(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr expr = parse_math1();
  auto e = node(ExprKind::kCompare, line);
  e->args.push_back(std::move(expr));
  while (true) {
    CompareOp op;
    if (is_compare_op(cur(), op)) {
      next();
    } else if (skip_name("in")) {
      op = CompareOp::kIn;
    } else if (is_name("not") && look().type == Tok::kName && look().text == "in") {
      next();
      next();
      op = CompareOp::kNotIn;
    } else {
      break;
    }
    e->ops.push_back(op);
    e->args.push_back(parse_math1());
  }
  if (e->ops.empty()) return std::move(e->args[0]);
  return finish(std::move(e));
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    auto e = node(ExprKind::kBinary, cur().line);
    e->op = is_op("+") ? BinOp::kAdd : BinOp::kSub;
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_concat());
    left = finish(std::move(e));
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = node(ExprKind::kConcat, line);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return finish(std::move(e));
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (true) {
    BinOp op;
    if (is_op("*")) op = BinOp::kMul;
    else if (is_op("/")) op = BinOp::kDiv;
    else if (is_op("//")) op = BinOp::kFloorDiv;
    else if (is_op("%")) op = BinOp::kMod;
    else break;
    auto e = node(ExprKind::kBinary, cur().line);
    e->op = op;
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_pow());
    left = finish(std::move(e));
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    auto e = node(ExprKind::kBinary, cur().line);
    e->op = BinOp::kPow;
    next();
    e->args.push_back(std::move(left));
    e->args.push_back(parse_unary(true));
    left = finish(std::move(e));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Guard g(*this);
  ExprPtr n;
  if (is_op("-") || is_op("+")) {
    n = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().line);
    next();
    n->args.push_back(parse_unary(false));
    n = finish(std::move(n));
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.type == Tok::kName) {
    auto e = node(ExprKind::kConst, t.line);
    if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
    else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
    else if (t.text == "none" || t.text == "None") e->value = Value::none();
    else e->kind = ExprKind::kName, e->name = t.text;
    next();
    return e;
  }
  if (t.type == Tok::kString) {
    auto e = node(ExprKind::kConst, t.line);
    std::string s;
    while (cur().type == Tok::kString) {
      s += cur().text;
      next();
    }
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == Tok::kInt || t.type == Tok::kFloat) {
    auto e = node(ExprKind::kConst, t.line);
    e->value = t.type == Tok::kInt ? Value::integer(t.int_value) : Value::number(t.float_value);
    next();
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(false, true, nullptr, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  fail_unexpected();
}

ExprPtr Parser::parse_list() {
  auto e = node(ExprKind::kList, cur().line);
  expect_op("[");
  while (!is_op("]")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("]")) break;
    e->args.push_back(parse_expression());
  }
  expect_op("]");
  return finish(std::move(e));
}

ExprPtr Parser::parse_dict() {
  auto e = node(ExprKind::kDict, cur().line);
  expect_op("{");
  while (!is_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("}")) break;
    e->args.push_back(parse_expression());
    expect_op(":");
    e->args.push_back(parse_expression());
  }
  expect_op("}");
  return finish(std::move(e));
}

ExprPtr Parser::parse_postfix(ExprPtr n) {
  while (true) {
    if (is_op(".") || is_op("[")) n = parse_subscript(std::move(n));
    else if (is_op("(")) n = parse_call(std::move(n));
    else return n;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr n) {
  while (true) {
    if (is_op("|")) n = parse_filter(std::move(n), false);
    else if (is_name("is")) n = parse_test(std::move(n));
    else if (is_op("(")) n = parse_call(std::move(n));
    else return n;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr n) {
  const Token tok = cur();
  next();
  if (tok.text == ".") {
    const Token attr = cur();
    next();
    if (attr.type == Tok::kName) {
      auto e = node(ExprKind::kGetAttr, tok.line);
      e->name = attr.text;
      e->args.push_back(std::move(n));
      return finish(std::move(e));
    }
    if (attr.type != Tok::kInt) fail("expected name or number");
    auto e = node(ExprKind::kGetItem, tok.line);
    auto idx = node(ExprKind::kConst, attr.line);
    idx->value = Value::integer(attr.int_value);
    e->args.push_back(std::move(n));
    e->args.push_back(std::move(idx));
    return finish(std::move(e));
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  ExprPtr arg;
  if (args.size() == 1) {
    arg = std::move(args[0]);
  } else {
    arg = node(ExprKind::kTuple, tok.line);
    arg->args = std::move(args);
    arg = finish(std::move(arg));
  }
  if (arg->kind == ExprKind::kSlice) {  // slices bypass getitem: node[a:b:c]
    arg->args.insert(arg->args.begin(), std::move(n));
    return finish(std::move(arg));
  }
  auto e = node(ExprKind::kGetItem, tok.line);
  e->args.push_back(std::move(n));
  e->args.push_back(std::move(arg));
  return finish(std::move(e));
}

// A subscript or a slice (start:stop:step); slices get args {start, stop, step} here (object added later).
ExprPtr Parser::parse_subscribed() {
  Guard g(*this);
  const int line = cur().line;
  std::vector<ExprPtr> args;
  if (is_op(":")) {
    next();
    args.push_back(nullptr);
  } else {
    ExprPtr e = parse_expression();
    if (!is_op(":")) return e;
    next();
    args.push_back(std::move(e));
  }
  if (is_op(":")) args.push_back(nullptr);
  else if (!is_op("]") && !is_op(",")) args.push_back(parse_expression());
  else args.push_back(nullptr);
  if (is_op(":")) {
    next();
    args.push_back(!is_op("]") && !is_op(",") ? parse_expression() : nullptr);
  } else {
    args.push_back(nullptr);
  }
  auto s = node(ExprKind::kSlice, line);
  s->args = std::move(args);
  return finish(std::move(s));
}

ExprPtr Parser::parse_call(ExprPtr n) {
  auto e = node(ExprKind::kCall, cur().line);
  e->args.push_back(std::move(n));
  parse_call_args(*e);
  return finish(std::move(e));
}

void Parser::parse_call_args(Expr& call) {
  Guard g(*this);
  expect_op("(");
  bool require_comma = false;
  auto ensure = [&](bool ok) { if (!ok) fail("invalid syntax for function call expression"); };
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*")) {
      ensure(!call.dyn_args && !call.dyn_kwargs);
      next();
      call.dyn_args = parse_expression();
    } else if (is_op("**")) {
      ensure(!call.dyn_kwargs);
      next();
      call.dyn_kwargs = parse_expression();
    } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().text == "=") {
      ensure(!call.dyn_kwargs);
      std::string key = cur().text;
      next();
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      ensure(!call.dyn_args && !call.dyn_kwargs && call.kwargs.empty());
      call.args.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr n, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    auto e = node(ExprKind::kFilter, cur().line);
    e->name = expect_identifier();
    while (skip_op(".")) e->name += "." + expect_identifier();
    e->args.push_back(std::move(n));
    if (is_op("(")) parse_call_args(*e);
    n = finish(std::move(e));
  }
  return n;
}

ExprPtr Parser::parse_test(ExprPtr n) {
  auto e = node(ExprKind::kTest, cur().line);
  next();  // 'is'
  const bool negated = skip_name("not");
  e->name = expect_identifier();
  while (skip_op(".")) e->name += "." + expect_identifier();
  e->args.push_back(std::move(n));
  const Token& t = cur();
  const bool arg_start = t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                         t.type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{");
  if (is_op("(")) {
    parse_call_args(*e);
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  ExprPtr out = finish(std::move(e));
  if (!negated) return out;
  auto neg = node(ExprKind::kNot, out->line);
  neg->args.push_back(std::move(out));
  return finish(std::move(neg));
}

}  // namespace bunsen::text::jinja::detail
