// Engine: the continuous-batching loop. Each step drains the inbox (new requests, cancels), asks the
// Scheduler for a batch, runs it as one Runner step, picks every logits row's token with that request's own
// params and RNG (argmax and plain draws where the logits are, processors and logprobs by the host sampler:
// plan_picks), then reports kPrefill/kTokens/kFinish events. Not a scheduler (engine/scheduler.cpp)
// and not text handling. Invariants: the Scheduler, the Runner and live_ are touched only by the loop
// thread; mu_ guards only the inbox, the cancel list and the stats snapshot, and is never held while a
// forward runs or a sink is called; every accepted request ends with exactly one kFinish or kError.
// The prefix cache (when on) is owned here and used by the Scheduler only, on the loop thread; its SSD tier
// (engine_ssd.cpp) snapshots finished requests and restores waiting prompts: the loop thread starts a restore
// job (RestorePool workers copy), holds the sequence out of admission and polls the job every step.
// Hybrid models keep the prefix cache on through linear-attention state checkpoints (engine_state.cpp): the
// scheduler says which checkpoints to restore before a step and which chunks end at a checkpoint boundary.
// Runners with a sliding-window block space: a second PrefixCache over that pool (same keys) goes to the
// Scheduler with the window, every chunk carries the sequence's sliding table, and the RAM/SSD tiers keep and
// restore the sliding blocks of a hit's window with its full-space blocks (engine_tiers.cpp).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "kernels/device.h"

namespace bunsen::engine {

struct Engine::Pending {
  RequestId id = 0;
  EngineRequest req;
  EventSink sink;
};

struct Engine::Live {
  EventSink sink;
  sampling::SamplingParams sampling;
  int top_logprobs = -1;
  sampling::Rng rng;
  int64_t n_prompt = 0;
  int64_t prefilled = 0;  // prompt tokens reported (kPrefill) so far
  int64_t emitted = 0;    // generated tokens sent (kTokens) so far
};

namespace {

// Sinks must not throw; if one does, the engine keeps serving the others.
void deliver(const EventSink& sink, EngineEvent&& ev) {
  try {
    sink(std::move(ev));
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("an event sink threw: %s", e.what()));
  }
}

EngineEvent finish_event(FinishReason why, int64_t prompt, int64_t generated) {
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::kFinish;
  ev.finish = why;
  ev.usage.prompt_tokens = prompt;
  ev.usage.generated_tokens = generated;
  return ev;
}

FinishReason reason_of(SeqStatus s) {
  if (s == SeqStatus::kFinishedStop) return FinishReason::kStop;
  if (s == SeqStatus::kFinishedLength) return FinishReason::kLength;
  return FinishReason::kCancelled;
}

// FNV-1a over a canonical text, then a 64-bit finalizer: stable across runs and platforms.
uint64_t hash_text(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return kv::PrefixCache::chain_key(h, 0, {});
}

std::unique_ptr<kv::PrefixCache> make_cache(Runner& runner, const EngineOptions& o) {
  if (!o.prefix_cache) return nullptr;
  if (runner.has_linear_state() && runner.n_state_checkpoints() == 0) {  // a hit could not restore the state
    log::info("engine", "prefix cache off: hybrid model without linear-attention state checkpoints");
    return nullptr;
  }
  const kv::KvStorage& st = runner.storage();
  const size_t per_block = st.n_blocks() > 0 ? st.bytes() / static_cast<size_t>(st.n_blocks()) : 0;
  return std::make_unique<kv::PrefixCache>(runner.pool(), runner.block_size(), per_block);
}

std::unique_ptr<kv::PrefixCache> make_sliding_cache(Runner& runner, const kv::PrefixCache* cache) {
  if (!cache || !runner.has_sliding_space()) return nullptr;
  const kv::KvStorage& st = *runner.sliding_storage();
  return std::make_unique<kv::PrefixCache>(runner.sliding_pool(), runner.block_size(),
                                           st.bytes() / static_cast<size_t>(st.n_blocks()));
}

SlidingKv sliding_of(Runner& runner, kv::PrefixCache* swa_cache) {
  if (!runner.has_sliding_space()) return {};
  return SlidingKv{&runner.sliding_pool(), swa_cache, runner.sliding_window()};
}

std::unique_ptr<kv::StateCheckpoints> make_checkpoints(Runner& runner, const kv::PrefixCache* cache) {
  if (!cache || !runner.has_linear_state()) return nullptr;
  return std::make_unique<kv::StateCheckpoints>(runner.n_state_checkpoints(), runner.block_size());
}

int64_t request_limit(const Runner& r) {
  return std::min<int64_t>(r.options().max_context,
                           static_cast<int64_t>(r.storage().n_blocks()) * r.block_size());
}

SchedulerConfig checked_config(const Runner& runner, const EngineOptions& o) {
  const RunnerOptions& r = runner.options();
  check(o.max_batch > 0, "engine", strfmt("max_batch must be > 0, got %lld", (long long)o.max_batch));
  check(r.max_seqs >= o.max_batch && r.max_logit_rows >= o.max_batch, "engine",
        strfmt("max_batch (%lld) exceeds the runner's max_seqs (%lld) or max_logit_rows (%lld)",
               (long long)o.max_batch, (long long)r.max_seqs, (long long)r.max_logit_rows));
  check(r.max_tokens_per_step >= o.max_num_batched_tokens, "engine",
        strfmt("max_num_batched_tokens (%lld) exceeds the runner's max_tokens_per_step (%lld)",
               (long long)o.max_num_batched_tokens, (long long)r.max_tokens_per_step));
  return SchedulerConfig{o.max_batch, o.max_num_batched_tokens, runner.block_size()};
}

}  // namespace

uint64_t cache_namespace_of(const model::ModelConfig& c, DType kv_dtype, int32_t block_size) {
  std::string t = strfmt("bunsen-prefix-v1|%s|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%.17g|%d%d%d%d%d%d%d|", c.model_type.c_str(),
                         (long long)c.vocab_size, (long long)c.d_model, (long long)c.n_layers, (long long)c.n_heads,
                         (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.d_ff, c.rms_norm_eps,
                         c.tie_word_embeddings, c.attention_bias, c.o_proj_bias, c.mlp_bias, c.qk_norm, c.fused_qkv,
                         c.fused_gate_up);
  const model::RopeConfig& r = c.rope;
  t += strfmt("rope %d %.17g %.17g %.17g %.17g %.17g %lld %.17g %.17g|", static_cast<int>(r.type), r.theta, r.factor,
              r.partial_rotary_factor, r.low_freq_factor, r.high_freq_factor,
              (long long)r.original_max_position_embeddings, r.beta_fast, r.beta_slow);
  for (int w : c.sliding_window) t += strfmt("%d,", w);
  t += "|";
  for (bool u : c.use_rope) t += u ? '1' : '0';
  t += strfmt("|%.17g %.17g %.17g %.17g|kv %s|bs %d", c.embedding_multiplier, c.residual_multiplier,
              c.attention_multiplier.value_or(0.0), c.logits_scaling, dtype_name(kv_dtype), block_size);
  return hash_text(t);
}

uint64_t cache_namespace_of(const model::ModelConfig& cfg, DType kv_dtype, int32_t block_size,
                            const std::vector<kv::KvQuantSpec>& kv_quant) {
  const uint64_t base = cache_namespace_of(cfg, kv_dtype, block_size);
  bool any = false;
  for (const kv::KvQuantSpec& s : kv_quant) any = any || s.bits != 0;
  if (!any) return base;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over base, then (fp8, bits, group) of every layer
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(base);
  for (const kv::KvQuantSpec& s : kv_quant)  // fp8 in bit 48 (affine hashes are unchanged)
    mix(static_cast<uint64_t>(s.fp8) << 48 | static_cast<uint64_t>(s.bits) << 32 | static_cast<uint32_t>(s.group_size));
  return h == 0 ? 1 : h;
}

uint64_t cache_namespace_of(const model::ModelConfig& cfg, DType kv_dtype, int32_t block_size,
                            const std::vector<kv::KvQuantSpec>& kv_quant, const ModelIdentity& id) {
  const uint64_t base = cache_namespace_of(cfg, kv_dtype, block_size, kv_quant);
  const uint64_t h = hash_text(strfmt("bunsen-identity-v1|%016llx|%016llx|%016llx|", (unsigned long long)base,
                                      (unsigned long long)id.weights, (unsigned long long)id.tokenizer) +
                               id.adapters);
  return h == 0 ? 1 : h;
}

void validate_request(const EngineRequest& req, int64_t vocab_size, int64_t max_request_tokens) {
  check(!req.prompt.empty(), "engine", "prompt is empty: at least one token is needed");
  for (size_t i = 0; i < req.prompt.size(); ++i)
    check(req.prompt[i] >= 0 && req.prompt[i] < vocab_size, "engine",
          strfmt("prompt token %zu is id %d, outside the vocabulary [0, %lld)", i, req.prompt[i],
                 (long long)vocab_size));
  check(req.max_tokens >= 0, "engine", strfmt("max_tokens must be >= 0, got %lld", (long long)req.max_tokens));
  check(req.top_logprobs >= -1 && req.top_logprobs <= 20, "engine",
        strfmt("top_logprobs must be in [0, 20], got %d", req.top_logprobs));
  sampling::validate(req.sampling, vocab_size);
  const auto n_prompt = static_cast<int64_t>(req.prompt.size());
  if (n_prompt > max_request_tokens || req.max_tokens > max_request_tokens - n_prompt)
    throw Error("memory_admission",
                strfmt("context_over_budget: prompt (%lld tokens) + max_tokens (%lld) = %lld tokens exceeds the "
                       "%lld-token limit of one request (KV pool and context); shorten the prompt or lower "
                       "max_tokens",
                       (long long)n_prompt, (long long)req.max_tokens, (long long)(n_prompt + req.max_tokens),
                       (long long)max_request_tokens));
}

Engine::Engine(Runner& runner, EngineOptions options)
    : runner_(runner),
      opts_(std::move(options)),
      cache_(make_cache(runner, opts_)),
      checkpoints_(make_checkpoints(runner, cache_.get())),
      swa_cache_(make_sliding_cache(runner, cache_.get())),
      scheduler_(checked_config(runner, opts_), runner.pool(), cache_.get(), checkpoints_.get(),
                 sliding_of(runner, swa_cache_.get())) {
  if (opts_.cache_namespace == 0)
    opts_.cache_namespace = cache_namespace_of(runner.model().config(), runner.storage().dtype(), runner.block_size(),
                                               runner.options().kv_quant);
  // A sliding-window block space is a KV scheme of its own: its SSD snapshots hold other tensors (in another
  // order) than the same model's with one space, so the two never share a key (nor block the other's writes).
  if (runner.has_sliding_space())
    opts_.cache_namespace = kv::PrefixCache::chain_key(opts_.cache_namespace, 0x5377614b76ull /* "SwaKv" */,
                                                       std::vector<int32_t>{runner.sliding_window()});
  counters_.prefix_cache_enabled = cache_ != nullptr;
  ssd_open();
  ram_open();
  counters_.max_batch = opts_.max_batch;
  counters_.max_num_batched_tokens = opts_.max_num_batched_tokens;
  counters_.kv_blocks_total = runner_.pool().n_blocks();
  counters_.kv_sliding_blocks_total = runner_.sliding_pool().n_blocks();
  counters_.kv_sliding_window = runner_.sliding_window();
  counters_.block_size = runner_.block_size();
  counters_.max_request_tokens = request_limit(runner_);
  const size_t batch = static_cast<size_t>(opts_.max_batch);
  chunks_.reserve(batch + 1);
  sampled_.reserve(batch);
  rows_.reserve(batch);
  scratch_.resize(batch);
  row_chunks_.reserve(batch);
  picks_.reserve(batch);
  host_rows_.reserve(batch);
  device_sampling_ =
      opts_.device_sampling.value_or(runner_.device().is_cuda() && env_flag("BUNSEN_DEVICE_SAMPLING", true));
  if (device_sampling_) runner_.reserve_sampling(opts_.max_batch);  // before any decode graph is captured
  if (opts_.max_batch > 1) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int n = opts_.sampling_threads > 0 ? opts_.sampling_threads : std::min(hw, 8);
    if (n > 1) sample_pool_ = std::make_unique<ThreadPool>(std::min<int>(n, static_cast<int>(opts_.max_batch)));
  }
  refresh_stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

int64_t Engine::max_request_tokens() const { return request_limit(runner_); }

int64_t Engine::vocab_size() const { return runner_.model().config().vocab_size; }

RequestId Engine::submit(EngineRequest req, EventSink sink) {
  check(static_cast<bool>(sink), "engine", "submit: the event sink is empty");
  validate_request(req, vocab_size(), max_request_tokens());
  auto p = std::make_unique<Pending>();
  p->id = next_id_.fetch_add(1);
  p->req = std::move(req);
  p->sink = std::move(sink);
  const RequestId id = p->id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    check(!stopping_, "engine", "the engine is shut down");
    inbox_.push_back(std::move(p));
  }
  cv_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = stats_;
  s.waiting += static_cast<int64_t>(inbox_.size());
  fill_ssd_stats(s);
  fill_ram_stats(s);  // live: the writer thread finishes snapshots while the engine loop sleeps
  return s;
}

void Engine::shutdown() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable() && t.get_id() == std::this_thread::get_id()) {  // called from a sink: the loop ends
    std::lock_guard<std::mutex> lk(mu_);                          // after this step; join later
    thread_ = std::move(t);
    return;
  }
  if (t.joinable()) t.join();
}

void Engine::loop() {
  kernels::set_current_device(runner_.device());  // the current CUDA device is per thread
  bool progressed = true;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto ready = [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || restore_done_ ||
               (progressed && scheduler_.has_unfinished());
      };
      if (!progressed && scheduler_.has_unfinished())  // nothing fit last time: retry soon, not busily
        cv_.wait_for(lk, std::chrono::milliseconds(1), ready);
      else
        cv_.wait(lk, ready);
      if (stopping_) break;
    }
    progressed = step_once();
  }
  cancel_everything();
}

void Engine::cancel_everything() {
  ssd_snapshots_ = false;  // shutting down: cancelled requests are not snapshotted
  ssd_drain_restores();    // before the requests end: their held blocks go back first
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!inbox_.empty()) {
      drained_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    cancels_.clear();
  }
  for (auto& p : drained_)
    deliver(p->sink, finish_event(FinishReason::kCancelled, static_cast<int64_t>(p->req.prompt.size()), 0));
  drained_.clear();
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (RequestId id : ids) {
    scheduler_.cancel(id);
    end_request(id, EngineEvent::Kind::kFinish, FinishReason::kCancelled, "");
  }
  refresh_stats();
}

void Engine::take_inbox() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!inbox_.empty()) {
      drained_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    drained_cancels_.clear();
    drained_cancels_.swap(cancels_);
  }
  for (auto& p : drained_) admit(std::move(p));
  drained_.clear();
  for (RequestId id : drained_cancels_) {
    if (!live_.count(id)) continue;  // unknown or already finished: no-op
    scheduler_.cancel(id);
    end_request(id, EngineEvent::Kind::kFinish, FinishReason::kCancelled, "");
  }
}

void Engine::admit(std::unique_ptr<Pending> p) {
  auto live = std::make_unique<Live>(Live{std::move(p->sink), std::move(p->req.sampling), p->req.top_logprobs,
                                          sampling::Rng(0), static_cast<int64_t>(p->req.prompt.size())});
  live->rng = sampling::Rng(live->sampling.seed ? *live->sampling.seed : sampling::random_seed());
  NewSequence ns;
  ns.id = p->id;
  ns.prompt = std::move(p->req.prompt);
  ns.max_tokens = p->req.max_tokens;
  ns.cache_namespace = p->req.cache_salt == 0 ? opts_.cache_namespace
                                              : kv::PrefixCache::chain_key(opts_.cache_namespace, p->req.cache_salt, {});
  if (!p->req.ignore_eos) ns.eos_ids = p->req.eos_ids.empty() ? opts_.default_eos : std::move(p->req.eos_ids);
  try {
    scheduler_.add(std::move(ns));
  } catch (const std::exception& e) {  // validated in submit(); kept so the one-terminal-event rule holds
    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kError;
    ev.usage.prompt_tokens = live->n_prompt;
    ev.error = e.what();
    deliver(live->sink, std::move(ev));
    return;
  }
  live_.emplace(p->id, std::move(live));
  const Sequence& s = scheduler_.get(p->id);
  if (is_finished(s.status)) end_request(p->id, EngineEvent::Kind::kFinish, reason_of(s.status), "");
}

bool Engine::step_once() {
  const auto t_begin = std::chrono::steady_clock::now();
  take_inbox();
  ssd_poll_restores();  // also when nothing is left to run: a cancelled request's restore frees its blocks
  if (!scheduler_.has_unfinished()) {
    refresh_stats();
    return true;
  }
  ssd_restore_waiting();
  const SchedulerOutput& out = scheduler_.schedule();
  counters_.preemptions += static_cast<int64_t>(out.preempted.size());
  chunks_.clear();
  for (const ScheduledChunk& c : out.chunks) {
    const Sequence& s = scheduler_.get(c.id);
    chunks_.push_back(SeqChunk{&s.table, s.tokens.data() + c.start_pos, c.n_tokens, c.start_pos,
                               c.needs_logits ? SeqChunk::Logits::kLast : SeqChunk::Logits::kNone, &s.swa_table});
  }
  Tensor host_logits;
  const bool all_argmax = plan_picks(out);
  bool decode_only = true;
  for (const ScheduledChunk& c : out.chunks) decode_only = decode_only && c.is_decode;
  std::span<const int32_t> ids;
  const auto t0 = std::chrono::steady_clock::now();
  counters_.schedule_s += std::chrono::duration<double>(t0 - t_begin).count();
  try {
    restore_states(out);
    if (!chunks_.empty() && all_argmax) {
      ids = runner_.step_argmax(chunks_);
    } else if (!chunks_.empty()) {
      const Runner::Picked picked = runner_.step_pick(chunks_, picks_);
      ids = picked.ids;
      host_logits = picked.host_logits;
    }
    save_states(out);
  } catch (const std::exception& e) {
    fail_step(out, e.what());
    refresh_stats();
    return true;
  }
  const auto t1 = std::chrono::steady_clock::now();
  (decode_only ? counters_.decode_forward_s : counters_.mixed_forward_s) +=
      std::chrono::duration<double>(t1 - t0).count();
  if (decode_only && !chunks_.empty()) ++counters_.decode_steps;
  pick_rows(out, ids, host_logits);
  const auto t2 = std::chrono::steady_clock::now();
  counters_.sampling_s += std::chrono::duration<double>(t2 - t1).count();
  const std::vector<SeqId> finished = scheduler_.on_step_done(sampled_);
  if (!chunks_.empty()) ++counters_.steps;
  emit_step_events(out, finished);
  counters_.events_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  refresh_stats();
  return !chunks_.empty();
}

bool Engine::plan_picks(const SchedulerOutput& out) {
  using Kind = Runner::RowPick::Kind;
  picks_.clear();
  bool all_argmax = true;
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.needs_logits) continue;
    Live& live = *live_.at(c.id);
    const sampling::SamplingParams& p = live.sampling;
    const bool plain = !p.any_processor() && live.top_logprobs < 0;
    Runner::RowPick pick;
    if (plain && p.greedy()) {
      pick.kind = Kind::kArgmax;
    } else if (plain && device_sampling_) {
      pick.kind = Kind::kSample;  // the draw sample_row would take from the same RNG (one per token)
      pick.spec = kernels::SampleSpec{p.temperature, p.top_k, p.top_p, p.min_p, live.rng.next_double()};
    } else {
      pick.kind = Kind::kHost;
    }
    all_argmax = all_argmax && pick.kind == Kind::kArgmax;
    picks_.push_back(pick);
  }
  return all_argmax;
}

// Device-picked rows take the runner's ids (-1: the failure sample_row reports for the same row, so broken
// logits never become token 0); host rows are sampled side by side (rows are independent: own params, RNG
// and scratch). What a row threw is recorded and handled after the parallel part (the scheduler is not
// thread-safe).
void Engine::pick_rows(const SchedulerOutput& out, std::span<const int32_t> ids, const Tensor& host_logits) {
  using Kind = Runner::RowPick::Kind;
  sampled_.clear();
  row_failed_.clear();
  row_errors_.clear();
  const size_t n_rows = picks_.size();
  rows_.resize(n_rows);
  if (scratch_.size() < n_rows) scratch_.resize(n_rows);
  row_error_.assign(n_rows, std::string());
  row_chunks_.clear();
  for (const ScheduledChunk& c : out.chunks)
    if (c.needs_logits) row_chunks_.push_back(&c);
  host_rows_.clear();
  for (size_t r = 0; r < n_rows; ++r) {
    if (picks_[r].kind == Kind::kHost) {
      host_rows_.push_back(static_cast<int64_t>(r));
      continue;
    }
    rows_[r] = sampling::SampleResult{};
    rows_[r].token = std::max(ids[r], 0);
    if (ids[r] < 0)
      row_error_[r] = picks_[r].kind == Kind::kArgmax
                          ? "sampling: every logit is NaN"
                          : "sampling: no finite logit to sample from (all NaN or -inf)";
  }
  const int64_t vocab = vocab_size();
  auto sample_one = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto r = static_cast<size_t>(host_rows_[static_cast<size_t>(i)]);
      const ScheduledChunk& c = *row_chunks_[r];
      Live& live = *live_.at(c.id);
      const Sequence& s = scheduler_.get(c.id);
      const sampling::TokenContext ctx{s.prompt(), s.generated(), opts_.xtc_exempt};
      try {
        rows_[r] = sampling::sample_row(host_logits.ptr<float>() + i * vocab, vocab, live.sampling, ctx,
                                        live.rng, scratch_[r], live.top_logprobs);
      } catch (const std::exception& e) {
        row_error_[r] = e.what();
        rows_[r] = sampling::SampleResult{};
      }
    }
  };
  const auto n_host = static_cast<int64_t>(host_rows_.size());
  if (sample_pool_ && n_host > 1)
    sample_pool_->parallel_for(n_host, 1, sample_one);
  else
    sample_one(0, n_host);
  for (size_t r = 0; r < n_rows; ++r) {
    const SeqId id = row_chunks_[r]->id;
    if (!row_error_[r].empty()) {  // this request ends with kError; the others go on
      row_failed_.push_back(id);
      row_errors_.push_back(row_error_[r]);
      scheduler_.cancel(id);  // its row is ignored by on_step_done
    }
    sampled_.push_back(SampledToken{id, rows_[r].token});
  }
}

void Engine::emit_step_events(const SchedulerOutput& out, const std::vector<SeqId>& finished) {
  size_t r = 0;
  for (const ScheduledChunk& c : out.chunks) {
    const size_t row = c.needs_logits ? r++ : 0;
    auto it = live_.find(c.id);
    const Sequence* s = scheduler_.find(c.id);
    if (it == live_.end() || s == nullptr) continue;
    Live& live = *it->second;
    // Recomputed prompt tokens of a preempted sequence are reported (and counted) once only; prompt
    // tokens served from the prefix cache are reported but not counted as computed.
    if (live.prefilled == 0 && s->num_cached_tokens > 0) live.prefilled = s->num_cached_tokens;
    const int64_t prompt_done = std::min(c.start_pos + c.n_tokens, live.n_prompt);
    if (prompt_done > live.prefilled) {
      counters_.prompt_tokens += prompt_done - live.prefilled;
      live.prefilled = prompt_done;
      if (!c.needs_logits) {
        EngineEvent ev;
        ev.kind = EngineEvent::Kind::kPrefill;
        ev.prefilled = prompt_done;
        deliver(live.sink, std::move(ev));
      }
    }
    if (!c.needs_logits || s->n_generated() <= live.emitted) continue;  // EOS, failed row or no new token
    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kTokens;
    sampling::SampleResult& res = rows_[row];
    ev.tokens.push_back(TokenOut{s->tokens[static_cast<size_t>(live.n_prompt + live.emitted)], res.logprob,
                                 std::move(res.top)});
    ++live.emitted;
    ++counters_.generated_tokens;
    deliver(live.sink, std::move(ev));
  }
  for (SeqId id : finished)
    end_request(id, EngineEvent::Kind::kFinish, reason_of(scheduler_.get(id).status), "");
  for (size_t i = 0; i < row_failed_.size(); ++i)
    end_request(row_failed_[i], EngineEvent::Kind::kError, FinishReason::kCancelled, row_errors_[i]);
}

void Engine::fail_step(const SchedulerOutput& out, const std::string& error) {
  log::warn("engine", strfmt("step failed; its %zu requests end with an error: %s", out.chunks.size(),
                             error.c_str()));
  sampled_.clear();
  for (const ScheduledChunk& c : out.chunks) {
    scheduler_.cancel(c.id);  // frees the blocks; on_step_done ignores cancelled rows
    if (c.needs_logits) sampled_.push_back(SampledToken{c.id, 0});
  }
  scheduler_.on_step_done(sampled_);
  for (const ScheduledChunk& c : out.chunks)
    end_request(c.id, EngineEvent::Kind::kError, FinishReason::kCancelled, error);
}

void Engine::end_request(RequestId id, EngineEvent::Kind kind, FinishReason why, const std::string& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  std::unique_ptr<Live> live = std::move(it->second);
  live_.erase(it);
  ssd_probed_.erase(id);
  ssd_cancel_restore(id);
  EngineEvent ev = finish_event(why, live->n_prompt, live->emitted);
  ev.kind = kind;
  if (const Sequence* s = scheduler_.find(id)) {
    ev.usage.cached_tokens = std::max<int64_t>(s->num_cached_tokens, 0);
    if (!is_finished(s->status)) scheduler_.cancel(id);  // its blocks go to the prefix cache
    if (kind == EngineEvent::Kind::kFinish) ssd_snapshot(*s);
    scheduler_.remove(id);
  }
  if (kind == EngineEvent::Kind::kError) ev.error = error;
  ++counters_.requests_finished;
  refresh_stats();  // before the client hears of the end, so /stats never shows it still running
  deliver(live->sink, std::move(ev));
}

void Engine::refresh_stats() {
  counters_.running = static_cast<int64_t>(scheduler_.running().size());
  counters_.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  counters_.kv_blocks_free = runner_.pool().n_free();
  counters_.kv_sliding_blocks_free =
      runner_.sliding_pool().n_free() + (swa_cache_ ? swa_cache_->n_evictable() : 0);
  if (cache_) {
    const kv::PrefixCacheStats c = cache_->stats();
    counters_.kv_blocks_free += c.evictable;  // evictable cached blocks are free for allocation
    counters_.prefix_cache_entries = c.entries;
    counters_.prefix_cache_bytes = c.bytes;
    counters_.prefix_cache_hits = c.hit_blocks;
    counters_.prefix_cache_misses = c.miss_blocks;
    counters_.prefix_cache_hit_tokens = c.hit_tokens;
    counters_.prefix_cache_miss_tokens = c.miss_tokens;
    counters_.prefix_cache_evictions = c.evictions;
    counters_.prefix_cache_hit_ratio = c.hit_ratio();
  }
  if (checkpoints_) {
    const kv::StateCheckpointStats c = checkpoints_->stats();
    counters_.state_checkpoint_slots = checkpoints_->n_slots();
    counters_.state_checkpoint_entries = c.entries;
    counters_.state_checkpoint_hits = c.hits;
    counters_.state_checkpoint_saves = c.saves;
    counters_.state_checkpoint_evictions = c.evictions;
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_ = counters_;
}

}  // namespace bunsen::engine
