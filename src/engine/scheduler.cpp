// Scheduler: decode rows, running prefill chunks, then FCFS admission, each under the step's token budget;
// preemption by recompute (newest running first). Not a runner: host bookkeeping only.
// Invariants kept here: running_ is sorted by arrival and every running sequence is older than every waiting
// one (admission is FCFS and a preempted sequence, the newest running, goes to the front of waiting_), so
// "preempt the newest" never hurts an older sequence and the oldest always progresses.
// Prefix cache (optional): admission attaches hit blocks and starts the chunk after them; release() hands a
// sequence's blocks to the cache, which keeps the full computed ones and frees the rest.
// Hybrids with checkpoints: prefill chunks stop at the prompt's checkpoint boundary (marked save_state; the
// Engine takes the checkpoint) and a hit is cut back to its deepest checkpointed block (a restore entry).
// Sliding-window block space (scheduler_sliding.cpp): each new block takes one block in both spaces, steps
// release the sliding blocks that left the window, and cut_hit also needs the hit's window blocks.
#include "engine/scheduler.h"

#include <algorithm>

#include "core/status.h"

namespace bunsen::engine {

const char* seq_status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kFinishedStop: return "stop";
    case SeqStatus::kFinishedLength: return "length";
    case SeqStatus::kFinishedCancelled: return "cancelled";
  }
  return "unknown";
}

Sequence::Sequence(NewSequence req, int32_t block_size, int64_t arrival_order)
    : id(req.id),
      tokens(std::move(req.prompt)),
      n_prompt(static_cast<int64_t>(tokens.size())),
      max_tokens(req.max_tokens),
      eos_ids(std::move(req.eos_ids)),
      table(block_size),
      swa_table(block_size),
      arrival(arrival_order),
      cache_namespace(req.cache_namespace) {
  tokens.reserve(static_cast<size_t>(n_prompt + max_tokens));
}

int64_t SchedulerOutput::n_tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.n_tokens;
  return n;
}

int64_t SchedulerOutput::n_logit_rows() const {
  return std::count_if(chunks.begin(), chunks.end(), [](const ScheduledChunk& c) { return c.needs_logits; });
}

Scheduler::Scheduler(const SchedulerConfig& cfg, kv::BlockPool& pool, kv::PrefixCache* cache,
                     kv::StateCheckpoints* checkpoints, SlidingKv sliding)
    : cfg_(cfg), pool_(pool), cache_(cache), checkpoints_(checkpoints), sw_(sliding) {
  check(!sw_.pool || (sw_.window > 0 && sw_.pool->n_blocks() > 0), "engine",
        strfmt("a sliding block space needs a window > 0 (got %d) and blocks", sw_.window));
  check(!sw_.cache || (sw_.pool && &sw_.cache->pool() == sw_.pool && sw_.cache->block_size() == cfg.block_size &&
                       cache),
        "engine", "the sliding prefix cache must use the sliding pool and the block size, beside a full-space cache");
  check(!cache || (&cache->pool() == &pool && cache->block_size() == cfg.block_size), "engine",
        "the prefix cache must use the scheduler's block pool and block size");
  check(!cache || pool.n_state_slots() == 0 || checkpoints, "engine",
        "a hybrid model's prefix cache needs linear-attention state checkpoints (a hit restores the state)");
  check(!checkpoints || (cache && checkpoints->block_size() == cfg.block_size && pool.n_state_slots() > 0),
        "engine", "state checkpoints need a prefix cache, the scheduler's block size and a hybrid pool");
  check(cfg.block_size > 0, "engine", strfmt("scheduler block_size must be > 0, got %d", cfg.block_size));
  check(cfg.max_num_seqs > 0, "engine", "scheduler max_num_seqs must be > 0");
  check(cfg.max_num_batched_tokens >= cfg.max_num_seqs, "engine",
        strfmt("max_num_batched_tokens (%lld) must be >= max_num_seqs (%lld) so every decode row fits a step",
               (long long)cfg.max_num_batched_tokens, (long long)cfg.max_num_seqs));
  running_.reserve(static_cast<size_t>(cfg.max_num_seqs));
  out_.chunks.reserve(static_cast<size_t>(cfg.max_num_seqs) + 1);
}

void Scheduler::add(NewSequence req) {
  check(!req.prompt.empty(), "engine", strfmt("sequence %lld: prompt is empty", (long long)req.id));
  check(req.max_tokens >= 0, "engine", strfmt("sequence %lld: max_tokens must be >= 0", (long long)req.id));
  check(!seqs_.count(req.id), "engine", strfmt("sequence id %lld already exists", (long long)req.id));
  const auto n_prompt = static_cast<int64_t>(req.prompt.size());
  const int64_t pool_tokens = static_cast<int64_t>(pool_.n_blocks()) * cfg_.block_size;
  const int64_t total = n_prompt + std::min(req.max_tokens, pool_tokens + 1);  // clamped: no overflow
  const int64_t blocks = (total + cfg_.block_size - 1) / cfg_.block_size;
  if (blocks > pool_.n_blocks())
    throw Error("memory_admission",
                strfmt("prompt (%lld tokens) + max_tokens (%lld) = %lld tokens needs %lld KV blocks of %d tokens; "
                       "the whole pool has %d blocks (%lld tokens)",
                       (long long)n_prompt, (long long)req.max_tokens, (long long)(n_prompt + req.max_tokens),
                       (long long)blocks, cfg_.block_size, pool_.n_blocks(), (long long)pool_tokens));
  if (sw_.pool) {  // one sequence alone holds at most the window plus a one-token chunk
    const int64_t bs = cfg_.block_size, sw_need = std::min<int64_t>(blocks, (sw_.window + bs - 1) / bs + 2);
    if (sw_need > sw_.pool->n_blocks())
      throw Error("memory_admission",
                  strfmt("prompt (%lld tokens) + max_tokens (%lld) needs %lld sliding-window KV blocks of %d tokens "
                         "(window %d); the sliding pool has %d blocks",
                         (long long)n_prompt, (long long)req.max_tokens, (long long)sw_need, cfg_.block_size,
                         sw_.window, sw_.pool->n_blocks()));
  }
  auto seq = std::make_unique<Sequence>(std::move(req), cfg_.block_size, next_arrival_++);
  Sequence* s = seq.get();
  seqs_.emplace(s->id, std::move(seq));
  if (s->max_tokens == 0) {
    s->status = SeqStatus::kFinishedLength;
    return;
  }
  waiting_.push_back(s);
}

Sequence* Scheduler::lookup(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const Sequence* Scheduler::find(SeqId id) const { return lookup(id); }

const Sequence& Scheduler::get(SeqId id) const {
  const Sequence* s = lookup(id);
  if (s == nullptr) throw Error("engine", strfmt("unknown sequence id %lld", (long long)id));
  return *s;
}

void Scheduler::remove_from_running(Sequence& s) {
  auto it = std::find(running_.begin(), running_.end(), &s);
  if (it != running_.end()) running_.erase(it);
}

void Scheduler::release(Sequence& s) {
  if (sw_.pool) release_sliding(s);
  if (cache_) {
    cache_->release_sequence(s.cache_namespace, s.tokens, s.num_computed_tokens, s.table.blocks());
    s.table.clear();
    s.table.release_state_slot(pool_);
  } else {
    s.table.release_all(pool_);
  }
  s.num_computed_tokens = 0;
}

int64_t Scheduler::attach_cached_prefix(Sequence& s, int32_t& checkpoint) {
  checkpoint = -1;
  if (!cache_) return 0;
  // Never the whole sequence: its last token must run so the step produces logits.
  const int64_t max_blocks = (s.n_tokens() - 1) / cfg_.block_size;
  std::vector<kv::BlockId> hits;
  int64_t n = cache_->match(s.cache_namespace, s.tokens, max_blocks, hits);
  for (kv::BlockId b : hits) s.table.append(b);
  if (checkpoints_ || sw_.pool) n = cut_hit(s, n, checkpoint);
  s.num_computed_tokens = n * cfg_.block_size;
  return s.num_computed_tokens;
}

int64_t Scheduler::cut_hit(Sequence& s, int64_t n_hit, int32_t& checkpoint) {
  const int32_t bs = cfg_.block_size;
  const std::vector<kv::BlockKey> keys = keys_of(s, n_hit);  // a copy: keys_of may grow the memo later
  std::vector<kv::BlockId> found;
  std::vector<int64_t> missing;  // sliding: missing[j] = hit blocks in [0, j) the sliding cache lacks
  if (sw_.pool) {
    found = sliding_hits(s, n_hit);
    missing.assign(static_cast<size_t>(n_hit) + 1, 0);
    for (int64_t j = 0; j < n_hit; ++j)
      missing[static_cast<size_t>(j + 1)] = missing[static_cast<size_t>(j)] + (found[static_cast<size_t>(j)] < 0);
  }
  int64_t d = n_hit;
  for (; d > 0; --d) {
    if (sw_.pool && missing[static_cast<size_t>(d)] != missing[static_cast<size_t>(first_live_block(d * bs))])
      continue;  // a block inside the window at position d * bs is gone
    if (checkpoints_) {
      const auto blk = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>((d - 1) * bs), bs);
      const auto slot = checkpoints_->find(keys[static_cast<size_t>(d - 1)],
                                           d > 1 ? keys[static_cast<size_t>(d - 2)] : 0, blk);
      if (!slot) continue;
      checkpoint = *slot;
    }
    break;
  }
  std::vector<kv::BlockId> held = s.table.blocks();  // exactly the n_hit hit blocks
  s.table.clear();
  for (int64_t i = n_hit; i-- > d;) cache_->release(held[static_cast<size_t>(i)]);  // deepest first
  for (int64_t i = 0; i < d; ++i) s.table.append(held[static_cast<size_t>(i)]);
  if (sw_.pool) attach_sliding(s, d, found);
  return d;
}

int64_t Scheduler::checkpoint_pos(const Sequence& s) const {
  return checkpoints_ ? (s.n_prompt - 1) / cfg_.block_size * cfg_.block_size : 0;
}

int64_t Scheduler::cap_at_checkpoint(const Sequence& s, int64_t want) const {
  const int64_t b = checkpoint_pos(s);
  return s.num_computed_tokens < b ? std::min(want, b - s.num_computed_tokens) : want;
}

ScheduledChunk Scheduler::prefill_chunk(const Sequence& s, int64_t n) const {
  const int64_t start = s.num_computed_tokens, b = checkpoint_pos(s);
  return {s.id, start, n, /*is_decode=*/false, start + n == s.n_tokens(), b > 0 && start < b && start + n == b};
}

void Scheduler::finish(Sequence& s, SeqStatus why) {
  if (s.status == SeqStatus::kRunning) remove_from_running(s);
  if (s.status == SeqStatus::kWaiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &s));
  const int64_t computed = s.num_computed_tokens;
  release(s);
  s.num_computed_tokens = computed;  // kept for usage reporting; the blocks are gone
  s.status = why;
}

bool Scheduler::cancel(SeqId id) {
  Sequence* s = lookup(id);
  if (!s || is_finished(s->status)) return false;
  finish(*s, SeqStatus::kFinishedCancelled);
  return true;
}

void Scheduler::remove(SeqId id) {
  const Sequence& s = get(id);
  check(is_finished(s.status), "engine",
        strfmt("sequence %lld is %s; only finished sequences can be removed", (long long)id,
               seq_status_name(s.status)));
  seqs_.erase(id);
}

void Scheduler::preempt(Sequence& victim) {
  remove_from_running(victim);
  auto it = std::find_if(out_.chunks.begin(), out_.chunks.end(),
                         [&](const ScheduledChunk& c) { return c.id == victim.id; });
  if (it != out_.chunks.end()) {  // already scheduled in this step: its tokens return to the budget
    budget_ += it->n_tokens;
    out_.chunks.erase(it);
  }
  release(victim);
  victim.status = SeqStatus::kWaiting;
  ++victim.n_preemptions;
  waiting_.push_front(&victim);
  out_.preempted.push_back(victim.id);
}

int64_t Scheduler::reserve(Sequence& s, int64_t want, bool may_preempt) {
  const int64_t done = s.num_computed_tokens;
  for (;;) {
    const int64_t owned = static_cast<int64_t>(s.table.blocks().size());
    const int64_t fit = (owned + n_available()) * cfg_.block_size - done;  // tokens the free blocks allow
    const int64_t n = std::min(want, fit);
    if (n > 0) {
      const int32_t need = s.table.blocks_needed(done + n);
      for (int32_t i = 0; i < need; ++i) {
        s.table.append(cache_ ? *cache_->allocate() : *pool_.allocate());
        if (sw_.pool) s.swa_table.append(allocate_sliding());
      }
      return n;
    }
    if (!may_preempt) return 0;
    Sequence* victim = running_.back();  // s is running, so running_ is not empty
    preempt(*victim);
    if (victim == &s) return 0;
  }
}

void Scheduler::schedule_decodes() {
  for (size_t i = 0; i < running_.size() && budget_ > 0;) {
    Sequence& s = *running_[i];
    if (!s.is_decoding()) {
      ++i;
      continue;
    }
    if (reserve(s, 1, /*may_preempt=*/true) == 0) continue;  // s preempted itself (it was the last one)
    out_.chunks.push_back({s.id, s.num_computed_tokens, 1, /*is_decode=*/true, /*needs_logits=*/true});
    --budget_;
    ++i;
  }
}

void Scheduler::schedule_running_prefills() {
  for (size_t i = 0; i < running_.size() && budget_ > 0;) {
    Sequence& s = *running_[i];
    if (s.is_decoding()) {
      ++i;
      continue;
    }
    const int64_t n =
        reserve(s, cap_at_checkpoint(s, std::min(s.n_tokens() - s.num_computed_tokens, budget_)), true);
    if (n == 0) continue;  // preempted itself
    out_.chunks.push_back(prefill_chunk(s, n));
    budget_ -= n;
    ++i;
  }
}

void Scheduler::set_held(SeqId id, bool held) {
  Sequence* s = lookup(id);
  if (s && s->status == SeqStatus::kWaiting) s->held = held;
}

void Scheduler::admit_waiting() {
  size_t i = 0;  // the first waiting sequence not held (held ones wait for a tier restore)
  while (budget_ > 0 && static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs) {
    while (i < waiting_.size() && waiting_[i]->held) ++i;
    if (i == waiting_.size()) break;
    Sequence& s = *waiting_[i];
    if (!s.table.acquire_state_slot(pool_)) break;  // hybrid models: a state slot per running sequence
    int32_t checkpoint = -1;
    const int64_t hit = attach_cached_prefix(s, checkpoint);
    const int64_t n = reserve(s, cap_at_checkpoint(s, std::min(s.n_tokens() - hit, budget_)), /*may_preempt=*/false);
    if (n == 0) {  // FCFS: nobody overtakes the head of the queue (held ones aside); the hits go back
      const auto& held = s.table.blocks();  // only hit blocks (reserve allocated nothing); deepest first
      for (auto it = held.rbegin(); it != held.rend(); ++it) cache_->release(*it);
      s.table.clear();
      if (sw_.pool) release_sliding(s);
      s.table.release_state_slot(pool_);
      s.num_computed_tokens = 0;
      break;
    }
    if (cache_)
      cache_->record_lookup(hit / cfg_.block_size, (s.n_tokens() - 1) / cfg_.block_size, hit, s.n_tokens());
    if (s.num_cached_tokens < 0) s.num_cached_tokens = std::min(hit, s.n_prompt);
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    s.status = SeqStatus::kRunning;
    auto at = std::upper_bound(running_.begin(), running_.end(), &s,
                               [](const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; });
    running_.insert(at, &s);
    if (checkpoint >= 0) out_.restores.push_back({s.id, checkpoint, s.table.state_slot()});
    out_.chunks.push_back(prefill_chunk(s, n));
    budget_ -= n;
  }
}

const SchedulerOutput& Scheduler::schedule() {
  check(!in_flight_, "engine", "schedule() called again before on_step_done() of the previous step");
  out_.chunks.clear();
  out_.preempted.clear();
  out_.restores.clear();
  budget_ = cfg_.max_num_batched_tokens;
  schedule_decodes();
  schedule_running_prefills();
  // After a preemption the pool is short: admitting now would only thrash (the victim would come straight
  // back or a newcomer would be preempted next step).
  if (out_.preempted.empty()) admit_waiting();
  in_flight_ = true;
  return out_;
}

std::vector<SeqId> Scheduler::on_step_done(std::span<const SampledToken> sampled) {
  check(in_flight_, "engine", "on_step_done() without a scheduled step");
  size_t k = 0;
  for (const ScheduledChunk& c : out_.chunks) {  // validate before changing anything
    if (!c.needs_logits) continue;
    if (!(k < sampled.size() && sampled[k].id == c.id))
      throw Error("engine", strfmt("on_step_done: expected a sampled token for sequence %lld at row %zu",
                                   (long long)c.id, k));
    ++k;
  }
  if (k != sampled.size())
    throw Error("engine", strfmt("on_step_done: %zu sampled tokens for %zu logits rows", sampled.size(), k));
  in_flight_ = false;
  std::vector<SeqId> finished;
  k = 0;
  for (const ScheduledChunk& c : out_.chunks) {
    const int32_t tok = c.needs_logits ? sampled[k++].token : 0;
    Sequence* s = lookup(c.id);
    if (!s || is_finished(s->status)) continue;  // cancelled while the step ran
    check(s->num_computed_tokens == c.start_pos, "engine", "on_step_done: chunk does not continue its sequence");
    s->num_computed_tokens += c.n_tokens;
    if (sw_.pool) release_out_of_window(*s);
    if (!c.needs_logits) continue;
    if (std::find(s->eos_ids.begin(), s->eos_ids.end(), tok) != s->eos_ids.end()) {
      finish(*s, SeqStatus::kFinishedStop);
    } else {
      s->tokens.push_back(tok);
      if (s->n_generated() >= s->max_tokens) finish(*s, SeqStatus::kFinishedLength);
    }
    if (is_finished(s->status)) finished.push_back(s->id);
  }
  return finished;
}

}  // namespace bunsen::engine
