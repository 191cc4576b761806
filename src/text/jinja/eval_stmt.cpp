// Statement execution (see interpreter.h): output, if, for (loop object, for-if filter, else, break,
// continue, recursive loops), set (names, tuples, namespace attributes, blocks), macros, call blocks,
// filter blocks, with, scopes. jinja2 quirk kept: a for-else runs unless some iteration reached the end
// of its body (an iteration left by break/continue does not count).
#include <memory>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/objects.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {

Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

std::string Interpreter::render_body(const Body& body, const ScopePtr& scope) {
  DepthGuard guard(*this);
  std::string out;
  exec(body, scope, out);
  return out;
}

void Interpreter::emit(std::string& out, const Value& v) {
  if (v.kind() == Kind::kString && !(autoescape_ && !v.markup())) out += v.str();
  else out += autoescape_ && !v.markup() ? py::html_escape(to_str(v)) : to_str(v);
  check_size(out.size());
}

void Interpreter::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope->set(t.name, v);
      return;
    case Target::Kind::kTuple: {
      if (!v.is_undefined() && !v.is_string() && !v.is_sequence() && v.kind() != Kind::kDict &&
          !(v.kind() == Kind::kObject && v.object()->iterable()))
        fail(strfmt("TypeError: cannot unpack non-iterable %s object", type_name(v)));
      List items = iterate(v);
      if (items.size() < t.items.size())
        fail(strfmt("ValueError: not enough values to unpack (expected %zu, got %zu)", t.items.size(), items.size()));
      if (items.size() > t.items.size())
        fail(strfmt("ValueError: too many values to unpack (expected %zu)", t.items.size()));
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
      return;
    }
    case Target::Kind::kNsAttr: {
      Value ns = resolve(t.name, *scope);
      auto* obj = ns.kind() == Kind::kObject ? dynamic_cast<NamespaceObject*>(ns.object()) : nullptr;
      if (!obj) fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      obj->attrs.set(Value::string(t.attr), v);
      return;
    }
  }
}

Value Interpreter::make_macro(const Stmt& def, const ScopePtr& scope, std::string name) {
  return own(std::make_shared<MacroObject>(def, scope, std::move(name)));
}

Flow Interpreter::exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(*this);
  step();
  switch (s.kind) {
    case StmtKind::kData:
      out += s.text;
      check_size(out.size());
      return Flow::kNormal;
    case StmtKind::kPrint:
      emit(out, eval(*s.expr, scope));
      return Flow::kNormal;
    case StmtKind::kIf:
      return exec(truthy(eval(*s.expr, scope)) ? s.body : s.else_body, scope, out);
    case StmtKind::kFor:
      return exec_for(s, scope, out);
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr, scope), scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      auto inner = std::make_shared<Scope>(scope);
      std::string buf;
      const Flow f = exec(s.body, inner, buf);
      if (f != Flow::kNormal) return f;
      Value v = Value::string(std::move(buf), autoescape_);
      if (s.expr) v = apply_filter_chain(*s.expr, std::move(v), inner);
      assign(s.target, v, scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->set(s.text, make_macro(s, scope, s.text));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      Value callee = eval(*s.expr->args[0], scope);
      CallArgs a;
      eval_call_args(*s.expr, 1, scope, a);
      for (const auto& kv : a.kwargs)
        if (kv.first == "caller") fail("TypeError: got multiple values for keyword argument 'caller'");
      a.kwargs.emplace_back("caller", make_macro(s, scope, ""));
      emit(out, call(callee, a));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Scope>(scope);
      std::string buf;
      const Flow f = exec(s.body, inner, buf);
      if (f != Flow::kNormal) return f;
      emit(out, apply_filter_chain(*s.expr, Value::string(std::move(buf), autoescape_), inner));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [target, value] : s.assigns) assign(target, eval(*value, scope), inner);
      return exec(s.body, inner, out);
    }
    case StmtKind::kScope: {
      auto inner = std::make_shared<Scope>(s.text == "block" ? root_ : scope);
      exec(s.body, inner, out);
      return Flow::kNormal;
    }
    case StmtKind::kAutoescape: {
      const bool saved = autoescape_;
      autoescape_ = truthy(eval(*s.expr, scope));
      Flow f;
      try {
        f = exec(s.body, std::make_shared<Scope>(scope), out);
      } catch (...) {
        autoescape_ = saved;
        throw;
      }
      autoescape_ = saved;
      return f;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kUnsupported:
      fail("TypeError: no loader for this environment specified ({% " + s.text + " %} needs one)");
  }
  fail("internal error: unknown statement");
}

Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  loop_into(s, eval(*s.expr, scope), scope, 0, out);
  return Flow::kNormal;
}

std::string Interpreter::run_for(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth) {
  std::string out;
  loop_into(s, iterable, scope, depth, out);
  return out;
}

// One run of a for statement over `iterable` at loop depth0 `depth` (recursive loops call loop(x) ->
// run_for -> here again with depth + 1).
void Interpreter::loop_into(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth, std::string& out) {
  DepthGuard guard(*this);
  List items = iterate(iterable);
  if (s.cond) {  // the for-if filter sees the loop target but not `loop`
    List kept;
    for (const auto& item : items) {
      step();
      auto tmp = std::make_shared<Scope>(scope);
      assign(s.target, item, tmp);
      if (truthy(eval(*s.cond, tmp))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObject>(std::move(items), depth, s.recursive ? &s : nullptr, scope);
  Value loop_value = own(loop);
  bool completed = false;
  const List& list = loop->items();
  for (size_t i = 0; i < list.size(); ++i) {
    step();
    loop->set_index(i);
    auto it = std::make_shared<Scope>(scope);
    assign(s.target, list[i], it);
    it->set("loop", loop_value);
    const Flow f = exec(s.body, it, out);
    if (f == Flow::kBreak) break;
    if (f == Flow::kNormal) completed = true;
  }
  if (!completed && !s.else_body.empty()) exec(s.else_body, std::make_shared<Scope>(scope), out);
}

}  // namespace bunsen::text::jinja
