// A tiny blocking HTTP/1.1 client over POSIX sockets for the server tests: raw bytes out, responses
// parsed back (Content-Length, chunked or close-delimited bodies), SSE blocks split into events.
// Not a general client: no TLS, no redirects. Invariants: every read is bounded by the socket receive
// timeout given at construction, so a server bug fails a test instead of hanging it.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http/message.h"

namespace bunsen::server::http::testing {

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

struct SseEvent {
  std::string event;  // "" when the block had no event: line
  std::string data;   // data: lines joined with '\n'
  std::string comment;  // ":" lines joined with '\n' (a comment-only block has empty data)
};

class TestClient {
 public:
  // rcvbuf > 0 shrinks the receive buffer (set before connect so the window stays small).
  explicit TestClient(uint16_t port, int rcvbuf = 0, int timeout_ms = 3000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~TestClient() { close(); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool send_request(std::string_view method, std::string_view target,
                    const std::vector<std::pair<std::string, std::string>>& headers = {},
                    std::string_view body = {}) {
    std::string req = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n";
    req += body;
    return send_raw(req);
  }

  // Status line + headers only.
  std::optional<ClientResponse> read_head() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    ClientResponse r;
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t v = line.find_first_not_of(' ', colon + 1);
        r.headers.add(line.substr(0, colon), v == std::string::npos ? "" : line.substr(v));
      }
      pos = e + 2;
    }
    return r;
  }

  // A whole response; `head_request` means no body follows whatever Content-Length says.
  std::optional<ClientResponse> read_response(bool head_request = false) {
    auto r = read_head();
    if (!r) return std::nullopt;
    if (head_request || r->status == 204 || r->status == 304 || r->status / 100 == 1) return r;
    if (auto te = r->headers.get("Transfer-Encoding"); te && iequals(*te, "chunked")) {
      while (true) {
        auto piece = read_chunk();
        if (!piece) return std::nullopt;
        if (piece->empty()) return r;
        r->body += *piece;
      }
    }
    if (auto cl = r->headers.get("Content-Length")) {
      size_t n = std::stoul(std::string(*cl));
      while (buf_.size() < n) {
        if (!fill()) return std::nullopt;
      }
      r->body = buf_.substr(0, n);
      buf_.erase(0, n);
      return r;
    }
    while (fill()) {
    }
    r->body = std::move(buf_);
    buf_.clear();
    return r;
  }

  // One decoded chunk of a chunked body; "" for the terminating chunk, nullopt on EOF/timeout/garbage.
  std::optional<std::string> read_chunk() {
    size_t e;
    while ((e = buf_.find("\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    size_t n = std::stoul(buf_.substr(0, e), nullptr, 16);
    buf_.erase(0, e + 2);
    while (buf_.size() < n + 2) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n + 2);
    return out;
  }

  // Reads chunks until `count` complete SSE blocks are parsed (or the body ends / times out).
  std::vector<SseEvent> read_sse(size_t count, bool* ended = nullptr) {
    std::vector<SseEvent> events;
    while (events.size() < count) {
      size_t sep;
      while ((sep = sse_.find("\n\n")) != std::string::npos && events.size() < count) {
        events.push_back(parse_block(sse_.substr(0, sep)));
        sse_.erase(0, sep + 2);
      }
      if (events.size() >= count) break;
      auto piece = read_chunk();
      if (!piece || piece->empty()) {
        if (ended) *ended = piece.has_value();
        break;
      }
      sse_ += *piece;
    }
    return events;
  }

  // True when the server closes the connection (EOF or reset) within `timeout_ms`.
  bool wait_closed(int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char tmp[4096];
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                        std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
  }

  int fd() const { return fd_; }

 private:
  static SseEvent parse_block(const std::string& block) {
    SseEvent ev;
    bool first_data = true;
    size_t pos = 0;
    while (pos <= block.size()) {
      size_t e = block.find('\n', pos);
      if (e == std::string::npos) e = block.size();
      std::string line = block.substr(pos, e - pos);
      if (line.rfind("event: ", 0) == 0) {
        ev.event = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        if (!first_data) ev.data += '\n';
        ev.data += line.substr(6);
        first_data = false;
      } else if (!line.empty() && line[0] == ':') {
        if (!ev.comment.empty()) ev.comment += '\n';
        ev.comment += line.size() > 1 && line[1] == ' ' ? line.substr(2) : line.substr(1);
      }
      pos = e + 1;
    }
    return ev;
  }

  bool fill() {
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
  std::string sse_;
};

// One request on a fresh connection.
inline std::optional<ClientResponse> fetch(uint16_t port, std::string_view method, std::string_view target,
                                           const std::vector<std::pair<std::string, std::string>>& headers = {},
                                           std::string_view body = {}) {
  TestClient c(port);
  if (!c.connected() || !c.send_request(method, target, headers, body)) return std::nullopt;
  return c.read_response(method == "HEAD");
}

}  // namespace bunsen::server::http::testing
