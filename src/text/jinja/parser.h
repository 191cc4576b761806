// Jinja2 parser: tokens -> statement tree, following jinja2.parser.Parser production by production
// (parse_tuple, parse_condexpr, ..., parse_for, parse_set, parse_macro, ...) plus the two extensions HF
// enables (loopcontrols: break/continue; AssistantTracker: {% generation %}). Also jinja2's compile-time
// checks: unknown filters/tests outside if-branches, break/continue outside a loop, bad targets.
// Not the evaluator. Invariant: recursion depth is bounded (kMaxParseDepth, kMaxExprDepth).
#pragma once
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace bunsen::text::jinja {

// Parses a whole template. Throws Error("template", "TemplateSyntaxError: ...") on bad syntax.
Body parse_template(std::string_view source);

namespace detail {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}
  Body parse_all();

  // statements (parser.cpp)
  Body subparse(const std::vector<const char*>& end_tokens);
  Body parse_statements(const std::vector<const char*>& end_tokens, bool drop_needle);
  void parse_statement(Body& out);
  StmtPtr parse_autoescape();
  StmtPtr parse_if();
  StmtPtr parse_for();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  StmtPtr parse_block();
  StmtPtr parse_unsupported();
  void parse_signature(std::vector<Param>& params);
  Target parse_assign_target(bool with_tuple, bool name_only, const char* extra_end, bool with_namespace);

  // expressions (parser_expr.cpp)
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const char* extra_end, bool explicit_parens);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr node);
  void parse_call_args(Expr& call);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  // token stream
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  void next() { if (i_ + 1 < t_.size()) ++i_; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool is_op(const char* o) const { return cur().type == Tok::kOp && cur().text == o; }
  bool skip_name(const char* n);
  bool skip_op(const char* o);
  void expect_op(const char* o);
  void expect_name(const char* n);
  void expect(Tok type);
  std::string expect_identifier();
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void fail_unexpected() const;
  bool is_tuple_end(const char* extra_end) const;
  ExprPtr node(ExprKind kind, int line) const;
  ExprPtr finish(ExprPtr e) const;  // computes depth, enforces kMaxExprDepth

  struct Guard {
    explicit Guard(Parser& p);
    ~Guard() { --p_.depth_; }
    Parser& p_;
  };

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // break/continue are only valid inside a for loop of the same function
};

// Post-parse checks jinja2 does at compile time (unknown filter/test names outside if/condexpr) and the
// static facts macros need (uses caller/varargs/kwargs).
void analyze(Body& body);

}  // namespace detail
}  // namespace bunsen::text::jinja
