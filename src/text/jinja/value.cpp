// jinja::Value construction, Python equality/ordering/hashing/truthiness and str()/repr() (see value.h).
// Not operators (operators.cpp) and not JSON (json.cpp).
// Invariant: container depth is checked at construction (kMaxValueDepth).
#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

struct StrHeap : Heap {
  std::string s;
};
struct ListHeap : Heap {
  List items;
  int depth = 1;
};
struct DictHeap : Heap {
  Dict d;
  int depth = 1;
};
struct UndefHeap : Heap {
  std::string name, hint;
};

int child_depth(const Value& v) { return v.depth(); }

int check_depth(int depth) {
  if (depth > kMaxValueDepth) fail(strfmt("value nested deeper than %d levels", kMaxValueDepth));
  return depth;
}

const std::string kEmpty;

}  // namespace

std::string Object::repr() const { return strfmt("<%s object>", type_name()); }
Value Object::call(Interpreter&, CallArgs&) { fail(strfmt("TypeError: '%s' object is not callable", type_name())); }
std::optional<Value> Object::attr(Interpreter&, std::string_view) { return std::nullopt; }
List Object::iterate() const { fail(strfmt("TypeError: '%s' object is not iterable", type_name())); }

void fail(const std::string& message) { throw Error("template", message); }

void raise_undefined(const Value& u) {
  if (!u.undefined_hint().empty()) fail(u.undefined_hint());
  if (!u.undefined_name().empty()) fail("UndefinedError: '" + u.undefined_name() + "' is undefined");
  fail("UndefinedError: value is undefined");
}

Value Value::undefined(std::string name, std::string hint) {
  Value v;
  if (!name.empty() || !hint.empty()) {
    auto h = std::make_shared<UndefHeap>();
    h->name = std::move(name);
    h->hint = std::move(hint);
    v.heap_ = std::move(h);
  }
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}

Value Value::string(std::string s, bool markup) {
  Value v;
  v.kind_ = Kind::kString;
  v.markup_ = markup;
  if (!s.empty()) {
    auto h = std::make_shared<StrHeap>();
    h->s = std::move(s);
    v.heap_ = std::move(h);
  }
  return v;
}

Value Value::list(List items) {
  auto h = std::make_shared<ListHeap>();
  int d = 0;
  for (const auto& x : items) d = std::max(d, child_depth(x));
  h->depth = check_depth(d + 1);
  h->items = std::move(items);
  Value v;
  v.kind_ = Kind::kList;
  v.heap_ = std::move(h);
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  auto h = std::make_shared<DictHeap>();
  int depth = 0;
  for (const auto& [k, x] : d.entries()) depth = std::max({depth, child_depth(k), child_depth(x)});
  h->depth = check_depth(depth + 1);
  h->d = std::move(d);
  Value v;
  v.kind_ = Kind::kDict;
  v.heap_ = std::move(h);
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.heap_ = std::move(o);
  return v;
}

double Value::as_float() const {
  return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int());
}

const std::string& Value::str() const {
  return heap_ && kind_ == Kind::kString ? static_cast<const StrHeap*>(heap_.get())->s : kEmpty;
}

const List& Value::items() const { return static_cast<const ListHeap*>(heap_.get())->items; }
const Dict& Value::dict() const { return static_cast<const DictHeap*>(heap_.get())->d; }
Object* Value::object() const { return static_cast<Object*>(heap_.get()); }

const std::string& Value::undefined_name() const {
  return heap_ && kind_ == Kind::kUndefined ? static_cast<const UndefHeap*>(heap_.get())->name : kEmpty;
}

const std::string& Value::undefined_hint() const {
  return heap_ && kind_ == Kind::kUndefined ? static_cast<const UndefHeap*>(heap_.get())->hint : kEmpty;
}

int Value::depth() const {
  if (kind_ == Kind::kList || kind_ == Kind::kTuple) return static_cast<const ListHeap*>(heap_.get())->depth;
  if (kind_ == Kind::kDict) return static_cast<const DictHeap*>(heap_.get())->depth;
  return 0;
}

// ---- Dict ----

const Value* Dict::find(const Value& key) const {
  if (entries_.size() <= kLinearMax) {
    if (key.kind() != Kind::kString) py_hash(key);  // unhashable keys raise even when the dict is small
    for (const auto& e : entries_)
      if (py_eq(e.first, key)) return &e.second;
    return nullptr;
  }
  auto [b, e] = index_.equal_range(py_hash(key));
  for (auto it = b; it != e; ++it)
    if (py_eq(entries_[it->second].first, key)) return &entries_[it->second].second;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  if (entries_.size() <= kLinearMax) {
    for (const auto& e : entries_)
      if (e.first.kind() == Kind::kString && e.first.str() == key) return &e.second;
    return nullptr;
  }
  auto [b, e] = index_.equal_range(std::hash<std::string_view>()(key));  // == py_hash of the str key
  for (auto it = b; it != e; ++it) {
    const Value& k = entries_[it->second].first;
    if (k.kind() == Kind::kString && k.str() == key) return &entries_[it->second].second;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  const uint64_t h = py_hash(key);
  if (entries_.size() <= kLinearMax) {
    for (auto& e : entries_)
      if (py_eq(e.first, key)) {
        e.second = std::move(value);
        return;
      }
  } else {
    auto [b, e] = index_.equal_range(h);
    for (auto it = b; it != e; ++it)
      if (py_eq(entries_[it->second].first, key)) {
        entries_[it->second].second = std::move(value);
        return;
      }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (entries_.size() == kLinearMax + 1) {
    for (uint32_t i = 0; i < entries_.size(); ++i) index_.emplace(py_hash(entries_[i].first), i);
  } else if (entries_.size() > kLinearMax + 1) {
    index_.emplace(h, static_cast<uint32_t>(entries_.size() - 1));
  }
}

// ---- Python semantics ----

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return v.markup() ? "Markup" : "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kObject: return v.object()->type_name();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return v.as_bool();
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_float() != 0.0;
    case Kind::kString: return !v.str().empty();
    case Kind::kList: case Kind::kTuple: return !v.items().empty();
    case Kind::kDict: return !v.dict().empty();
    case Kind::kObject: return true;
  }
  return false;
}

namespace {

bool numeric_eq(const Value& a, const Value& b) {
  if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) return a.as_int() == b.as_int();
  if (a.kind() == Kind::kFloat && b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
  // int vs float: exact comparison (Python compares the mathematical values)
  const double f = a.kind() == Kind::kFloat ? a.as_float() : b.as_float();
  const int64_t i = a.kind() == Kind::kFloat ? b.as_int() : a.as_int();
  if (std::isnan(f) || std::isinf(f) || f != std::floor(f)) return false;
  if (f < -9.3e18 || f > 9.3e18) return false;
  return static_cast<long double>(f) == static_cast<long double>(i);
}

}  // namespace

bool py_eq(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numeric_eq(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: case Kind::kTuple: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_eq(x[i], y[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* o = y.find(k);
        if (!o || !py_eq(v, *o)) return false;
      }
      return true;
    }
    case Kind::kObject: return a.object() == b.object();
    default: return false;
  }
}

namespace {

template <typename T>
bool apply(const T& x, const T& y, CmpOp op) {
  switch (op) {
    case CmpOp::kLt: return x < y;
    case CmpOp::kLe: return x <= y;
    case CmpOp::kGt: return x > y;
    case CmpOp::kGe: return x >= y;
  }
  return false;
}

const char* op_symbol(CmpOp op) {
  switch (op) {
    case CmpOp::kLt: return "<";
    case CmpOp::kLe: return "<=";
    case CmpOp::kGt: return ">";
    case CmpOp::kGe: return ">=";
  }
  return "?";
}

}  // namespace

bool py_compare(const Value& a, const Value& b, CmpOp op) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) return apply(a.as_int(), b.as_int(), op);
    return apply(static_cast<long double>(a.as_float()), static_cast<long double>(b.as_float()), op);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order for valid UTF-8.
    return apply(std::string_view(a.str()), std::string_view(b.str()), op);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_eq(x[i], y[i])) return py_compare(x[i], y[i], op);
    return apply(x.size(), y.size(), op);
  }
  fail(strfmt("TypeError: '%s' not supported between instances of '%s' and '%s'", op_symbol(op), type_name(a),
              type_name(b)));
}

uint64_t py_hash(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0x5bd1e995u;
    case Kind::kNone: return 0x27d4eb2du;
    case Kind::kBool: case Kind::kInt: return std::hash<int64_t>()(v.as_int());
    case Kind::kFloat: {
      const double f = v.as_float();
      if (f == std::floor(f) && f >= -9.2e18 && f <= 9.2e18) return std::hash<int64_t>()(static_cast<int64_t>(f));
      return std::hash<double>()(f);
    }
    case Kind::kString: return std::hash<std::string_view>()(v.str());
    case Kind::kTuple: {
      uint64_t h = 0x345678u;
      for (const auto& x : v.items()) h = (h ^ py_hash(x)) * 1000003u;
      return h;
    }
    case Kind::kObject: return std::hash<const void*>()(v.object());
    default: fail(strfmt("TypeError: unhashable type: '%s'", type_name(v)));
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return v.str();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.as_int());
    case Kind::kFloat: return py::float_repr(v.as_float());
    case Kind::kString: return v.markup() ? "Markup(" + py::repr(v.str()) + ")" : py::repr(v.str());
    case Kind::kList: case Kind::kTuple: {
      const bool tuple = v.kind() == Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      const List& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
      }
      return out + "}";
    }
    case Kind::kObject: return v.object()->repr();
  }
  return "";
}

}  // namespace bunsen::text::jinja
