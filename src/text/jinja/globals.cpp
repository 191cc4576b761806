// Template globals (jinja2's DEFAULT_NAMESPACE under the sandbox, plus HF's raise_exception and
// strftime_now), Python argument binding for builtins, and generator values. lipsum is not provided
// (random text has no place in a prompt); calling it fails.
#include <ctime>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/objects.h"

namespace bunsen::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

class GeneratorObject : public Object {
 public:
  GeneratorObject(List items, const char* type) : items_(std::move(items)), type_(type) {}
  const char* type_name() const override { return type_; }
  std::string repr() const override { return std::string("<") + type_ + " object>"; }
  bool iterable() const override { return true; }
  List iterate() const override {
    if (consumed_) return {};
    consumed_ = true;
    return items_;
  }

 private:
  List items_;
  const char* type_;
  mutable bool consumed_ = false;
};

class JoinerObject : public Object {
 public:
  explicit JoinerObject(std::string sep) : sep_(std::move(sep)) {}
  const char* type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

class CyclerObject : public Object, public std::enable_shared_from_this<CyclerObject> {
 public:
  explicit CyclerObject(List items) : items_(std::move(items)) {}
  const char* type_name() const override { return "Cycler"; }
  std::optional<Value> attr(Interpreter& in, std::string_view name) override;
  void release() override { items_.clear(); }
  Value current() const { return items_[pos_]; }
  Value advance() {
    Value v = items_[pos_];
    pos_ = (pos_ + 1) % items_.size();
    return v;
  }
  void reset() { pos_ = 0; }

 private:
  List items_;
  size_t pos_ = 0;
};

class CyclerMethod : public Object {
 public:
  CyclerMethod(std::shared_ptr<CyclerObject> c, bool next) : c_(std::move(c)), next_(next) {}
  const char* type_name() const override { return "method"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs&) override {
    if (next_) return c_->advance();
    c_->reset();
    return Value::none();
  }

 private:
  std::shared_ptr<CyclerObject> c_;
  bool next_;
};

std::optional<Value> CyclerObject::attr(Interpreter& in, std::string_view name) {
  if (items_.empty()) return std::nullopt;
  if (name == "current") return current();
  if (name == "next" || name == "reset") return in.own(std::make_shared<CyclerMethod>(shared_from_this(), name == "next"));
  return std::nullopt;
}

int64_t int_arg(const Value& v, const char* fn) {
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return v.as_int();
  fail(strfmt("TypeError: '%s' object cannot be interpreted as an integer (%s)", type_name(v), fn));
}

Value fn_range(Interpreter&, CallArgs& a) {
  if (!a.kwargs.empty()) fail("TypeError: range() takes no keyword arguments");
  const size_t n = a.positional.size();
  if (n < 1 || n > 3) fail(strfmt("TypeError: range expected 1 to 3 arguments, got %zu", n));
  int64_t start = 0, stop, step = 1;
  if (n == 1) {
    stop = int_arg(a.positional[0], "range");
  } else {
    start = int_arg(a.positional[0], "range");
    stop = int_arg(a.positional[1], "range");
    if (n == 3) step = int_arg(a.positional[2], "range");
  }
  if (step == 0) fail("ValueError: range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && stop > start) count = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = ((__int128)start - stop - step - 1) / -step;
  if (count > kMaxRange)
    fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

void update_dict(Interpreter& in, Dict& d, const Value& src) {
  if (src.kind() == Kind::kDict) {
    for (const auto& [k, v] : src.dict().entries()) d.set(k, v);
    return;
  }
  for (const Value& pair : in.iterate(src)) {
    List kv = in.iterate(pair);
    if (kv.size() != 2) fail("ValueError: dictionary update sequence element has wrong length");
    d.set(kv[0], kv[1]);
  }
}

Value fn_dict(Interpreter& in, CallArgs& a) {
  if (a.positional.size() > 1) fail("TypeError: dict expected at most 1 argument");
  Dict d;
  if (!a.positional.empty()) update_dict(in, d, a.positional[0]);
  for (auto& [k, v] : a.kwargs) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Value fn_joiner(Interpreter&, CallArgs& a) {
  ArgReader r(a, "joiner");
  Value sep = r.get_or(0, "sep", Value::string(", "));
  r.done(1);
  return Value::object(std::make_shared<JoinerObject>(to_str(sep)));
}

Value fn_cycler(Interpreter& in, CallArgs& a) {
  if (a.positional.empty()) fail("RuntimeError: at least one item has to be provided");
  return in.own(std::make_shared<CyclerObject>(a.positional));
}

Value fn_lipsum(Interpreter&, CallArgs&) { fail("lipsum() is not supported by bunsen's template engine"); }

Value fn_raise_exception(Interpreter&, CallArgs& a) {
  ArgReader r(a, "raise_exception");
  Value msg = r.get_or(0, "message", Value::none());
  r.done(1);
  throw Error("template", to_str(msg));
}

Value fn_strftime_now(Interpreter&, CallArgs& a) {
  ArgReader r(a, "strftime_now");
  std::optional<Value> f = r.get(0, "format");
  r.done(1);
  if (!f || !f->is_string()) fail("TypeError: strftime_now() argument must be str");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
  if (n == 0 && !f->str().empty()) fail("ValueError: strftime format too long or empty result");
  return Value::string(std::string(buf, n));
}

}  // namespace

std::optional<Value> ArgReader::get(size_t index, const char* name) {
  std::optional<Value> kw;
  for (auto it = args_.kwargs.begin(); it != args_.kwargs.end(); ++it)
    if (it->first == name) {
      kw = std::move(it->second);
      args_.kwargs.erase(it);
      break;
    }
  if (index < args_.positional.size()) {
    if (kw) fail(strfmt("TypeError: %s() got multiple values for argument '%s'", fn_, name));
    return args_.positional[index];
  }
  return kw;
}

void ArgReader::done(size_t max_positional) {
  if (args_.positional.size() > max_positional)
    fail(strfmt("TypeError: %s() takes at most %zu positional arguments (%zu given)", fn_, max_positional,
                args_.positional.size()));
  if (!args_.kwargs.empty())
    fail(strfmt("TypeError: %s() got an unexpected keyword argument '%s'", fn_, args_.kwargs[0].first.c_str()));
}

Value make_generator(List items, const char* type_name) {
  return Value::object(std::make_shared<GeneratorObject>(std::move(items), type_name));
}

Value make_namespace(Interpreter& in, CallArgs& a) {
  if (a.positional.size() > 1) fail("TypeError: dict expected at most 1 argument");
  auto ns = std::make_shared<NamespaceObject>();
  if (!a.positional.empty()) update_dict(in, ns->attrs, a.positional[0]);
  for (auto& [k, v] : a.kwargs) ns->attrs.set(Value::string(k), v);
  return in.own(ns);
}

std::optional<Value> builtin_global(std::string_view name) {
  struct Entry {
    const char* name;
    FunctionObject::Fn fn;
  };
  static const Entry kTable[] = {
      {"range", fn_range},   {"dict", fn_dict},       {"namespace", make_namespace},
      {"joiner", fn_joiner}, {"cycler", fn_cycler},   {"lipsum", fn_lipsum},
      {"raise_exception", fn_raise_exception},        {"strftime_now", fn_strftime_now},
  };
  static const std::vector<Value> kValues = [] {
    std::vector<Value> v;
    for (const auto& e : kTable) v.push_back(Value::object(std::make_shared<FunctionObject>(e.name, e.fn)));
    return v;
  }();
  for (size_t i = 0; i < std::size(kTable); ++i)
    if (name == kTable[i].name) return kValues[i];
  return std::nullopt;
}

}  // namespace bunsen::text::jinja
