// OpenAI and Anthropic error bodies (see error_shapes.h).
#include "server/api/error_shapes.h"

#include <nlohmann/json.hpp>

namespace bunsen::server {

using Json = nlohmann::ordered_json;

std::string openai_error_json(const ApiError& e) {
  Json err = {{"message", e.what()},
              {"type", e.type},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return Json{{"error", err}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

http::Response openai_error_response(const ApiError& e) { return http::Response::json(e.status, openai_error_json(e)); }

std::string anthropic_error_type(const ApiError& e) {
  switch (e.status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: break;
  }
  if (e.status >= 500) return "api_error";
  return "invalid_request_error";
}

std::string anthropic_error_json(const ApiError& e) {
  std::string message = e.what();
  if (!e.param.empty() && message.find(e.param) == std::string::npos) message = e.param + ": " + message;
  Json body = {{"type", "error"}, {"error", {{"type", anthropic_error_type(e)}, {"message", message}}}};
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

http::Response anthropic_error_response(const ApiError& e) {
  return http::Response::json(e.status, anthropic_error_json(e));
}

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

}  // namespace bunsen::server
