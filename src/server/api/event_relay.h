// EventRelay: one thread that runs posted tasks in the order they were posted. ModelService hands every
// engine event to it, so the engine thread only queues a step's events and goes on with the next step,
// while detokenizing, stop strings, output parsing and the HTTP framing of those events run here. One
// FIFO thread keeps each request's events in order (and all requests' in engine order).
// Invariants: a task runs at most once, never on the posting thread; close() runs what is queued, then
// joins, and tasks posted after it are dropped (the service they would touch is going away).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace bunsen::server {

class EventRelay {
 public:
  EventRelay();
  ~EventRelay();
  EventRelay(const EventRelay&) = delete;
  EventRelay& operator=(const EventRelay&) = delete;

  void post(std::function<void()> task);
  // Runs the queued tasks, joins the thread; later posts are dropped. Idempotent; not from a task.
  void close();
  int64_t dropped() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool closing_ = false;
  int64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace bunsen::server
