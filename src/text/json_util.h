// Small nlohmann::json accessors for tokenizer files, where optional fields are often present as null.
// Not a schema validator. Invariant: a null or missing field yields the default, a wrong type throws
// nlohmann's type_error (the loader turns it into Error("tokenizer", "<file>: ...")).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace bunsen::text::json_util {

inline bool get_bool(const nlohmann::json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<bool>();
}

inline std::string get_string(const nlohmann::json& j, const char* key, const std::string& def = {}) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<std::string>();
}

inline const nlohmann::json& get_or_null(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace bunsen::text::json_util
