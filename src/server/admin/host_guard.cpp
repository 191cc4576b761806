// DNS-rebinding guard (see host_guard.h). Parsing is deliberately strict: anything that is not clearly a
// loopback name, an IP literal or a listed origin is foreign.
#include "server/admin/host_guard.h"

#include <boost/asio/ip/address.hpp>

namespace bunsen::server::admin {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool is_wildcard(std::string_view bound) { return bound == "0.0.0.0" || bound == "::" || bound == "[::]"; }

}  // namespace

std::string host_of(std::string_view h) {
  while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string_view::npos) return {};
    return lower(h.substr(1, close - 1));
  }
  size_t colon = h.find(':');
  if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos) h = h.substr(0, colon);
  std::string out = lower(h);
  if (!out.empty() && out.back() == '.') out.pop_back();  // "localhost." is localhost
  return out;
}

bool is_ip_literal(std::string_view host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(std::string(host), ec);
  return !ec;
}

bool is_loopback_name(std::string_view host) {
  std::string h = lower(host);
  if (h == "localhost") return true;
  if (h.size() > 10 && h.ends_with(".localhost")) return true;  // RFC 6761: always loopback
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(h, ec);
  if (ec) return false;
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) return addr.to_v6().to_v4().is_loopback();
  return addr.is_loopback();
}

bool host_allowed(std::string_view host_header, std::string_view bound_host) {
  std::string host = host_of(host_header);
  if (host.empty()) return false;
  if (is_loopback_name(host)) return true;
  std::string bound = host_of(bound_host);
  if (!bound.empty() && host == bound) return true;
  // Bound to every interface on purpose: an IP literal cannot be a rebound DNS name.
  return is_wildcard(bound_host) && is_ip_literal(host);
}

bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed_origins) {
  for (const std::string& o : allowed_origins)
    if (o == "*" || o == origin) return true;
  std::string_view rest;
  if (origin.starts_with("http://")) rest = origin.substr(7);
  else if (origin.starts_with("https://")) rest = origin.substr(8);
  else return false;  // "null", file://, other schemes
  if (rest.find('/') != std::string_view::npos || rest.find('@') != std::string_view::npos) return false;
  return is_loopback_name(host_of(rest));
}

GuardVerdict check_request(const http::Request& request, std::string_view bound_host,
                           const std::vector<std::string>& allowed_origins) {
  if (auto host = request.header("Host"); host && !host_allowed(*host, bound_host)) {
    return {false, "Host '" + std::string(*host) +
                       "' is not a loopback name; start the server with --api-key to accept other hosts"};
  }
  if (auto origin = request.header("Origin"); origin && !origin_allowed(*origin, allowed_origins)) {
    return {false, "Origin '" + std::string(*origin) +
                       "' is not allowed; list it with --allowed-origins or set --api-key"};
  }
  return {};
}

}  // namespace bunsen::server::admin
