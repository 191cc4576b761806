// The HTTP/1.1 server: an asynchronous Boost.Beast/Asio listener with N IO threads, keep-alive, SSE,
// size caps, timeouts, a connection cap, API-key auth and CORS, routing requests to a Router. Knows nothing
// about models; dialects register routes. Not the wire parser's owner of policy text: error bodies can be
// reshaped through ServerOptions. Invariants: routes are fixed once start() ran; stop() is graceful,
// idempotent, joins every IO thread and must not be called from a handler (use request_stop()); after
// stop() every Responder/SseStream still held is closed and writing to it is a harmless no-op.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http/message.h"
#include "server/http/responder.h"
#include "server/http/router.h"

namespace bunsen::server::http {

namespace detail {
class Core;
}

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: an ephemeral port (Server::port() tells which)
  int io_threads = 2;

  size_t max_header_bytes = 64 * 1024;         // larger request heads get 431
  size_t max_body_bytes = 32 * 1024 * 1024;    // larger bodies get 413 (before reading them when declared)
  std::chrono::milliseconds header_timeout{10'000};  // request head, from its first byte wait
  std::chrono::milliseconds read_timeout{60'000};    // request body
  std::chrono::milliseconds idle_timeout{30'000};    // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{30'000};   // one socket write; expiry drops the client
  std::chrono::milliseconds shutdown_grace{5'000};   // stop(): how long in-flight answers may finish
  size_t max_connections = 4096;                     // excess answered 503 + Retry-After: 1
  size_t max_write_queue_bytes = 4 * 1024 * 1024;    // per connection, SSE bytes not yet written

  std::string api_key;                       // empty: no auth
  std::vector<std::string> allowed_origins;  // CORS; empty: none ("*" only when listed)

  // 401 body for a missing/wrong key (dialects shape their own); default: error JSON + WWW-Authenticate.
  std::function<Response(const Request&)> unauthorized;
  // Every server-made error (400/404/405/413/431/500/503); default: default_error_response().
  std::function<Response(const ErrorInfo&)> error_response;
  // Runs for every parsed request before auth and routing (preflights too); returning a Response refuses
  // the request with it (e.g. the DNS-rebinding guard's 403). Empty: every request passes.
  std::function<std::optional<Response>(const Request&)> guard;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Router& router();  // add routes before start()
  const ServerOptions& options() const;

  // Binds, listens and starts the IO threads. Throws bunsen::Error("http", ...) when the address cannot
  // be bound (e.g. the port is already serving).
  void start();
  uint16_t port() const;  // the bound port (valid after start())

  // Stops accepting, lets pending non-streaming answers finish (until shutdown_grace), ends SSE streams
  // (their on_disconnect fires), closes every connection and joins the IO threads.
  void stop();
  void request_stop();  // thread-safe, non-blocking: makes wait() return (after stopping)
  void wait();          // blocks until request_stop() or stop(), then stop()s

  size_t connection_count() const;  // open connections counted toward max_connections

 private:
  friend void install_signal_stop(Server& server);
  std::shared_ptr<detail::Core> core_;
};

// SIGINT/SIGTERM call server.request_stop() (the CLI's wait() then shuts down gracefully).
void install_signal_stop(Server& server);

}  // namespace bunsen::server::http
