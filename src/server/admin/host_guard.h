// DNS-rebinding defence for a server that runs without an API key: a browser page on a foreign site can
// make the victim's browser send requests to 127.0.0.1 (via a rebound DNS name or a cross-site fetch);
// such requests carry the foreign name in Host or the foreign site in Origin, so both are checked.
// Not auth (the key check is in http/) and not CORS headers. Invariant: pure functions of their inputs;
// a request without Host/Origin (curl, SDKs) passes; IP-literal hosts pass only as the brief allows.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/http/message.h"

namespace bunsen::server::admin {

// The host part of a Host header value ("localhost:8080" -> "localhost", "[::1]:80" -> "::1").
std::string host_of(std::string_view host_header);
// localhost, *.localhost, 127.0.0.0/8, ::1 (case-insensitive names).
bool is_loopback_name(std::string_view host);
// True for an IPv4/IPv6 literal.
bool is_ip_literal(std::string_view host);
// Host header acceptable for a server bound to `bound_host` (loopback, the bound host, or any IP literal
// when the server is bound to a wildcard address).
bool host_allowed(std::string_view host_header, std::string_view bound_host);
// Origin acceptable: absent is handled by the caller; loopback http(s) origins or one listed exactly
// (a listed "*" allows every origin).
bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed_origins);

struct GuardVerdict {
  bool allowed = true;
  std::string reason;  // why not (for the 403 message)
};
GuardVerdict check_request(const http::Request& request, std::string_view bound_host,
                           const std::vector<std::string>& allowed_origins);

}  // namespace bunsen::server::admin
