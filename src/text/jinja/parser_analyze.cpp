// Post-parse analysis (see parser.h): jinja2's compile-time "No filter/test named ..." check, which it
// skips inside if-statements and conditional expressions ("soft" frames: there the error waits until
// the filter runs), and the caller/varargs/kwargs usage of macro bodies (jinja2's find_undeclared).
#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"

namespace bunsen::text::jinja::detail {
namespace {

void check_expr(const Expr* e, bool soft);

void check_body(const Body& body, bool soft);

void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !jinja_has_filter(e->name))
    throw Error("template", strfmt("TemplateAssertionError: No filter named '%s'. (line %d)", e->name.c_str(), e->line));
  if (!soft && e->kind == ExprKind::kTest && !jinja_has_test(e->name))
    throw Error("template", strfmt("TemplateAssertionError: No test named '%s'. (line %d)", e->name.c_str(), e->line));
  for (const auto& a : e->args) check_expr(a.get(), soft);
  for (const auto& kv : e->kwargs) check_expr(kv.second.get(), soft);
  check_expr(e->dyn_args.get(), soft);
  check_expr(e->dyn_kwargs.get(), soft);
}

void check_stmt(const Stmt& s, bool soft) {
  switch (s.kind) {
    case StmtKind::kIf:
      check_expr(s.expr.get(), true);
      check_body(s.body, true);
      check_body(s.else_body, true);
      return;
    case StmtKind::kFor:
      check_expr(s.expr.get(), soft);
      check_expr(s.cond.get(), false);
      check_body(s.body, false);
      check_body(s.else_body, false);
      return;
    case StmtKind::kSet: case StmtKind::kPrint: case StmtKind::kCallBlock:
      check_expr(s.expr.get(), soft);
      break;
    case StmtKind::kWith:
      for (const auto& a : s.assigns) check_expr(a.second.get(), soft);
      break;
    default:
      check_expr(s.expr.get(), false);
      break;
  }
  for (const auto& p : s.params) check_expr(p.default_value.get(), false);
  check_body(s.body, false);
  check_body(s.else_body, false);
}

void check_body(const Body& body, bool soft) {
  for (const auto& s : body) check_stmt(*s, soft);
}

// find_undeclared(body, {caller, varargs, kwargs}): loads count unless a store of the name came first.
struct Uses {
  bool seen[3] = {false, false, false};
  bool stored[3] = {false, false, false};
  static int slot(const std::string& n) { return n == "caller" ? 0 : n == "varargs" ? 1 : n == "kwargs" ? 2 : -1; }
  void load(const std::string& n) {
    int k = slot(n);
    if (k >= 0 && !stored[k]) seen[k] = true;
  }
  void store(const std::string& n) {
    int k = slot(n);
    if (k >= 0 && !seen[k]) stored[k] = true;
  }
  void target(const Target& t) {
    if (t.kind == Target::Kind::kTuple) for (const auto& i : t.items) target(i);
    else store(t.name);
  }
  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::kName) load(e->name);
    for (const auto& a : e->args) expr(a.get());
    for (const auto& kv : e->kwargs) expr(kv.second.get());
    expr(e->dyn_args.get());
    expr(e->dyn_kwargs.get());
  }
  void body(const Body& b) {
    for (const auto& s : b) stmt(*s);
  }
  void stmt(const Stmt& s) {
    if (s.kind == StmtKind::kScope && s.text == "block") return;  // jinja2 does not look into blocks
    if (s.kind == StmtKind::kMacro) store(s.text);
    target(s.target);
    for (const auto& a : s.assigns) {
      target(a.first);
      expr(a.second.get());
    }
    for (const auto& p : s.params) {
      store(p.name);
      expr(p.default_value.get());
    }
    expr(s.expr.get());
    expr(s.cond.get());
    body(s.body);
    body(s.else_body);
  }
};

void annotate(Body& body);

void annotate_stmt(Stmt& s) {
  if (s.kind == StmtKind::kMacro || s.kind == StmtKind::kCallBlock) {
    Uses u;
    u.body(s.body);
    auto has_param = [&](const char* n) {
      for (const auto& p : s.params) if (p.name == n) return true;
      return false;
    };
    s.uses_caller = u.seen[0] && !has_param("caller");
    s.uses_varargs = u.seen[1] && !has_param("varargs");
    s.uses_kwargs = u.seen[2] && !has_param("kwargs");
  }
  annotate(s.body);
  annotate(s.else_body);
}

void annotate(Body& body) {
  for (auto& s : body) annotate_stmt(*s);
}

}  // namespace

void analyze(Body& body) {
  check_body(body, false);
  annotate(body);
}

}  // namespace bunsen::text::jinja::detail
