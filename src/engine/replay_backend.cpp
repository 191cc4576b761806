// ReplayBackend: a Backend without a model for tests of the layers above the engine. A loop thread
// advances every active job by one scripted token per round (about 1 ms apart, so cancellation and
// streaming can be observed), honouring max_tokens, the request's EOS ids and cancel(). Not a model,
// not sampling: scripts are replayed as they are. Invariants: sinks run on the loop thread without mu_
// held; each accepted request gets exactly one kFinish (kStop / kLength / kCancelled).
#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/status.h"
#include "engine/engine.h"

namespace bunsen::engine {

struct ReplayBackend::Job {
  RequestId id = 0;
  EngineRequest req;
  EventSink sink;
  const std::vector<int32_t>* script = nullptr;  // points into scripts_ (never resized)
  size_t next = 0;                               // next script index to replay
  int64_t emitted = 0;
  bool cancelled = false;  // guarded by mu_
  bool done = false;       // loop thread only
};

namespace {

constexpr auto kTokenPause = std::chrono::milliseconds(1);

void deliver(const EventSink& sink, EngineEvent&& ev) {
  try {
    sink(std::move(ev));
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("an event sink threw: %s", e.what()));
  }
}

EngineEvent finish(FinishReason why, const EngineRequest& req, int64_t generated) {
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::kFinish;
  ev.finish = why;
  ev.usage.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  ev.usage.generated_tokens = generated;
  return ev;
}

// Advances one job by one event: the next scripted token (then kLength if it was the last allowed),
// or kStop at the script's end or an EOS id, or kCancelled. Sets done once the job finished; returns
// whether a token was sent. A template only so it can take the private Job type.
template <typename JobT>
bool replay_one(JobT& j, bool cancelled) {
  const std::vector<int32_t> no_eos;
  const std::vector<int32_t>& eos = j.req.ignore_eos ? no_eos : j.req.eos_ids;
  auto end = [&](FinishReason why) {
    deliver(j.sink, finish(why, j.req, j.emitted));
    j.done = true;
  };
  if (cancelled) {
    end(FinishReason::kCancelled);
    return false;
  }
  if (j.emitted >= j.req.max_tokens) {  // max_tokens == 0
    end(FinishReason::kLength);
    return false;
  }
  if (j.next >= j.script->size() || std::find(eos.begin(), eos.end(), (*j.script)[j.next]) != eos.end()) {
    end(FinishReason::kStop);
    return false;
  }
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::kTokens;
  ev.tokens.push_back(TokenOut{(*j.script)[j.next++], 0.0f, {}});
  ++j.emitted;
  deliver(j.sink, std::move(ev));
  if (j.emitted >= j.req.max_tokens) end(FinishReason::kLength);
  return true;
}

}  // namespace

ReplayBackend::ReplayBackend(std::vector<std::vector<int32_t>> scripts, int64_t vocab_size,
                             int64_t max_request_tokens)
    : scripts_(std::move(scripts)), vocab_size_(vocab_size), max_request_tokens_(max_request_tokens) {
  check(!scripts_.empty(), "engine", "ReplayBackend needs at least one script");
  stats_.max_batch = 1 << 20;
  stats_.max_request_tokens = max_request_tokens_;
  thread_ = std::thread([this] { loop(); });
}

ReplayBackend::~ReplayBackend() { shutdown(); }

RequestId ReplayBackend::submit(EngineRequest req, EventSink sink) {
  check(static_cast<bool>(sink), "engine", "submit: the event sink is empty");
  validate_request(req, vocab_size_, max_request_tokens_);
  auto job = std::make_shared<Job>();
  job->req = std::move(req);
  job->sink = std::move(sink);
  {
    std::lock_guard<std::mutex> lk(mu_);
    check(!stopping_, "engine", "the backend is shut down");
    job->id = next_id_++;
    job->script = &scripts_[next_script_++ % scripts_.size()];
    jobs_.push_back(job);
    ++stats_.running;
  }
  cv_.notify_one();
  return job->id;
}

void ReplayBackend::cancel(RequestId id) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : jobs_)
    if (j->id == id) j->cancelled = true;
  cv_.notify_one();
}

EngineStats ReplayBackend::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void ReplayBackend::shutdown() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    for (auto& j : jobs_) j->cancelled = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable() && t.get_id() == std::this_thread::get_id()) {  // called from a sink: join later
    std::lock_guard<std::mutex> lk(mu_);
    thread_ = std::move(t);
    return;
  }
  if (t.joinable()) t.join();
}

void ReplayBackend::loop() {
  std::vector<std::shared_ptr<Job>> round;
  std::vector<bool> cancelled;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
      round.assign(jobs_.begin(), jobs_.end());
      cancelled.clear();
      for (auto& j : round) cancelled.push_back(j->cancelled);
      if (round.empty() && stopping_) return;
    }
    int64_t tokens = 0;
    for (size_t i = 0; i < round.size(); ++i) tokens += replay_one(*round[i], cancelled[i]) ? 1 : 0;
    std::unique_lock<std::mutex> lk(mu_);
    int64_t ended = 0;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if ((*it)->done) {
        it = jobs_.erase(it);
        ++ended;
      } else {
        ++it;
      }
    }
    ++stats_.steps;
    stats_.generated_tokens += tokens;
    stats_.requests_finished += ended;
    stats_.running = static_cast<int64_t>(jobs_.size());
    if (!stopping_) cv_.wait_for(lk, kTokenPause, [&] { return stopping_; });
  }
}

}  // namespace bunsen::engine
