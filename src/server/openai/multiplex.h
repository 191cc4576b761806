// Multiplex: runs the generations of one HTTP request (n choices, or one per prompt of a completions
// batch) and funnels their events, under one mutex, into a subclass that writes the answer (a stream of
// chunks or one JSON body at the end). Not JSON: subclasses build the bodies. Invariants: either launch()
// throws (every generation it started is cancelled and its events are dropped) or begin() runs once,
// before any on_event(); on_event() calls are serialised and in order per choice; on_complete() runs once,
// after the last terminal event; no Generation method is called while the mutex is held (cancel may
// re-enter the sink); the handle keeps no reference cycle alive once the request is complete.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "server/api/service.h"
#include "server/http/responder.h"

namespace bunsen::server::openai {

class Multiplex : public std::enable_shared_from_this<Multiplex> {
 public:
  virtual ~Multiplex() = default;

  // IO thread. Starts one generation per request (choice i gets requests[i]). Throws ApiError when a
  // start fails, after cancelling the generations already started.
  void launch(ModelService& service, std::vector<GenerationRequest> requests);

  // Any thread, idempotent: cancels every generation (each still delivers its terminal event).
  void cancel_all();

  // The client went away: cancel everything (holds only a weak reference to this object).
  void cancel_on_disconnect(http::Responder& responder);

 protected:
  virtual void begin() {}
  virtual void on_event(size_t choice, GenerationEvent& event) = 0;
  virtual void on_complete() = 0;
  // From on_event(): cancel every generation once the mutex is released (e.g. the stream is dead).
  void request_cancel() { cancel_wanted_ = true; }
  size_t n_choices() const { return n_; }

 private:
  void deliver(size_t choice, GenerationEvent&& event);
  void process(size_t choice, GenerationEvent& event);  // mutex held
  void cancel_list(std::vector<std::shared_ptr<Generation>> gens);

  std::mutex mu_;
  bool ready_ = false;      // begin() ran: events go straight to on_event()
  bool aborted_ = false;    // launch() failed: events are dropped
  bool cancelled_ = false;  // cancel_all() ran: generations started later are cancelled at once
  bool cancel_wanted_ = false;
  std::vector<std::pair<size_t, GenerationEvent>> early_;  // events that arrived before begin()
  std::vector<std::shared_ptr<Generation>> gens_;
  size_t n_ = 0;
  size_t n_done_ = 0;
};

}  // namespace bunsen::server::openai
