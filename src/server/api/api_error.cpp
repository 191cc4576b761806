// ApiError helpers: the JSON body parser with a depth cap, exception mapping and typed field readers.
#include "server/api/api_error.h"

#include <cmath>
#include <limits>

#include "core/status.h"

namespace bunsen::server {

using Json = nlohmann::ordered_json;

void bad_request(std::string param, std::string message) {
  throw ApiError(400, "invalid_request_error", std::move(message), std::move(param));
}

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] "; clients want the rest.
std::string strip_json_prefix(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    auto close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

std::string field_name(const std::string& prefix, const char* key) {
  return prefix.empty() ? std::string(key) : prefix + "." + key;
}

}  // namespace

Json parse_json_body(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    bad_request("", "request body is empty: a JSON object is required");
  Json parsed;
  try {
    // The parser itself is iterative; the callback refuses deep nesting before any recursive code
    // (serialisation, destruction) could see it.
    parsed = Json::parse(body, [](int depth, Json::parse_event_t, Json&) {
      if (depth > kMaxJsonDepth)
        throw ApiError(400, "invalid_request_error",
                       strfmt("request body nests deeper than %d levels", kMaxJsonDepth));
      return true;
    });
  } catch (const ApiError&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    bad_request("", "request body is not valid JSON: " + strip_json_prefix(e.what()));
  }
  if (!parsed.is_object()) bad_request("", std::string("request body must be a JSON object, got ") + parsed.type_name());
  return parsed;
}

ApiError to_api_error(const std::exception& e) {
  if (auto* api = dynamic_cast<const ApiError*>(&e)) return *api;
  if (auto* be = dynamic_cast<const Error*>(&e)) {
    const std::string& c = be->component();
    if (c == "memory_admission")
      return ApiError(400, "memory_admission", be->message(), "max_tokens", "context_over_budget");
    if (c == "sampling") {
      // validate() messages start with the API field name: "top_p: must be in (0, 1]".
      const std::string& m = be->message();
      auto colon = m.find(':');
      std::string param = colon != std::string::npos && colon < 32 ? m.substr(0, colon) : "";
      return ApiError(400, "invalid_request_error", m, param);
    }
    if (c == "engine" || c == "template" || c == "tokenizer" || c == "stop" || c == "parser" || c == "jinja")
      return ApiError(400, "invalid_request_error", be->what());
    return ApiError(500, "server_error", be->what());
  }
  return ApiError(500, "server_error", e.what());
}

double get_number(const Json& obj, const char* key, double def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_number()) bad_request(field_name(prefix, key), std::string(key) + " must be a number, got " + it->type_name());
  double v = it->get<double>();
  if (!std::isfinite(v)) bad_request(field_name(prefix, key), std::string(key) + " must be finite");
  return v;
}

int64_t get_int(const Json& obj, const char* key, int64_t def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  const std::string name = field_name(prefix, key);
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
    bad_request(name, std::string(key) + " must be an integer");
  }
  bad_request(name, std::string(key) + " must be an integer, got " + it->type_name());
}

bool get_bool(const Json& obj, const char* key, bool def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) bad_request(field_name(prefix, key), std::string(key) + " must be a boolean, got " + it->type_name());
  return it->get<bool>();
}

std::string get_string(const Json& obj, const char* key, const std::string& def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_string()) bad_request(field_name(prefix, key), std::string(key) + " must be a string, got " + it->type_name());
  return it->get<std::string>();
}

}  // namespace bunsen::server
