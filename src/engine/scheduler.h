// Scheduler: continuous-batching bookkeeping. Each step it packs one decode token per running sequence, then
// prefill chunks (chunked prefill) of partially prefilled and waiting sequences, FCFS (a held sequence, whose
// prefix a cache tier is restoring, is passed by until released), under a token budget;
// it allocates exactly the KV blocks the scheduled tokens need and preempts the newest running sequence when
// blocks run out (recomputed later). Not a runner, not thread-safe: no tensors, no CUDA, no locks (the
// Engine owns the loop thread). Invariants: block tables change only here; between steps every live
// sequence owns ceil(num_computed_tokens / block_size) blocks; a request that fits the pool alone always
// completes (the oldest running sequence is never preempted for a newer one), so no deadlock.
// With a PrefixCache: admission attaches the cached full blocks of a sequence's tokens (never its last
// token, which must run to produce logits) and schedules only the rest; finished, cancelled and preempted
// sequences hand their full computed blocks to the cache instead of freeing them; evictable cached blocks
// count as free (allocation evicts them, least recently used first).
// Hybrid models (a pool with linear-attention state slots): admission also gives the sequence a state slot
// (its table holds it; every release returns it). With a prefix cache they also need kv::StateCheckpoints:
// a prefill chunk never crosses the prompt's last full block boundary b = floor((n_prompt - 1) / bs) * bs
// (the chunk ending there is marked save_state), and a prefix hit is cut back to the deepest hit block with
// a checkpoint (the output lists the checkpoint to restore into the sequence's state slot before the step).
// Sliding-window block space (SlidingKv, scheduler_sliding.cpp): every sequence also holds a sliding table with
// the same logical blocks; each new block takes one block of each space (a step fits when both have room);
// after each step the sliding blocks whose positions are all < num_computed_tokens - window are released
// (into the sliding prefix cache, keyed like the full blocks, when there is one). A prefix hit of d blocks is
// usable only when the sliding cache still holds the blocks covering [d * bs - window, d * bs): the hit is cut
// back to the deepest such d (and, for hybrids, one with a checkpoint); the earlier entries start released.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv/state_checkpoints.h"

namespace bunsen::engine {

struct SchedulerConfig {
  int64_t max_num_seqs = 8;               // running sequences at once
  int64_t max_num_batched_tokens = 512;   // tokens per step (>= max_num_seqs: every decode row fits)
  int32_t block_size = 16;                // must equal the pool's block size
};

// The sliding-window block space of a runner that has one (Runner::has_sliding_space): its pool, the
// prefix cache over that pool (same block size; null when the full space has none) and the window.
struct SlidingKv {
  kv::BlockPool* pool = nullptr;  // null: no sliding space
  kv::PrefixCache* cache = nullptr;
  int32_t window = 0;
};

// One sequence's share of a step: its tokens [start_pos, start_pos + n_tokens).
struct ScheduledChunk {
  SeqId id = 0;
  int64_t start_pos = 0;
  int64_t n_tokens = 0;
  bool is_decode = false;     // a running sequence's single next token
  bool needs_logits = false;  // the chunk ends at the sequence's last token: one token will be sampled
  bool save_state = false;    // hybrids: the chunk ends at the prompt's checkpoint boundary; after the step
                              // the sequence's state is checkpointed under the key of the block ending there
};

// Hybrids: before the step, checkpoint slot `checkpoint` is copied into `state_slot` (the admitted sequence
// `id` resumes from a prefix hit there).
struct StateRestore {
  SeqId id = 0;
  int32_t checkpoint = -1;
  int32_t state_slot = -1;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // decode rows first (oldest first), then prefill chunks (FCFS)
  std::vector<SeqId> preempted;        // sequences preempted while building this step
  std::vector<StateRestore> restores;  // hybrids: checkpoint -> state slot copies to run before the step
  int64_t n_tokens() const;
  int64_t n_logit_rows() const;
};

// The token sampled for a chunk with needs_logits.
struct SampledToken {
  SeqId id = 0;
  int32_t token = 0;
};

class Scheduler {
 public:
  // `cache` (optional, over the same pool, outliving the scheduler) turns prefix caching on. A pool with
  // state slots (hybrid model) and a cache need `checkpoints` (same block size, outliving the scheduler).
  // `sliding` (pool non-null) gives sequences a second table in that space (see the top of this file).
  Scheduler(const SchedulerConfig& cfg, kv::BlockPool& pool, kv::PrefixCache* cache = nullptr,
            kv::StateCheckpoints* checkpoints = nullptr, SlidingKv sliding = {});

  // Queues a request. Throws Error("memory_admission", ...) when prompt + max_tokens cannot fit the whole
  // pool even alone, Error("engine", ...) on an empty prompt, negative max_tokens or a duplicate id.
  // max_tokens == 0 finishes at once ("length") without touching the pool.
  void add(NewSequence req);
  // Finishes a waiting or running sequence as cancelled and returns its blocks to the pool now. False when
  // the id is unknown or already finished. Safe between schedule() and on_step_done() (its row is ignored).
  bool cancel(SeqId id);
  // Holds a waiting sequence out of admission (while a tier restores its prefix) or lets it in again;
  // sequences behind a held one are admitted past it. No-op for an unknown or non-waiting id.
  void set_held(SeqId id, bool held);
  // Builds the next step. Must be followed by on_step_done() before the next schedule().
  const SchedulerOutput& schedule();
  // Completes the last step: advances num_computed_tokens of every scheduled chunk and appends the sampled
  // tokens; `sampled` holds one entry per needs_logits chunk of the last output, in chunk order (ids are
  // checked). Returns the ids of sequences that finished (EOS or max_tokens) in this step.
  std::vector<SeqId> on_step_done(std::span<const SampledToken> sampled);
  // Forgets a finished sequence (callers read its tokens and status first).
  void remove(SeqId id);

  const Sequence* find(SeqId id) const;
  const Sequence& get(SeqId id) const;
  const std::vector<Sequence*>& running() const { return running_; }  // oldest first
  const std::deque<Sequence*>& waiting() const { return waiting_; }   // FCFS head first
  size_t n_sequences() const { return seqs_.size(); }                 // including finished, not removed
  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  const SchedulerConfig& config() const { return cfg_; }
  const kv::BlockPool& pool() const { return pool_; }
  const kv::PrefixCache* prefix_cache() const { return cache_; }
  const SlidingKv& sliding() const { return sw_; }

 private:
  Sequence* lookup(SeqId id) const;
  void schedule_decodes();
  void schedule_running_prefills();
  void admit_waiting();
  // Tokens of `s` to schedule now (<= want) such that its blocks fit: allocates them, preempting newer
  // running sequences when `may_preempt`. Returns 0 (nothing allocated) when it cannot progress.
  int64_t reserve(Sequence& s, int64_t want, bool may_preempt);
  void preempt(Sequence& victim);
  void release(Sequence& s);
  // Attaches the cached prefix of a waiting sequence (num_computed_tokens = hit tokens); returns the hit
  // tokens. Hybrids: the hit ends at a checkpoint, whose slot goes to `checkpoint` (-1 without a hit).
  int64_t attach_cached_prefix(Sequence& s, int32_t& checkpoint);
  // Hybrids and sliding spaces: the deepest d <= n_hit with a checkpoint at the end of block d - 1 (its slot
  // -> checkpoint) and whose window blocks the sliding cache holds (attached to swa_table); the hit blocks
  // past d go back to the cache.
  int64_t cut_hit(Sequence& s, int64_t n_hit, int32_t& checkpoint);
  // Sliding space (scheduler_sliding.cpp): the chain keys of s's first n full blocks (memoised in s).
  const std::vector<kv::BlockKey>& keys_of(Sequence& s, int64_t n) const;
  // Which of the first n hit blocks the sliding cache holds: their ids, -1 where it does not.
  std::vector<kv::BlockId> sliding_hits(Sequence& s, int64_t n) const;
  // The first block holding a position >= next_pos - window (the blocks before it are never seen again).
  int64_t first_live_block(int64_t next_pos) const;
  // Attaches the sliding blocks of a hit of d blocks: released entries, then found[lo(d)..d) retained.
  void attach_sliding(Sequence& s, int64_t d, const std::vector<kv::BlockId>& found);
  kv::BlockId allocate_sliding();
  // Releases the sliding blocks that left the window after a step / every sliding block of s (the full
  // computed ones into the sliding cache).
  void release_out_of_window(Sequence& s);
  void release_sliding(Sequence& s);
  // Hybrids with checkpoints: the prompt's last full block boundary (0: none), and `want` capped so a chunk
  // starting at num_computed_tokens stops there.
  int64_t checkpoint_pos(const Sequence& s) const;
  int64_t cap_at_checkpoint(const Sequence& s, int64_t want) const;
  ScheduledChunk prefill_chunk(const Sequence& s, int64_t n) const;
  int32_t n_available() const;  // blocks a new logical block can take (both spaces)
  void finish(Sequence& s, SeqStatus why);
  void remove_from_running(Sequence& s);

  SchedulerConfig cfg_;
  kv::BlockPool& pool_;
  kv::PrefixCache* cache_ = nullptr;
  kv::StateCheckpoints* checkpoints_ = nullptr;
  SlidingKv sw_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // sorted by arrival
  std::deque<Sequence*> waiting_;   // FCFS; preempted sequences return to the front
  int64_t next_arrival_ = 0;
  SchedulerOutput out_;
  int64_t budget_ = 0;  // tokens left in the step being built
  bool in_flight_ = false;
};

}  // namespace bunsen::engine
