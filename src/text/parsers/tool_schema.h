// Tool JSON schemas as the parsers need them: for formats whose argument values arrive as raw strings
// (Qwen3-Coder and MiniCPM XML), the declared type of each parameter decides the JSON value produced.
// Not a schema validator. Invariant: a value that does not parse as its declared type stays a string.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text::parsers {

using OrderedJson = nlohmann::ordered_json;

class ToolSchemas {
 public:
  ToolSchemas() = default;
  // `tools`: OpenAI-style list ([{"type":"function","function":{...}}]) or bare function objects;
  // anything else is ignored (no schema: every value stays a string).
  explicit ToolSchemas(const nlohmann::json& tools);

  // JSON types the schema allows for tool.param ("string", "integer", ...); empty when unknown.
  std::vector<std::string> param_types(std::string_view tool, std::string_view param) const;

  // The JSON value for a raw string argument: "string" allowed or no schema -> the string itself;
  // otherwise "null"/"None" -> null, then integer/number, boolean (true/false, any case), object/array
  // (JSON, or a Python literal as templates print dicts and lists), in the order the schema lists them;
  // nothing fits -> the string.
  OrderedJson convert(std::string_view tool, std::string_view param, const std::string& raw) const;

 private:
  std::map<std::string, nlohmann::json, std::less<>> params_;  // tool name -> "properties" object
};

// Compact serialisation that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const OrderedJson& j);

}  // namespace bunsen::text::parsers
