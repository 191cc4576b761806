// Internal: the state of one request/answer pair shared by the handler's handles (Responder, SseStream)
// and the connection that owns the socket. Not public API and free of Boost: the connection implements
// ExchangeSink. Invariants: phase moves Pending -> (Streaming ->) Done only; every sink call happens under
// the exchange mutex so a stream's bytes reach the sink in the order the handler wrote them; the
// disconnect callback runs outside the mutex, at most once, and only if the handler had not finished.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/http/message.h"

namespace bunsen::server::http::detail {

// Implemented by the connection. Every method is thread-safe and only posts work to the connection.
class ExchangeSink {
 public:
  virtual ~ExchangeSink() = default;
  virtual void post_response(Response response) = 0;
  virtual void post_unanswered() = 0;  // all handles dropped without an answer: reply 500
  virtual void post_sse_head(Headers extra) = 0;
  virtual bool post_sse_bytes(std::string bytes) = 0;  // false: write queue full, connection dropped
  virtual void post_sse_end() = 0;
};

class Exchange {
 public:
  explicit Exchange(std::shared_ptr<ExchangeSink> sink) : sink_(std::move(sink)) {}
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  bool respond(Response response);
  bool start_sse(Headers extra);
  bool sse_write(std::string bytes);
  void sse_close();
  bool is_open() const;
  void set_on_disconnect(std::function<void()> fn);

  // Connection side: the client is gone (or the server is stopping). Fires the callback if due.
  void notify_disconnect();

 private:
  enum class Phase { kPending, kStreaming, kDone };

  std::shared_ptr<ExchangeSink> sink_;
  mutable std::mutex mu_;
  Phase phase_ = Phase::kPending;
  bool disconnected_ = false;
  bool callback_fired_ = false;
  std::function<void()> on_disconnect_;
};

}  // namespace bunsen::server::http::detail
