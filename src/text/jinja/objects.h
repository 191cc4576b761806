// The Python objects a template can hold besides plain data: jinja2's Namespace, Macro (also `caller`),
// LoopContext (`loop`), plain functions (globals) and bound methods of str/list/dict values.
// Not the evaluator. Invariant: objects that keep scopes or values alive (namespace, macro, loop) are
// registered with the Interpreter, which release()s them when rendering ends (breaks reference cycles).
#pragma once
#include <memory>
#include <string>

#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace bunsen::text::jinja {

class NamespaceObject : public Object {
 public:
  Dict attrs;
  const char* type_name() const override { return "Namespace"; }
  std::string repr() const override;
  std::optional<Value> attr(Interpreter& in, std::string_view name) override;
  void release() override { attrs = Dict(); }

 private:
  mutable bool in_repr_ = false;  // Python prints a self-containing dict as {...}
};

class FunctionObject : public Object {
 public:
  using Fn = Value (*)(Interpreter&, CallArgs&);
  FunctionObject(const char* name, Fn fn) : name_(name), fn_(fn) {}
  const char* type_name() const override { return "function"; }
  std::string repr() const override { return std::string("<function ") + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }

 private:
  const char* name_;
  Fn fn_;
};

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  const char* type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;

 private:
  Value self_;
  std::string name_;
};

// A {% macro %}, or the body of a {% call %} block (`caller`: anonymous, name_ empty).
class MacroObject : public Object {
 public:
  MacroObject(const Stmt& def, ScopePtr closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {}
  const char* type_name() const override { return "Macro"; }
  std::string repr() const override { return name_.empty() ? "<Macro anonymous>" : "<Macro '" + name_ + "'>"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;
  std::optional<Value> attr(Interpreter& in, std::string_view name) override;
  void release() override { closure_.reset(); }

 private:
  const Stmt& def_;
  ScopePtr closure_;
  std::string name_;
};

class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  LoopObject(List items, int depth0, const Stmt* recursive_stmt, ScopePtr scope)
      : items_(std::move(items)), depth0_(depth0), stmt_(recursive_stmt), scope_(std::move(scope)) {}
  void set_index(size_t i) { index0_ = i; }
  const List& items() const { return items_; }
  const char* type_name() const override { return "LoopContext"; }
  std::string repr() const override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;  // recursive loops: loop(children)
  std::optional<Value> attr(Interpreter& in, std::string_view name) override;
  bool iterable() const override { return true; }
  List iterate() const override;
  void release() override { scope_.reset(); last_changed_ = Value(); }

  Value cycle(CallArgs& args) const;
  Value changed(CallArgs& args);

 private:
  List items_;
  size_t index0_ = 0;
  int depth0_ = 0;
  const Stmt* stmt_;  // the for statement when declared `recursive`, else null
  ScopePtr scope_;
  bool has_changed_ = false;
  Value last_changed_;
};

}  // namespace bunsen::text::jinja
