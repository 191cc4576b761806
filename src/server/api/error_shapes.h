// The two dialects' error bodies, in one place so the HTTP-level errors (404/413/431/503 made by http/)
// and the route handlers answer in the same shape: OpenAI `{"error":{"message","type","param","code"}}`
// and Anthropic `{"type":"error","error":{"type","message"}}`, as full responses and as SSE error events.
// Not the dialect mappers. Invariants: param/code are JSON null when empty; Anthropic types are mapped from
// the OpenAI-style ApiError::type (invalid_request_error, authentication_error, not_found_error,
// request_too_large, rate_limit_error/overloaded_error, api_error).
#pragma once
#include <string>

#include "server/api/api_error.h"
#include "server/http/message.h"

namespace bunsen::server {

std::string openai_error_json(const ApiError& e);
http::Response openai_error_response(const ApiError& e);
std::string anthropic_error_type(const ApiError& e);
std::string anthropic_error_json(const ApiError& e);
http::Response anthropic_error_response(const ApiError& e);

// True for the routes that answer in Anthropic's shape (/v1/messages, /v1/messages/count_tokens).
bool is_anthropic_path(const std::string& path);

}  // namespace bunsen::server
