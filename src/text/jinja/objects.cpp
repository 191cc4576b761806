// Namespace, Macro, LoopContext, functions and bound methods (see objects.h), with jinja2.runtime's
// argument binding for macros (positional, keywords, defaults, caller/varargs/kwargs).
// Not the evaluator. Invariant: a macro call gets a fresh scope whose parent is its closure.
#include "text/jinja/objects.h"

#include "core/status.h"
#include "text/jinja/builtins.h"

namespace bunsen::text::jinja {

std::string NamespaceObject::repr() const {
  if (in_repr_) return "<Namespace {...}>";
  in_repr_ = true;
  std::string out;
  try {
    out = "<Namespace " + jinja::repr(Value::dict(attrs)) + ">";
  } catch (...) {
    in_repr_ = false;
    throw;
  }
  in_repr_ = false;
  return out;
}

std::optional<Value> NamespaceObject::attr(Interpreter&, std::string_view name) {
  if (const Value* v = attrs.find(name)) return *v;
  return std::nullopt;
}

std::string BoundMethod::repr() const {
  return "<built-in method " + name_ + " of " + std::string(jinja::type_name(self_)) + " object>";
}

Value BoundMethod::call(Interpreter& in, CallArgs& args) { return call_method(in, self_, name_, args); }

// ---- Macro ----

Value MacroObject::call(Interpreter& in, CallArgs& args) {
  Interpreter::DepthGuard guard(in);
  const std::vector<Param>& params = def_.params;
  const size_t n = params.size();
  auto scope = std::make_shared<Scope>(closure_);
  std::vector<std::pair<std::string, Value>> kwargs = std::move(args.kwargs);
  auto pop_kwarg = [&](const std::string& name) -> std::optional<Value> {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      if (it->first == name) {
        Value v = std::move(it->second);
        kwargs.erase(it);
        return v;
      }
    return std::nullopt;
  };
  for (size_t i = 0; i < n; ++i) {
    std::optional<Value> v;
    if (i < args.positional.size()) v = args.positional[i];
    else v = pop_kwarg(params[i].name);
    if (!v) {
      v = params[i].default_value ? in.eval(*params[i].default_value, scope)
                                  : Value::undefined(params[i].name, "UndefinedError: parameter '" + params[i].name +
                                                                         "' was not provided");
    }
    scope->set(params[i].name, std::move(*v));
  }
  if (def_.uses_caller) {
    std::optional<Value> c = pop_kwarg("caller");
    scope->set("caller", c ? *c : Value::undefined("caller", "UndefinedError: No caller defined"));
  }
  if (def_.uses_kwargs) {
    Dict d;
    for (auto& [k, v] : kwargs) d.set(Value::string(k), std::move(v));
    scope->set("kwargs", Value::dict(std::move(d)));
  } else if (!kwargs.empty()) {
    fail(strfmt("TypeError: macro '%s' takes no keyword argument '%s'", name_.c_str(), kwargs[0].first.c_str()));
  }
  if (def_.uses_varargs) {
    List rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  } else if (args.positional.size() > n) {
    fail(strfmt("TypeError: macro '%s' takes not more than %zu argument(s)", name_.c_str(), n));
  }
  return Value::string(in.render_body(def_.body, scope));
}

std::optional<Value> MacroObject::attr(Interpreter&, std::string_view name) {
  if (name == "name") return name_.empty() ? Value::none() : Value::string(name_);
  if (name == "arguments") {
    List names;
    for (const auto& p : def_.params) names.push_back(Value::string(p.name));
    return Value::tuple(std::move(names));
  }
  if (name == "catch_kwargs") return Value::boolean(def_.uses_kwargs);
  if (name == "catch_varargs") return Value::boolean(def_.uses_varargs);
  if (name == "caller") return Value::boolean(def_.uses_caller);
  return std::nullopt;
}

// ---- Loop ----

namespace {

class LoopMethod : public Object {
 public:
  LoopMethod(std::shared_ptr<LoopObject> loop, bool is_cycle) : loop_(std::move(loop)), cycle_(is_cycle) {}
  const char* type_name() const override { return "method"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs& args) override { return cycle_ ? loop_->cycle(args) : loop_->changed(args); }

 private:
  std::shared_ptr<LoopObject> loop_;
  bool cycle_;
};

}  // namespace

std::string LoopObject::repr() const {
  return strfmt("<LoopContext %zu/%zu>", index0_ + 1, items_.size());
}

Value LoopObject::call(Interpreter& in, CallArgs& args) {
  if (!stmt_) fail("TypeError: The loop must be decorated with 'recursive' to be called recursively.");
  if (args.positional.size() != 1 || !args.kwargs.empty()) fail("TypeError: loop() takes exactly one argument");
  return Value::string(in.run_for(*stmt_, args.positional[0], scope_, depth0_ + 1));
}

std::optional<Value> LoopObject::attr(Interpreter& in, std::string_view name) {
  (void)in;
  const auto n = static_cast<int64_t>(items_.size());
  const auto i = static_cast<int64_t>(index0_);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(depth0_ + 1);
  if (name == "depth0") return Value::integer(depth0_);
  if (name == "previtem") return i > 0 ? items_[index0_ - 1] : Value::undefined("previtem", "UndefinedError: there is no previous item");
  if (name == "nextitem") return i + 1 < n ? items_[index0_ + 1] : Value::undefined("nextitem", "UndefinedError: there is no next item");
  if (name == "cycle" || name == "changed") {
    // The loop object is owned by a Value already; share it with the method.
    return in.own(std::make_shared<LoopMethod>(shared_from_this(), name == "cycle"));
  }
  return std::nullopt;
}

List LoopObject::iterate() const {
  return List(items_.begin() + static_cast<std::ptrdiff_t>(std::min(index0_ + 1, items_.size())), items_.end());
}

Value LoopObject::cycle(CallArgs& args) const {
  if (args.positional.empty()) fail("TypeError: no items for cycling given");
  return args.positional[index0_ % args.positional.size()];
}

Value LoopObject::changed(CallArgs& args) {
  Value now = Value::tuple(args.positional);
  if (has_changed_ && py_eq(now, last_changed_)) return Value::boolean(false);
  has_changed_ = true;
  last_changed_ = std::move(now);
  return Value::boolean(true);
}

}  // namespace bunsen::text::jinja
