// jinja::Value: the Python value model templates see (None, bool, int, float, str, list, tuple, dict,
// jinja2's Undefined, and objects: namespace, macro, loop, functions, bound methods). Values are cheap to
// copy: strings, containers and objects are shared and containers are immutable once built (the sandbox
// HF uses forbids mutating lists and dicts; only namespace attributes change).
// Not the evaluator: operators live in operators.h, str()/repr() here follow CPython exactly.
// Invariants: dict keeps insertion order (Python 3.7+); nesting depth of lists/dicts is bounded by
// kMaxValueDepth at construction, so every recursive walk (repr, ==, json, destruction) is bounded.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bunsen::text::jinja {

class Value;
class Dict;
class Interpreter;
using List = std::vector<Value>;

inline constexpr int kMaxValueDepth = 400;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kObject };

struct Heap {
  virtual ~Heap() = default;
};

struct CallArgs {
  List positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Objects with Python behaviour of their own (namespace, macro, loop, functions, bound methods).
class Object : public Heap {
 public:
  virtual const char* type_name() const = 0;
  virtual std::string repr() const;
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, CallArgs& args);
  // The attribute `name`, or nullopt where Python raises AttributeError.
  virtual std::optional<Value> attr(Interpreter& in, std::string_view name);
  virtual bool iterable() const { return false; }
  virtual List iterate() const;
  // Drops references to scopes and values so reference cycles (a macro stored in the scope it closes
  // over, a namespace holding itself) are freed when a render ends.
  virtual void release() {}
};

class Value {
 public:
  Value() = default;  // jinja2 Undefined without a name
  static Value undefined(std::string name = {}, std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s, bool markup = false);
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool markup() const { return markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const;  // bool/int/float
  const std::string& str() const;
  const List& items() const;  // list or tuple
  const Dict& dict() const;
  Object* object() const;
  const std::string& undefined_name() const;
  const std::string& undefined_hint() const;
  int depth() const;  // 0 for scalars, 1 + max child depth for containers
  const void* identity() const { return heap_.get(); }  // Python `is` for shared values

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<Heap> heap_;
};

// Insertion-ordered dict with Python key equality (1 == 1.0 == True); lookups are linear for small dicts
// and hashed past kLinearMax entries.
class Dict {
 public:
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const Value* find(const Value& key) const;  // throws TypeError for unhashable keys
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

 private:
  static constexpr size_t kLinearMax = 8;
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_multimap<uint64_t, uint32_t> index_;  // hash -> entry, built past kLinearMax
};

[[noreturn]] void fail(const std::string& message);  // Error("template", message)
[[noreturn]] void raise_undefined(const Value& u);  // jinja2's UndefinedError for this Undefined

const char* type_name(const Value& v);  // Python type name: 'str', 'NoneType', ...
bool truthy(const Value& v);
bool py_eq(const Value& a, const Value& b);
enum class CmpOp { kLt, kLe, kGt, kGe };
bool py_compare(const Value& a, const Value& b, CmpOp op);  // TypeError for unorderable types
uint64_t py_hash(const Value& v);                            // TypeError for unhashable types
std::string to_str(const Value& v);                          // Python str()
std::string repr(const Value& v);                            // Python repr()

}  // namespace bunsen::text::jinja
