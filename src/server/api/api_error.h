// ApiError: a client-facing failure with its HTTP status and the fields both dialects need; dialect code
// throws it and each dialect formats it in its own shape (OpenAI {error:{message,type,param,code}},
// Anthropic {type:"error",error:{type,message}}). Also the JSON body parser every POST route uses.
// Not transport: http/ never sees this type. Invariants: status is 4xx/5xx; `param` names the request
// field at fault ("messages[2].content", "max_tokens") whenever one is.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace bunsen::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // OpenAI type: invalid_request_error, not_found_error, authentication_error,
                      // memory_admission, server_error, ...
  std::string param;  // offending field, "" when none
  std::string code;   // machine code, e.g. "context_over_budget", "" when none
  ApiError(int status, std::string type, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(std::move(message)), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
};

// 400 invalid_request_error naming `param`.
[[noreturn]] void bad_request(std::string param, std::string message);

// Parses a request body: must be a JSON object, nesting <= kMaxJsonDepth, strings valid UTF-8 (lone
// surrogate escapes rejected). Throws ApiError 400 describing what is wrong (truncated, NaN, depth, ...).
inline constexpr int kMaxJsonDepth = 64;
nlohmann::ordered_json parse_json_body(std::string_view body);

// Maps an exception from the layers below (bunsen::Error with its component, ApiError, std::exception)
// to an ApiError: memory_admission -> 400 {type memory_admission, code context_over_budget}; sampling,
// engine, template, tokenizer, stop, parser -> 400 invalid_request_error; anything else -> 500 server_error.
ApiError to_api_error(const std::exception& e);

// Typed field readers for dialect parsing: each throws bad_request(param, ...) on a wrong type/range and
// returns `def` when the field is absent or null.
double get_number(const nlohmann::ordered_json& obj, const char* key, double def, const std::string& param_prefix = {});
int64_t get_int(const nlohmann::ordered_json& obj, const char* key, int64_t def, const std::string& param_prefix = {});
bool get_bool(const nlohmann::ordered_json& obj, const char* key, bool def, const std::string& param_prefix = {});
std::string get_string(const nlohmann::ordered_json& obj, const char* key, const std::string& def,
                       const std::string& param_prefix = {});

}  // namespace bunsen::server
