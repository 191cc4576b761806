// Auth, CORS and head serialization (see policy.h).
#include "server/http/policy.h"

#include <algorithm>

namespace bunsen::server::http {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_framing_header(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
         iequals(name, "Connection");
}

bool safe_header_text(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

}  // namespace

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Runs over the longer input whatever the content, so timing reveals at most the lengths.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

bool request_has_api_key(const Request& request, std::string_view key) {
  bool ok = false;
  if (auto auth = request.header("Authorization")) {
    std::string_view v = trim(*auth);
    if (v.size() > 7 && iequals(v.substr(0, 7), "Bearer ")) {
      ok |= constant_time_equals(trim(v.substr(7)), key);
    }
  }
  if (auto x = request.header("x-api-key")) ok |= constant_time_equals(trim(*x), key);
  return ok;
}

std::string cors_allow_origin(const std::vector<std::string>& allowed_origins, const Request& request) {
  auto origin = request.header("Origin");
  if (!origin || origin->empty()) return "";
  for (const std::string& allowed : allowed_origins) {
    if (allowed == "*") return "*";
    if (iequals(allowed, *origin)) return std::string(*origin);
  }
  return "";
}

void add_cors_headers(Headers& headers, std::string_view allow_origin) {
  if (allow_origin.empty()) return;
  headers.set("Access-Control-Allow-Origin", std::string(allow_origin));
  if (allow_origin != "*") headers.set("Vary", "Origin");
}

Response preflight_response(const Request& request, std::string_view allow,
                            std::string_view allow_origin) {
  Response r;
  r.status = 204;
  std::string methods = std::string(allow);
  if (methods.find("OPTIONS") == std::string::npos) methods += methods.empty() ? "OPTIONS" : ", OPTIONS";
  r.headers.set("Allow", methods);
  if (allow_origin.empty() || !request.header("Access-Control-Request-Method")) return r;
  add_cors_headers(r.headers, allow_origin);
  r.headers.set("Access-Control-Allow-Methods", methods);
  auto requested = request.header("Access-Control-Request-Headers");
  r.headers.set("Access-Control-Allow-Headers",
                requested && safe_header_text(*requested)
                    ? std::string(*requested)
                    : std::string("Authorization, Content-Type, X-Api-Key"));
  r.headers.set("Access-Control-Max-Age", "600");
  return r;
}

std::string serialize_head(int status, const Headers& headers, const HeadFraming& framing) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  for (const Headers::Field& f : headers) {
    if (is_framing_header(f.name) || f.name.empty()) continue;
    if (!safe_header_text(f.name) || !safe_header_text(f.value)) continue;
    out += f.name + ": " + f.value + "\r\n";
  }
  if (framing.content_length) out += "Content-Length: " + std::to_string(*framing.content_length) + "\r\n";
  if (framing.chunked) out += "Transfer-Encoding: chunked\r\n";
  if (!framing.keep_alive) {
    out += "Connection: close\r\n";
  } else if (framing.request_version < 11) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

bool status_has_no_body(int status) { return (status >= 100 && status < 200) || status == 204 || status == 304; }

}  // namespace bunsen::server::http
