// Request policies the server applies before a handler runs: API-key auth (Bearer or x-api-key,
// constant-time compare), CORS (allowed-origin lookup, preflight answers, headers on real answers) and
// response-head serialization. Pure functions over message.h types: no sockets, no Boost.
// Invariants: an empty key means auth is off; no CORS header is ever emitted for an origin that is not
// listed (a listed "*" allows any origin); serialized heads never carry a CR/LF smuggled in by a handler.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/message.h"

namespace bunsen::server::http {

bool constant_time_equals(std::string_view a, std::string_view b);

// True when `Authorization: Bearer <key>` or `x-api-key: <key>` carries `key`.
bool request_has_api_key(const Request& request, std::string_view key);

// The value for Access-Control-Allow-Origin, or "" when the request's Origin is absent or not listed.
std::string cors_allow_origin(const std::vector<std::string>& allowed_origins, const Request& request);

// Adds Access-Control-Allow-Origin (+ Vary: Origin) when `allow_origin` is non-empty.
void add_cors_headers(Headers& headers, std::string_view allow_origin);

// 204 answer to OPTIONS: `Allow: <allow>`; with Access-Control-Allow-* only when `allow_origin` is
// non-empty and the request is a preflight (has Access-Control-Request-Method).
Response preflight_response(const Request& request, std::string_view allow,
                            std::string_view allow_origin);

struct HeadFraming {
  std::optional<size_t> content_length;  // nullopt: no Content-Length line
  bool chunked = false;
  bool keep_alive = true;
  int request_version = 11;  // a 1.0 client that keeps the connection gets `Connection: keep-alive`
};

// "HTTP/1.1 <status> <reason>\r\n<headers>\r\n\r\n"; framing fields given by the handler are replaced.
std::string serialize_head(int status, const Headers& headers, const HeadFraming& framing);

// Status codes that never carry a body (1xx, 204, 304).
bool status_has_no_body(int status);

}  // namespace bunsen::server::http
