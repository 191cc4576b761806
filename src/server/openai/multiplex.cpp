// Multiplex: n generations of one request funnelled into one writer (see multiplex.h).
#include "server/openai/multiplex.h"

#include "core/log.h"

namespace bunsen::server::openai {

void Multiplex::launch(ModelService& service, std::vector<GenerationRequest> requests) {
  {
    std::lock_guard lock(mu_);
    n_ = requests.size();
    gens_.reserve(n_);
  }
  std::shared_ptr<Multiplex> self = shared_from_this();
  for (size_t i = 0; i < requests.size(); ++i) {
    std::shared_ptr<Generation> gen;
    try {
      gen = service.start(std::move(requests[i]),
                          [self, i](GenerationEvent&& ev) { self->deliver(i, std::move(ev)); });
    } catch (...) {
      std::vector<std::shared_ptr<Generation>> started;
      {
        std::lock_guard lock(mu_);
        aborted_ = true;
        started = std::move(gens_);
        gens_.clear();
        early_.clear();
      }
      cancel_list(std::move(started));
      throw;
    }
    bool cancel_now;
    {
      std::lock_guard lock(mu_);
      gens_.push_back(gen);
      cancel_now = cancelled_;
    }
    if (cancel_now) gen->cancel();
  }
  std::vector<std::shared_ptr<Generation>> to_cancel;
  {
    std::lock_guard lock(mu_);
    ready_ = true;
    begin();
    auto early = std::move(early_);
    early_.clear();
    for (auto& [choice, ev] : early) process(choice, ev);
    if (cancel_wanted_) {
      cancel_wanted_ = false;
      to_cancel = gens_;
    }
  }
  cancel_list(std::move(to_cancel));
}

void Multiplex::cancel_all() {
  std::vector<std::shared_ptr<Generation>> gens;
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    gens = gens_;
  }
  cancel_list(std::move(gens));
}

void Multiplex::cancel_on_disconnect(http::Responder& responder) {
  std::weak_ptr<Multiplex> weak = weak_from_this();
  responder.on_disconnect([weak] {
    if (auto self = weak.lock()) self->cancel_all();
  });
}

void Multiplex::deliver(size_t choice, GenerationEvent&& event) {
  std::vector<std::shared_ptr<Generation>> to_cancel;
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    if (!ready_) {
      early_.emplace_back(choice, std::move(event));
      return;
    }
    process(choice, event);
    if (cancel_wanted_) {
      cancel_wanted_ = false;
      to_cancel = gens_;
    }
  }
  cancel_list(std::move(to_cancel));
}

void Multiplex::process(size_t choice, GenerationEvent& event) {
  const bool terminal =
      event.kind == GenerationEvent::Kind::kFinish || event.kind == GenerationEvent::Kind::kError;
  if (terminal) ++n_done_;
  // Writers must not throw on the event relay's thread; if one does, end this request rather than the relay.
  try {
    on_event(choice, event);
  } catch (const std::exception& e) {
    log::error("openai", std::string("response writer failed: ") + e.what());
    cancel_wanted_ = true;
  }
  if (terminal && n_done_ == n_) {
    try {
      on_complete();
    } catch (const std::exception& e) {
      log::error("openai", std::string("response writer failed: ") + e.what());
    }
    gens_.clear();  // the generations hold our sinks (and so us): release them once all are over
  }
}

void Multiplex::cancel_list(std::vector<std::shared_ptr<Generation>> gens) {
  for (auto& g : gens) g->cancel();
}

}  // namespace bunsen::server::openai
