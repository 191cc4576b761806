// Interpreter core (see interpreter.h): scopes, name resolution (scope chain -> render context ->
// globals), jinja2's sandboxed getattr/getitem, calls, iteration and the work limits.
// Not expression/statement evaluation (eval_expr.cpp, eval_stmt.cpp).
#include "text/jinja/interpreter.h"

#include <algorithm>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/objects.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

bool hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kList: case Kind::kDict: return false;
    case Kind::kTuple:
      for (const auto& x : v.items())
        if (!hashable(x)) return false;
      return true;
    default: return true;
  }
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(name, strfmt("UndefinedError: '%s object' has no attribute '%s'", type_name(obj), name.c_str()));
}

}  // namespace

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get())
    for (const auto& [k, v] : s->vars_)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, x] : vars_)
    if (k == name) {
      x = std::move(v);
      return;
    }
  vars_.emplace_back(name, std::move(v));
}

Interpreter::~Interpreter() {
  for (auto& w : owned_)
    if (auto o = w.lock()) o->release();
}

Interpreter::DepthGuard::DepthGuard(Interpreter& in) : in_(in) {
  if (++in_.depth_ > in_.limits_.max_depth) {
    --in_.depth_;
    fail(strfmt("template recursion deeper than %d levels", in_.limits_.max_depth));
  }
}

Value Interpreter::own(std::shared_ptr<Object> o) {
  if (owned_.size() >= prune_at_) {  // forget objects already freed, so the list stays proportional to live ones
    owned_.erase(std::remove_if(owned_.begin(), owned_.end(), [](const auto& w) { return w.expired(); }), owned_.end());
    prune_at_ = std::max<size_t>(1024, 2 * owned_.size());
  }
  owned_.push_back(o);
  return Value::object(std::move(o));
}

void Interpreter::step(int64_t n) {
  steps_ += n < 1 ? 1 : n;
  if (steps_ > limits_.max_steps) fail(strfmt("template exceeded %lld steps", static_cast<long long>(limits_.max_steps)));
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    fail(strfmt("template output exceeds %zu bytes", limits_.max_output_bytes));
}

std::string Interpreter::render(const Body& body) {
  root_ = std::make_shared<Scope>(nullptr);
  std::string out;
  exec(body, root_, out);
  return out;
}

Value Interpreter::resolve(std::string_view name, const Scope& scope) const {
  if (const Value* v = scope.find(name)) return *v;
  if (const Value* v = context_.find(name)) return *v;
  if (auto g = builtin_global(name)) return *g;
  return Value::undefined(std::string(name));
}

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::kUndefined: raise_undefined(obj);
    case Kind::kObject:
      if (auto v = obj.object()->attr(*this, name)) return *v;
      break;
    case Kind::kDict:
      if (auto m = builtin_attribute(obj, name)) return *m;
      if (const Value* v = obj.dict().find(name)) return *v;
      break;
    default:
      if (auto m = builtin_attribute(obj, name)) return *m;
      break;
  }
  return missing_attribute(obj, std::string(name));
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined: raise_undefined(obj);
    case Kind::kDict:
      if (hashable(key))
        if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Kind::kList: case Kind::kTuple:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
        const auto n = static_cast<int64_t>(obj.items().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        return Value::undefined(to_str(key), strfmt("UndefinedError: '%s object' has no element %s", type_name(obj),
                                                    to_str(key).c_str()));
      }
      break;
    case Kind::kString:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
        std::u32string u = py::decode(obj.str());
        const auto n = static_cast<int64_t>(u.size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::string(py::encode(u.substr(static_cast<size_t>(i), 1)), obj.markup());
        return Value::undefined(to_str(key), strfmt("UndefinedError: 'str object' has no element %s", to_str(key).c_str()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (obj.kind() == Kind::kObject) {
      if (auto v = obj.object()->attr(*this, key.str())) return *v;
    } else if (auto m = builtin_attribute(obj, key.str())) {
      return *m;
    }
    return missing_attribute(obj, key.str());
  }
  return Value::undefined(to_str(key), strfmt("UndefinedError: '%s object' has no element %s", type_name(obj),
                                              repr(key).c_str()));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) raise_undefined(callee);
  if (callee.kind() == Kind::kObject && callee.object()->callable()) {
    DepthGuard guard(*this);
    step();
    return callee.object()->call(*this, args);
  }
  fail(strfmt("TypeError: '%s' object is not callable", type_name(callee)));
}

List Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return {};
    case Kind::kList: case Kind::kTuple: return v.items();
    case Kind::kString: {
      List out;
      for (char32_t c : py::decode(v.str())) {
        std::string s;
        py::append_utf8(s, c);
        out.push_back(Value::string(std::move(s), v.markup()));
      }
      step(static_cast<int64_t>(out.size()) / 8);
      return out;
    }
    case Kind::kDict: {
      List out;
      out.reserve(v.dict().size());
      for (const auto& e : v.dict().entries()) out.push_back(e.first);
      return out;
    }
    case Kind::kObject:
      if (v.object()->iterable()) return v.object()->iterate();
      [[fallthrough]];
    default:
      fail(strfmt("TypeError: '%s' object is not iterable", type_name(v)));
  }
}

}  // namespace bunsen::text::jinja
