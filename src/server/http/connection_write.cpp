// One connection's write side on its strand (see connection.h): answers and SSE bytes go through one
// queue, written in small batches under the write timeout; the ExchangeSink posts land here from any
// thread. SSE bytes are charged to max_write_queue_bytes when accepted and released once written.
#include <cstdio>

#include <boost/asio/write.hpp>

#include "server/http/connection.h"
#include "server/http/policy.h"

namespace bunsen::server::http::detail {

namespace net = boost::asio;
using boost::system::error_code;

namespace {

constexpr size_t kMaxWriteBatch = 64;               // queue items per socket write ...
constexpr size_t kMaxWriteBatchBytes = 256 * 1024;  // ... and bytes (beyond the first item)

std::string chunk(std::string_view data) {
  char size[20];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<size_t>(n));
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace

void Connection::reply(Response response) {
  if (shutting_down_) keep_alive_ = false;
  add_cors_headers(response.headers, cors_origin_);
  bool no_body = status_has_no_body(response.status);
  HeadFraming framing;
  framing.content_length = no_body ? std::nullopt : std::optional<size_t>(response.body.size());
  framing.keep_alive = keep_alive_;
  framing.request_version = version_;
  std::string bytes = serialize_head(response.status, response.headers, framing);
  if (!head_only_ && !no_body) bytes += response.body;
  enqueue(std::move(bytes), true);
}

void Connection::reply_error(int status, std::string message, std::string type) {
  reply(core_->error(status, std::move(message), std::move(type), request_.get()));
}

void Connection::enqueue(std::string bytes, bool last, size_t counted) {
  if (closed_ || closing_) return;
  queue_.push_back({std::move(bytes), last, counted});
  if (in_flight_ == 0) write_next();
}

void Connection::write_next() {
  write_bufs_.clear();
  size_t n = 0;
  size_t bytes = 0;  // the write timeout bounds one batch, so a batch stays small
  while (n < queue_.size() && n < kMaxWriteBatch && (n == 0 || bytes < kMaxWriteBatchBytes)) {
    write_bufs_.push_back(net::buffer(queue_[n].bytes));
    bytes += queue_[n].bytes.size();
    if (queue_[n++].last) break;
  }
  in_flight_ = n;
  uint64_t gen = ++write_gen_;
  write_timer_.expires_after(core_->options.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (!ec && gen == self->write_gen_) self->fail();  // the client stopped reading
  });
  net::async_write(socket_, write_bufs_,
                   [self = shared_from_this()](const error_code& ec, size_t) { self->on_write(ec); });
}

void Connection::on_write(const error_code& ec) {
  size_t n = in_flight_;
  in_flight_ = 0;
  ++write_gen_;
  write_timer_.cancel();
  if (closed_) return;
  if (ec) return fail();
  bool last = false;
  size_t counted = 0;
  for (size_t i = 0; i < n; ++i) {
    last = last || queue_.front().last;
    counted += queue_.front().counted;
    queue_.pop_front();
  }
  queued_bytes_.fetch_sub(counted);
  if (last) finish_answer();
  if (!queue_.empty() && !closed_ && in_flight_ == 0) write_next();
}

// ---- exchange sink (any thread) ----

void Connection::post_response(Response response) {
  core_->post_external(executor_, [self = shared_from_this(), r = std::move(response)]() mutable {
    if (self->closed_ || !self->exchange_active_ || self->streaming_) return;
    self->reply(std::move(r));
  });
}

void Connection::post_unanswered() {
  core_->post_external(executor_, [self = shared_from_this()] {
    if (self->closed_ || !self->exchange_active_ || self->streaming_) return;
    self->reply(self->core_->error(500, "the handler returned no response", "server_error", nullptr));
  });
}

void Connection::post_sse_head(Headers extra) {
  core_->post_external(executor_, [self = shared_from_this(), h = std::move(extra)]() mutable {
    self->deliver_sse_head(std::move(h));
  });
}

bool Connection::post_sse_bytes(std::string bytes) {
  size_t n = bytes.size();
  if (queued_bytes_.fetch_add(n) + n > core_->options.max_write_queue_bytes) {
    queued_bytes_.fetch_sub(n);
    core_->post_external(executor_, [self = shared_from_this()] { self->fail(); });
    return false;
  }
  bool posted = core_->post_external(executor_, [self = shared_from_this(), b = std::move(bytes), n]() mutable {
    self->deliver_sse_bytes(std::move(b), n);
  });
  if (!posted) queued_bytes_.fetch_sub(n);
  return posted;
}

void Connection::post_sse_end() {
  core_->post_external(executor_, [self = shared_from_this()] { self->deliver_sse_end(); });
}

void Connection::deliver_sse_head(Headers extra) {
  if (closed_ || !exchange_active_ || streaming_) return;
  streaming_ = true;
  chunked_ = version_ >= 11;
  if (!chunked_ || shutting_down_) keep_alive_ = false;  // a close-delimited body ends the connection
  if (!extra.has("Content-Type")) extra.set("Content-Type", "text/event-stream");
  if (!extra.has("Cache-Control")) extra.set("Cache-Control", "no-cache");
  extra.set("X-Accel-Buffering", "no");
  add_cors_headers(extra, cors_origin_);
  HeadFraming framing;
  framing.chunked = chunked_;
  framing.keep_alive = keep_alive_;
  framing.request_version = version_;
  enqueue(serialize_head(200, extra, framing), false);
}

void Connection::deliver_sse_bytes(std::string bytes, size_t counted) {
  if (closed_ || !streaming_ || stream_ended_) {
    queued_bytes_.fetch_sub(counted);
    return;
  }
  enqueue(chunked_ ? chunk(bytes) : std::move(bytes), false, counted);
}

void Connection::deliver_sse_end() {
  if (closed_ || !streaming_ || stream_ended_) return;
  stream_ended_ = true;
  enqueue(chunked_ ? std::string("0\r\n\r\n") : std::string(), true);
}
}  // namespace bunsen::server::http::detail
