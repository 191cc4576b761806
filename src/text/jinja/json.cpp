// JSON conversion and Python's json.dumps (see json.h), plus HF's tojson filter:
// tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) = json.dumps(...).
// Not a JSON parser (nlohmann's). Invariant: output size is checked while it grows.
#include "text/jinja/json.h"

#include <algorithm>

#include "core/status.h"
#include "text/jinja/filters_impl.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail(strfmt("JSON input nested deeper than %d levels", kMaxValueDepth));
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                   : Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.set(Value::string(k), from_json_at(x, depth + 1));
      return Value::dict(std::move(d));
    }
    default: fail("JSON value of an unsupported type (binary or discarded)");
  }
}

void escape_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  char buf[16];
  auto hex = [&](unsigned c) {
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += buf;
  };
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          hex(static_cast<unsigned>(c));
        } else if (ensure_ascii && c > 0x7E) {
          if (c > 0xFFFF) {
            const char32_t v = c - 0x10000;
            hex(0xD800 | static_cast<unsigned>(v >> 10));
            hex(0xDC00 | static_cast<unsigned>(v & 0x3FF));
          } else {
            hex(static_cast<unsigned>(c));
          }
        } else {
          py::append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py::float_repr(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}
  void value(const Value& v, int level);
  std::string out;

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }
  std::string key(const Value& k);
  void check() {
    if (out.size() > o_.max_bytes) fail(strfmt("template output exceeds %zu bytes", o_.max_bytes));
  }
  const JsonDumpOptions& o_;
};

std::string Dumper::key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString: return k.str();
    case Kind::kFloat: return float_json(k.as_float());
    case Kind::kBool: return k.as_bool() ? "true" : "false";
    case Kind::kNone: return "null";
    case Kind::kInt: return std::to_string(k.as_int());
    default: fail(strfmt("TypeError: keys must be str, int, float, bool or None, not %s", type_name(k)));
  }
}

void Dumper::value(const Value& v, int level) {
  switch (v.kind()) {
    case Kind::kNone: out += "null"; break;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; break;
    case Kind::kInt: out += std::to_string(v.as_int()); break;
    case Kind::kFloat: out += float_json(v.as_float()); break;
    case Kind::kString: escape_string(v.str(), o_.ensure_ascii, out); break;
    case Kind::kList: case Kind::kTuple: {
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        break;
      }
      out.push_back('[');
      newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o_.item_separator;
          newline(level + 1);
        }
        value(items[i], level + 1);
        check();
      }
      newline(level);
      out.push_back(']');
      break;
    }
    case Kind::kDict: {
      const auto& entries = v.dict().entries();
      if (entries.empty()) {
        out += "{}";
        break;
      }
      std::vector<size_t> order(entries.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o_.sort_keys)
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return py_compare(entries[a].first, entries[b].first, CmpOp::kLt);
        });
      out.push_back('{');
      newline(level + 1);
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) {
          out += o_.item_separator;
          newline(level + 1);
        }
        const auto& [k, x] = entries[order[i]];
        escape_string(key(k), o_.ensure_ascii, out);
        out += o_.key_separator;
        value(x, level + 1);
        check();
      }
      newline(level);
      out.push_back('}');
      break;
    }
    default:
      fail(strfmt("TypeError: Object of type %s is not JSON serializable", type_name(v)));
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.value(v, 0);
  d.out.shrink_to_fit();
  return std::move(d.out);
}

namespace filters {

Value tojson(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "tojson");
  JsonDumpOptions o;
  o.ensure_ascii = truthy(r.get_or(1, "ensure_ascii", Value::boolean(false)));
  Value indent = r.get_or(2, "indent", Value::none());
  Value separators = r.get_or(3, "separators", Value::none());
  o.sort_keys = truthy(r.get_or(4, "sort_keys", Value::boolean(false)));
  r.done(5);
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (indent.kind() == Kind::kInt || indent.kind() == Kind::kBool) {
    o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1 << 16)), ' ');
  } else if (!indent.is_none()) {
    fail(strfmt("TypeError: can't multiply sequence by non-int of type '%s'", type_name(indent)));
  }
  if (separators.is_none()) {
    if (o.indent) o.item_separator.assign(1, ',');  // (assign: GCC 12 -Wrestrict false positive on = ",")
  } else {
    List parts = in.iterate(separators);
    if (parts.size() != 2) fail("ValueError: separators must be a pair of strings");
    if (!parts[0].is_string() || !parts[1].is_string()) fail("TypeError: separators must be strings");
    o.item_separator = parts[0].str();
    o.key_separator = parts[1].str();
  }
  o.max_bytes = in.limits().max_output_bytes;
  std::string out = json_dumps(a.positional[0], o);
  in.step(static_cast<int64_t>(out.size()) / 64);
  return Value::string(std::move(out));
}

}  // namespace filters
}  // namespace bunsen::text::jinja
