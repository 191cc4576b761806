// SseGate: hold-then-flush ordering of a streaming request's SSE events (see sse_gate.h).
#include "server/api/sse_gate.h"

namespace bunsen::server {

void SseGate::write_locked(const Held& h) {
  if (h.comment) {
    stream_.comment(h.data);
  } else {
    stream_.send(h.event, h.data);
  }
}

void SseGate::send(std::string event, std::string data, bool comment) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  Held h{std::move(event), std::move(data), comment};
  if (open_) {
    write_locked(h);
  } else {
    held_.push_back(std::move(h));
  }
}

void SseGate::open(http::SseStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_) return;
  open_ = true;
  stream_ = std::move(stream);
  for (const Held& h : held_) write_locked(h);
  held_.clear();
  if (closed_) {
    stream_.close();
    stream_ = http::SseStream();
  }
}

void SseGate::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (open_) {
    stream_.close();
    stream_ = http::SseStream();
  }
}

void SseGate::discard() {
  std::lock_guard<std::mutex> lock(mu_);
  held_.clear();
  closed_ = true;
  open_ = true;
  stream_ = http::SseStream();
}

}  // namespace bunsen::server
