// JSON <-> jinja::Value: reading render contexts (messages, tools, kwargs) from nlohmann::ordered_json
// with key order kept, and Python's json.dumps as HF's `tojson` filter calls it (ensure_ascii=False by
// default, indent, separators, sort_keys; floats as repr(), NaN/Infinity as Python writes them).
// Not a JSON parser. Invariant: dumps() of a value produced by from_json() of a JSON document whose
// floats round-trip is the document re-serialised with Python's separators.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "text/jinja/value.h"

namespace bunsen::text::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  size_t max_bytes = 64u << 20;
};

// Throws Error("template", ...) for values nested deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);
// Python json.dumps; TypeError (as Error) for values JSON cannot hold (Undefined, namespace, ...).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace bunsen::text::jinja
