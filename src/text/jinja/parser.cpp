// Jinja2 statement grammar (see parser.h): subparse/parse_statements and one function per tag, as in
// jinja2.parser, plus the token-stream helpers. Not expressions (parser_expr.cpp) or checks
// (parser_analyze.cpp). Invariant: parse_statement recursion is depth-guarded.
#include "text/jinja/parser.h"

#include "core/status.h"
#include "text/jinja/builtins.h"

namespace bunsen::text::jinja {
namespace detail {

bool Parser::skip_name(const char* n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

bool Parser::skip_op(const char* o) {
  if (!is_op(o)) return false;
  next();
  return true;
}

void Parser::fail(const std::string& msg) const {
  throw Error("template", strfmt("TemplateSyntaxError: %s (line %d)", msg.c_str(), cur().line));
}

void Parser::fail_unexpected() const {
  const Token& t = cur();
  switch (t.type) {
    case Tok::kEof: fail("unexpected end of template");
    case Tok::kVarEnd: fail("unexpected end of print statement");
    case Tok::kBlockEnd: fail("unexpected end of statement block");
    case Tok::kData: case Tok::kVarBegin: case Tok::kBlockBegin: fail("unexpected template data");
    default: fail("unexpected '" + t.text + "'");
  }
}

void Parser::expect_op(const char* o) {
  if (!skip_op(o)) fail_unexpected();
}

void Parser::expect_name(const char* n) {
  if (!skip_name(n)) fail(std::string("expected '") + n + "'");
}

void Parser::expect(Tok type) {
  if (cur().type != type) fail_unexpected();
  next();
}

std::string Parser::expect_identifier() {
  if (cur().type != Tok::kName) fail_unexpected();
  std::string s = cur().text;
  next();
  return s;
}

Body Parser::parse_all() {
  Body body = subparse({});
  analyze(body);
  return body;
}

Body Parser::subparse(const std::vector<const char*>& end_tokens) {
  Body body;
  while (cur().type != Tok::kEof) {
    const Token& t = cur();
    if (t.type == Tok::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kData;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == Tok::kVarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = cur().line;
      s->expr = parse_tuple(false, true, nullptr, false);
      body.push_back(std::move(s));
      expect(Tok::kVarEnd);
    } else if (t.type == Tok::kBlockBegin) {
      next();
      for (const char* e : end_tokens)
        if (is_name(e)) return body;
      parse_statement(body);
      expect(Tok::kBlockEnd);
    } else {
      fail_unexpected();
    }
  }
  return body;
}

Body Parser::parse_statements(const std::vector<const char*>& end_tokens, bool drop_needle) {
  skip_op(":");
  expect(Tok::kBlockEnd);
  Body body = subparse(end_tokens);
  if (cur().type == Tok::kEof) {
    std::string want;
    for (const char* e : end_tokens) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
    fail("Unexpected end of template. Jinja was looking for the following tags: " + want);
  }
  if (drop_needle) next();
  return body;
}

void Parser::parse_statement(Body& out) {
  Guard g(*this);
  if (cur().type != Tok::kName) fail("tag name expected");
  const std::string tag = cur().text;
  const int line = cur().line;
  StmtPtr s;
  if (tag == "for") s = parse_for();
  else if (tag == "if") s = parse_if();
  else if (tag == "set") s = parse_set();
  else if (tag == "macro") s = parse_macro();
  else if (tag == "call") s = parse_call_block();
  else if (tag == "filter") s = parse_filter_block();
  else if (tag == "with") s = parse_with();
  else if (tag == "block" || tag == "generation") s = parse_block();
  else if (tag == "autoescape") s = parse_autoescape();
  else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends") s = parse_unsupported();
  else if (tag == "print") {
    next();
    bool first = true;
    while (cur().type != Tok::kBlockEnd) {
      if (!first) expect_op(",");
      first = false;
      auto p = std::make_unique<Stmt>();
      p->kind = StmtKind::kPrint;
      p->line = line;
      p->expr = parse_expression();
      out.push_back(std::move(p));
    }
    return;
  } else if (tag == "break" || tag == "continue") {
    next();
    if (loop_depth_ == 0) fail("'" + tag + "' outside loop");
    s = std::make_unique<Stmt>();
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
  } else {
    fail("Encountered unknown tag '" + tag + "'.");
  }
  s->line = line;
  out.push_back(std::move(s));
}

StmtPtr Parser::parse_if() {
  next();
  auto result = std::make_unique<Stmt>();
  result->kind = StmtKind::kIf;
  Stmt* n = result.get();
  while (true) {
    n->expr = parse_tuple(false, false, nullptr, false);
    n->body = parse_statements({"elif", "else", "endif"}, false);
    const std::string which = cur().text;
    next();
    if (which == "elif") {
      auto e = std::make_unique<Stmt>();
      e->kind = StmtKind::kIf;
      e->line = cur().line;
      Stmt* raw = e.get();
      n->else_body.push_back(std::move(e));
      n = raw;
      continue;
    }
    if (which == "else") n->else_body = parse_statements({"endif"}, true);
    break;
  }
  return result;
}

StmtPtr Parser::parse_for() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFor;
  s->target = parse_assign_target(true, false, "in", false);
  expect_name("in");
  s->expr = parse_tuple(false, false, "recursive", false);
  if (skip_name("if")) s->cond = parse_expression();
  s->recursive = skip_name("recursive");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  const bool has_else = cur().text == "else";
  next();
  if (has_else) s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_set() {
  next();
  auto s = std::make_unique<Stmt>();
  s->target = parse_assign_target(true, false, nullptr, true);
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    s->expr = parse_tuple(false, true, nullptr, false);
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

namespace {

bool is_reserved_const(const std::string& n) {
  return n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None";
}

}  // namespace

Target Parser::parse_assign_target(bool with_tuple, bool name_only, const char* extra_end, bool with_namespace) {
  Target t;
  if (name_only) {
    t.name = expect_identifier();
    if (is_reserved_const(t.name)) fail("can't assign to '" + t.name + "'");
    return t;
  }
  if (with_namespace && cur().type == Tok::kName && look().type == Tok::kOp && look().text == ".") {
    t.kind = Target::Kind::kNsAttr;
    t.name = expect_identifier();
    next();
    t.attr = expect_identifier();
    return t;
  }
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
  struct Convert {
    const Parser& p;
    Target operator()(const Expr& x) const {
      Target r;
      if (x.kind == ExprKind::kName) {
        r.name = x.name;
      } else if (x.kind == ExprKind::kTuple) {
        r.kind = Target::Kind::kTuple;
        for (const auto& item : x.args) r.items.push_back((*this)(*item));
      } else {
        p.fail("can't assign to this expression");
      }
      return r;
    }
  };
  return Convert{*this}(*e);
}

void Parser::parse_signature(std::vector<Param>& params) {
  expect_op("(");
  bool has_default = false;
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    Param p;
    p.name = parse_assign_target(false, true, nullptr, false).name;
    if (skip_op("=")) {
      p.default_value = parse_expression();
      has_default = true;
    } else if (has_default) {
      fail("non-default argument follows default argument");
    }
    params.push_back(std::move(p));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kMacro;
  s->text = parse_assign_target(false, true, nullptr, false).name;
  parse_signature(s->params);
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_call_block() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kCallBlock;
  if (is_op("(")) parse_signature(s->params);
  s->expr = parse_expression();
  if (s->expr->kind != ExprKind::kCall) fail("expected call");
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endcall"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_filter_block() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFilterBlock;
  s->expr = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kWith;
  while (cur().type != Tok::kBlockEnd) {
    if (!s->assigns.empty()) expect_op(",");
    Target t = parse_assign_target(true, false, nullptr, false);
    expect_op("=");
    s->assigns.emplace_back(std::move(t), parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

// {% block name [scoped] [required] %} ... {% endblock [name] %} and HF's {% generation %} ... {% endgeneration %}
StmtPtr Parser::parse_block() {
  const bool generation = cur().text == "generation";
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kScope;
  const int saved = loop_depth_;
  loop_depth_ = 0;
  if (generation) {
    s->body = parse_statements({"endgeneration"}, true);
  } else {
    s->text = "block";
    const std::string name = expect_identifier();
    skip_name("scoped");
    skip_name("required");
    s->body = parse_statements({"endblock"}, true);
    skip_name(name.c_str());
  }
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_autoescape() {
  next();
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kAutoescape;
  s->expr = parse_expression();
  s->body = parse_statements({"endautoescape"}, true);
  return s;
}

// include / import / from / extends parse (loosely) but fail when executed: HF's environment has no loader.
StmtPtr Parser::parse_unsupported() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kUnsupported;
  s->text = cur().text;
  next();
  while (cur().type != Tok::kBlockEnd && cur().type != Tok::kEof) next();
  return s;
}

}  // namespace detail

Body parse_template(std::string_view source) { return detail::Parser(tokenize(source)).parse_all(); }

}  // namespace bunsen::text::jinja
