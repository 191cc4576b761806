// A small blocking HTTP/1.1 client for the serving benchmark: one request per fresh TCP connection
// ("Connection: close"), the body handed to a sink as it arrives (chunked, Content-Length or
// read-to-close). Not a general client: plain http:// only, no redirects, no TLS, no keep-alive.
// Invariant: every socket opened here is closed before the call returns or throws; failures are
// Error("bench", ...) naming host:port and what failed.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/http_wire.h"

namespace bunsen::bench {

struct HttpTarget {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash): prepended to request paths
  std::string host_header() const;
};

// "http://host[:port][/prefix]" (also "host:port" without a scheme). https:// is an Error.
HttpTarget parse_http_url(const std::string& url);

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";  // appended to the target's base_path
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Content-Length, Connection
};

struct HttpCallOptions {
  double connect_timeout_s = 10;
  double read_timeout_s = 600;  // longest silence between two reads
};

// Sends `req` and calls on_head once the response head arrived, then on_body for each decoded piece of
// the body. Returns the head. Throws Error("bench", ...) on connection errors, timeouts, a malformed
// response, or a body cut short.
HttpResponseHead http_call(const HttpTarget& target, const HttpRequest& req,
                           const std::function<void(const HttpResponseHead&)>& on_head,
                           const std::function<void(std::string_view)>& on_body, const HttpCallOptions& opts = {});

struct HttpResponse {
  HttpResponseHead head;
  std::string body;
};
// The whole response in memory.
HttpResponse http_fetch(const HttpTarget& target, const HttpRequest& req, const HttpCallOptions& opts = {});

}  // namespace bunsen::bench
