// The two ways a route handler answers: Responder (one full Response, or a switch to streaming) and
// SseStream (a Server-Sent Events handle). Both are cheap copyable handles that any thread may use, now or
// later (e.g. an engine callback thread). Not the socket code: writes are posted to the connection's strand.
// Invariants: a request gets exactly one answer; if every handle is dropped without one the client gets a
// 500 (and a stream that was never closed is ended); on_disconnect fires at most once, on an IO thread,
// when the client goes away, stops reading (write timeout or full write queue) or the server stops, and
// never after the handler itself completed the answer. Callbacks must be quick (set a cancel flag).
#pragma once
#include <functional>
#include <memory>
#include <string_view>

#include "server/http/message.h"

namespace bunsen::server::http {

namespace detail {
class Exchange;
}

class SseStream {
 public:
  SseStream() = default;  // an empty handle: is_open() is false, writes fail

  // Queues one event (`event:` line only when `event` is non-empty). False when the stream is closed or
  // the write queue is over its bound (the connection is then dropped and on_disconnect fires).
  bool send(std::string_view event, std::string_view data);
  bool comment(std::string_view text);  // `:` heartbeat line
  void close();                         // ends the response; the connection may be reused
  bool is_open() const;
  // Runs `fn` when the client disconnects (immediately, on this thread, if it already has).
  void on_disconnect(std::function<void()> fn);

 private:
  friend class Responder;
  explicit SseStream(std::shared_ptr<detail::Exchange> exchange) : exchange_(std::move(exchange)) {}
  std::shared_ptr<detail::Exchange> exchange_;
};

class Responder {
 public:
  explicit Responder(std::shared_ptr<detail::Exchange> exchange) : exchange_(std::move(exchange)) {}

  // Sends a full response; false (and nothing sent) when already answered or the client is gone.
  bool send(Response response);
  // Sends a 200 text/event-stream head (plus `extra` headers) and returns the stream handle; an empty
  // handle when already answered or the client is gone.
  SseStream start_sse(Headers extra = {});
  bool is_open() const;
  void on_disconnect(std::function<void()> fn);

 private:
  std::shared_ptr<detail::Exchange> exchange_;
};

}  // namespace bunsen::server::http
