// EventRelay (event_relay.h): a FIFO of tasks and the one thread that runs them.
#include "server/api/event_relay.h"

#include <exception>
#include <utility>

#include "core/log.h"
#include "core/status.h"

namespace bunsen::server {

EventRelay::EventRelay() : thread_([this] { run(); }) {}

EventRelay::~EventRelay() {
  close();
}

void EventRelay::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void EventRelay::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int64_t EventRelay::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void EventRelay::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {  // the engine's sinks must not throw; neither may their relay
      log::warn("server", strfmt("an event task threw: %s", e.what()));
    }
  }
}

}  // namespace bunsen::server
