// Exchange state machine and the Responder/SseStream handles (see responder.h, exchange.h).
#include "server/http/responder.h"

#include "server/http/exchange.h"
#include "server/http/sse_format.h"

namespace bunsen::server::http {

namespace detail {

Exchange::~Exchange() {
  // No handle is left, so nobody can answer any more: close out whatever the handler left open.
  if (phase_ == Phase::kPending) {
    sink_->post_unanswered();
  } else if (phase_ == Phase::kStreaming) {
    sink_->post_sse_end();
  }
}

bool Exchange::respond(Response response) {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kPending || disconnected_) return false;
  phase_ = Phase::kDone;
  sink_->post_response(std::move(response));
  return true;
}

bool Exchange::start_sse(Headers extra) {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kPending || disconnected_) return false;
  phase_ = Phase::kStreaming;
  sink_->post_sse_head(std::move(extra));
  return true;
}

bool Exchange::sse_write(std::string bytes) {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kStreaming || disconnected_) return false;
  if (!sink_->post_sse_bytes(std::move(bytes))) {
    disconnected_ = true;  // the sink drops the connection and will call notify_disconnect()
    return false;
  }
  return true;
}

void Exchange::sse_close() {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kStreaming) return;
  phase_ = Phase::kDone;
  sink_->post_sse_end();
}

bool Exchange::is_open() const {
  std::lock_guard lock(mu_);
  return phase_ != Phase::kDone && !disconnected_;
}

void Exchange::set_on_disconnect(std::function<void()> fn) {
  bool fire_now = false;
  {
    std::lock_guard lock(mu_);
    if (callback_fired_) return;
    if (disconnected_ && phase_ != Phase::kDone) {
      callback_fired_ = true;
      fire_now = true;
    } else {
      on_disconnect_ = std::move(fn);
      return;
    }
  }
  if (fire_now && fn) fn();
}

void Exchange::notify_disconnect() {
  std::function<void()> fn;
  {
    std::lock_guard lock(mu_);
    disconnected_ = true;
    if (phase_ == Phase::kDone || callback_fired_ || !on_disconnect_) return;  // none yet: fires on set
    callback_fired_ = true;
    fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
  }
  if (fn) fn();
}

}  // namespace detail

bool Responder::send(Response response) { return exchange_ && exchange_->respond(std::move(response)); }

SseStream Responder::start_sse(Headers extra) {
  if (!exchange_ || !exchange_->start_sse(std::move(extra))) return SseStream();
  return SseStream(exchange_);
}

bool Responder::is_open() const { return exchange_ && exchange_->is_open(); }

void Responder::on_disconnect(std::function<void()> fn) {
  if (exchange_) exchange_->set_on_disconnect(std::move(fn));
}

bool SseStream::send(std::string_view event, std::string_view data) {
  return exchange_ && exchange_->sse_write(format_sse_event(event, data));
}

bool SseStream::comment(std::string_view text) {
  return exchange_ && exchange_->sse_write(format_sse_comment(text));
}

void SseStream::close() {
  if (exchange_) exchange_->sse_close();
}

bool SseStream::is_open() const { return exchange_ && exchange_->is_open(); }

void SseStream::on_disconnect(std::function<void()> fn) {
  if (exchange_) exchange_->set_on_disconnect(std::move(fn));
}

}  // namespace bunsen::server::http
