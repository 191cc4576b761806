// A tiny in-process HTTP/1.1 server for the serving-benchmark tests: GET /v1/models and a streaming
// POST /v1/completions that emits fake OpenAI completion chunks (chunked transfer coding, events split
// across HTTP chunks at odd places), with injectable failures. Records what the clients sent.
// Not the project's server (src/server/http): test scaffolding only, one thread per connection.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace bunsen::bench::test {

struct FakeServerConfig {
  int64_t vocab_size = 5000;
  int tokens_per_chunk = 1;    // tokens one SSE chunk stands for (usage says chunks × this)
  int fail_every = 0;          // completion k with k % fail_every == fail_every - 1 gets HTTP 503
  int drop_every = 0;          // completion k with k % drop_every == drop_every - 1: connection closed mid-stream
  int no_done_every = 0;       // ... a complete HTTP body whose event stream lacks data: [DONE]
  std::string api_key;         // when set, requests without "Authorization: Bearer KEY" get 401
  int delay_us = 300;          // between chunks
};

// A loopback port with nothing listening (bound, then closed: connecting to it is refused).
inline int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class FakeCompletionsServer {
 public:
  explicit FakeCompletionsServer(FakeServerConfig cfg) : cfg_(std::move(cfg)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 256);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeCompletionsServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    for (std::thread& t : workers_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::mutex mu;
  std::vector<nlohmann::json> bodies;   // every completions request body
  std::vector<std::string> auth_seen;   // Authorization header of every request ("" when absent)
  std::atomic<int> in_flight{0}, max_in_flight{0};

 private:
  void accept_loop() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      workers_.emplace_back([this, c] {
        serve(c);
        ::close(c);
      });
    }
  }

  static bool send_all(int fd, const std::string& s) {
    size_t at = 0;
    while (at < s.size()) {
      const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }

  static std::string header(const std::string& head, const std::string& name) {
    const size_t at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "";
    const size_t from = at + name.size() + 4;
    return head.substr(from, head.find("\r\n", from) - from);
  }

  static std::string plain(int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  static std::string hex_chunk(const std::string& s) {
    char n[32];
    std::snprintf(n, sizeof n, "%zx\r\n", s.size());
    return n + s + "\r\n";
  }

  void serve(int c) {
    std::string buf;
    char tmp[4096];
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return;
      buf.append(tmp, static_cast<size_t>(n));
    }
    const std::string head = buf.substr(0, end);
    const std::string len = header(head, "Content-Length");
    const size_t want = len.empty() ? 0 : std::stoul(len);
    std::string body = buf.substr(end + 4);
    while (body.size() < want) {
      const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return;
      body.append(tmp, static_cast<size_t>(n));
    }
    const std::string auth = header(head, "Authorization");
    {
      std::lock_guard<std::mutex> lk(mu);
      auth_seen.push_back(auth);
    }
    if (!cfg_.api_key.empty() && auth != "Bearer " + cfg_.api_key) {
      send_all(c, plain(401, R"({"error":{"message":"bad key"}})"));
      return;
    }
    if (head.rfind("GET /v1/models ", 0) == 0) {
      const nlohmann::json m = {{"object", "list"},
                                {"data", {{{"id", "fake-model"}, {"object", "model"}, {"vocab_size", cfg_.vocab_size},
                                           {"max_model_len", 4096}}}}};
      send_all(c, plain(200, m.dump()));
      return;
    }
    if (head.rfind("POST /v1/completions ", 0) != 0) {
      send_all(c, plain(404, "{}"));
      return;
    }
    completion(c, nlohmann::json::parse(body));
  }

  void completion(int c, const nlohmann::json& req) {
    int k;
    {
      std::lock_guard<std::mutex> lk(mu);
      k = static_cast<int>(bodies.size());
      bodies.push_back(req);
    }
    if (cfg_.fail_every && k % cfg_.fail_every == cfg_.fail_every - 1) {
      send_all(c, plain(503, R"({"error":{"message":"server busy"}})"));
      return;
    }
    const int now = ++in_flight;
    for (int m = max_in_flight.load(); now > m && !max_in_flight.compare_exchange_weak(m, now);) {
    }
    // Leaves the count before the last bytes go out: a client that has read them may start its next request
    // at once, and must not be counted twice.
    bool counted = true;
    auto leave = [&] {
      if (counted) --in_flight;
      counted = false;
    };
    stream(c, req, cfg_.drop_every && k % cfg_.drop_every == cfg_.drop_every - 1,
           cfg_.no_done_every && k % cfg_.no_done_every == cfg_.no_done_every - 1, leave);
    leave();
  }

  template <typename Leave>
  void stream(int c, const nlohmann::json& req, bool drop, bool no_done, Leave&& leave) {
    const int64_t gen = req.at("max_tokens").get<int64_t>();
    const int64_t chunks = gen / cfg_.tokens_per_chunk;
    if (!send_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    std::string pending;  // events are cut into HTTP chunks at odd places
    auto flush = [&](size_t keep) {
      const size_t n = pending.size() > keep ? pending.size() - keep : 0;
      if (n == 0) return true;
      const bool ok = send_all(c, hex_chunk(pending.substr(0, n)));
      pending.erase(0, n);
      return ok;
    };
    for (int64_t i = 0; i < chunks; ++i) {
      pending += R"(data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"t)" +
                 std::to_string(i) + R"(","finish_reason":null}]})" + "\n\n";
      if (!flush(static_cast<size_t>(i % 7))) return;  // keep a few bytes back: the next chunk completes them
      if (drop && i == chunks / 2) {
        leave();
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(cfg_.delay_us));
    }
    const int64_t prompt = static_cast<int64_t>(req.at("prompt").size());
    pending += R"(data: {"id":"cmpl-1","choices":[{"index":0,"text":"","finish_reason":"length"}]})" "\n\n";
    pending += R"(data: {"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":)" + std::to_string(prompt) +
               R"(,"completion_tokens":)" + std::to_string(chunks * cfg_.tokens_per_chunk) + "}}\n\n";
    if (!no_done) pending += "data: [DONE]\n\n";
    leave();
    flush(0);
    send_all(c, "0\r\n\r\n");
  }

  FakeServerConfig cfg_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;  // touched only by the acceptor thread and the destructor (after join)
};

}  // namespace bunsen::bench::test
