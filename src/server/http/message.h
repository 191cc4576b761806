// HTTP message value types shared by the server, the router and the dialects: case-insensitive headers,
// a parsed Request and a full Response, plus small text helpers (percent-decoding, query parsing, JSON
// string escaping, the default error body). Not the wire parser (Boost.Beast does that in connection.cpp)
// and nothing here knows about models. Invariants: header names compare ASCII-case-insensitively and keep
// their original spelling; Request::path is percent-decoded; framing headers (Content-Length,
// Transfer-Encoding, Connection) on a Response are owned by the server and replaced when it is written.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bunsen::server::http {

bool iequals(std::string_view a, std::string_view b);

class Headers {
 public:
  struct Field {
    std::string name;
    std::string value;
  };

  void add(std::string name, std::string value);        // keeps duplicates
  void set(std::string name, std::string value);        // replaces every field of that name
  void remove(std::string_view name);
  std::optional<std::string_view> get(std::string_view name) const;  // first match
  bool has(std::string_view name) const { return get(name).has_value(); }
  size_t size() const { return fields_.size(); }
  std::vector<Field>::const_iterator begin() const { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const { return fields_.end(); }

 private:
  std::vector<Field> fields_;
};

struct Request {
  std::string method;   // as sent, e.g. "GET", "POST"
  std::string target;   // raw request-target, e.g. "/v1/models?limit=2"
  std::string path;     // percent-decoded path without the query, e.g. "/v1/models"
  std::map<std::string, std::string> query;   // decoded query parameters; a repeated key keeps the last
  std::map<std::string, std::string> params;  // decoded `{name}` route captures
  Headers headers;
  std::string body;
  std::string remote_address;  // peer IP as text
  uint16_t remote_port = 0;
  int version = 11;            // 10 = HTTP/1.0, 11 = HTTP/1.1

  std::optional<std::string_view> header(std::string_view name) const { return headers.get(name); }
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;

  static Response json(int status, std::string body);
  static Response text(int status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8");
};

// What the server tells an error formatter: status, a human message and a short machine type
// ("invalid_request_error", "not_found_error", ...). `request` is null when the request could not be
// parsed (400/413/431 before routing) or for the connection-cap 503.
struct ErrorInfo {
  int status = 500;
  std::string message;
  std::string type;
  const Request* request = nullptr;
};

// `{"error":{"message":...,"type":...}}` with Content-Type application/json.
Response default_error_response(const ErrorInfo& info);

// JSON string literal body (no surrounding quotes) for `text`; control characters become \u00XX.
std::string json_escape(std::string_view text);

// %XX decoding; `plus_is_space` for query components. nullopt on a malformed escape or a decoded NUL.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space);

// Splits "a=1&b=x%20y" into decoded pairs; nullopt when any component fails to decode.
std::optional<std::map<std::string, std::string>> parse_query(std::string_view query);

}  // namespace bunsen::server::http
