// ToolSchemas: tool name -> parameter types, and string -> typed JSON conversion.
// Not validation (required fields, enums, ranges are the client's business).
// Invariant: convert() never throws.
#include "text/parsers/tool_schema.h"

#include <algorithm>
#include <cctype>

namespace bunsen::text::parsers {
namespace {

void add_types(const nlohmann::json& schema, std::vector<std::string>& out) {
  if (!schema.is_object()) return;
  auto t = schema.find("type");
  if (t != schema.end()) {
    if (t->is_string()) out.push_back(t->get<std::string>());
    if (t->is_array())
      for (const auto& e : *t)
        if (e.is_string()) out.push_back(e.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto alts = schema.find(key);
    if (alts != schema.end() && alts->is_array())
      for (const auto& a : *alts) add_types(a, out);
  }
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A Python literal as templates print non-string arguments ({'a': True, 'b': None}) -> JSON text:
// single-quoted strings re-quoted, True/False/None mapped. Not a Python parser: JSON still validates.
std::string python_literal_to_json(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '"') {  // double-quoted: copy through, escapes included
      size_t j = i + 1;
      while (j < s.size() && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
      out.append(s.substr(i, j + 1 - i));
      i = j + 1;
    } else if (c == '\'') {
      out.push_back('"');
      for (++i; i < s.size() && s[i] != '\''; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
          ++i;
          if (s[i] != '\'') out.push_back('\\');
          out.push_back(s[i]);
        } else {
          if (s[i] == '"') out.push_back('\\');
          out.push_back(s[i]);
        }
      }
      out.push_back('"');
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isalnum(static_cast<unsigned char>(s[j]))) ++j;
      std::string_view word = s.substr(i, j - i);
      out.append(word == "True" ? "true" : word == "False" ? "false" : word == "None" ? "null" : word);
      i = j;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace

ToolSchemas::ToolSchemas(const nlohmann::json& tools) {
  if (!tools.is_array()) return;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const nlohmann::json& fn = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    auto name = fn.find("name");
    auto params = fn.find("parameters");
    if (name == fn.end() || !name->is_string() || params == fn.end() || !params->is_object()) continue;
    auto props = params->find("properties");
    if (props != params->end() && props->is_object()) params_[name->get<std::string>()] = *props;
  }
}

std::vector<std::string> ToolSchemas::param_types(std::string_view tool, std::string_view param) const {
  std::vector<std::string> out;
  auto it = params_.find(tool);
  if (it == params_.end()) return out;
  auto p = it->second.find(std::string(param));
  if (p != it->second.end()) add_types(*p, out);
  return out;
}

OrderedJson ToolSchemas::convert(std::string_view tool, std::string_view param, const std::string& raw) const {
  std::vector<std::string> types = param_types(tool, param);
  if (types.empty() || std::find(types.begin(), types.end(), "string") != types.end()) return raw;
  std::string v = trim(raw);
  if (v == "null" || v == "None") return nullptr;
  OrderedJson parsed = OrderedJson::parse(v, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) parsed = OrderedJson::parse(python_literal_to_json(v), nullptr, false);
  for (const std::string& t : types) {
    if ((t == "integer" && (parsed.is_number_integer())) || (t == "number" && parsed.is_number()) ||
        (t == "object" && parsed.is_object()) || (t == "array" && parsed.is_array()))
      return parsed;
    if (t == "integer" && parsed.is_number_float()) {
      double d = parsed.get<double>();
      if (d > -9e15 && d < 9e15 && d == static_cast<double>(static_cast<long long>(d)))
        return static_cast<long long>(d);
    }
    if (t == "boolean") {
      std::string l = lower(v);
      if (l == "true" || l == "false") return l == "true";
    }
  }
  return raw;
}

std::string dump_json(const OrderedJson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bunsen::text::parsers
