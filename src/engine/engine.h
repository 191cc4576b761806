// The serving engine: a Backend takes token-level generation requests from any thread and streams token
// events back. Engine is the real one: a loop thread that owns the Scheduler and the Runner, packs every
// running sequence into one forward per step (continuous batching, chunked prefill), samples each row with
// its own parameters and seeded RNG, and honours cancellation within one step. ReplayBackend replays fixed
// token scripts at the same boundary (tests of the text/dialect layers). Not text: no tokenizer, no stop
// strings (the server cancels when one matches), no JSON.
// Invariants: a request either throws from submit() (nothing queued, the sink never called) or gets
// exactly one terminal event (kFinish or kError) after zero or more kPrefill/kTokens events; sinks run on
// the engine thread, in order per request, and must not block; all cross-thread locking lives here.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/generator.h"
#include "engine/restore_pool.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "core/thread_pool.h"
#include "kv/ram_tier.h"
#include "kv/ssd_tier.h"
#include "sampling/sampler.h"

namespace bunsen::engine {

using RequestId = int64_t;

struct EngineRequest {
  std::vector<int32_t> prompt;  // non-empty
  sampling::SamplingParams sampling;
  int64_t max_tokens = 256;      // generated tokens (EOS excluded); 0 finishes at once with kLength
  std::vector<int32_t> eos_ids;  // empty: the backend's default EOS set
  bool ignore_eos = false;       // generate to max_tokens whatever is sampled
  int top_logprobs = -1;         // -1: no logprobs; 0: the chosen token's; 1..20: also the top n
  uint64_t cache_salt = 0;       // mixed into the prefix-cache namespace: only equal salts share blocks
};

struct TokenOut {
  int32_t token = 0;
  float logprob = 0.0f;              // valid when the request asked for logprobs
  std::vector<sampling::Logprob> top;  // top_logprobs entries
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int64_t generated_tokens = 0;
};

struct EngineEvent {
  enum class Kind { kPrefill, kTokens, kFinish, kError };
  Kind kind = Kind::kTokens;
  int64_t prefilled = 0;         // kPrefill: prompt tokens computed so far (one event per prefill chunk)
  std::vector<TokenOut> tokens;  // kTokens: new tokens in order (EOS excluded)
  FinishReason finish = FinishReason::kStop;  // kFinish: kStop = an EOS id was sampled
  Usage usage;                   // kFinish and kError
  std::string error;             // kError: what failed (the request is over)
};
using EventSink = std::function<void(EngineEvent&&)>;

struct EngineStats {
  int64_t running = 0;  // sequences in the running set
  int64_t waiting = 0;  // queued, including preempted ones
  int64_t max_batch = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;  // free list + evictable prefix-cache blocks (both allocatable)
  // Sliding-window block space (Runner::has_sliding_space; all 0 without one): its blocks, the allocatable
  // ones (free + evictable sliding prefix-cache entries) and the window it releases by.
  int64_t kv_sliding_blocks_total = 0;
  int64_t kv_sliding_blocks_free = 0;
  int64_t kv_sliding_window = 0;
  int64_t block_size = 0;
  int64_t max_request_tokens = 0;  // prompt + max_tokens limit of one request
  int64_t steps = 0;               // forward passes so far
  int64_t preemptions = 0;
  int64_t requests_finished = 0;
  int64_t prompt_tokens = 0;     // computed prompt tokens, all requests
  int64_t generated_tokens = 0;  // sampled tokens, all requests
  // Where the engine thread's time goes (seconds, cumulative): scheduling a step (inbox, admission, the
  // chunk list, pick plans), forward passes of decode-only steps and of steps with prefill chunks, host-side
  // sampling of logits rows, and the step's bookkeeping and event delivery (the sinks run on this thread).
  int64_t decode_steps = 0;
  double schedule_s = 0;
  double decode_forward_s = 0;
  double mixed_forward_s = 0;
  double sampling_s = 0;
  double events_s = 0;
  // Prefix cache (device tier). Hits/misses count full blocks looked up at admission; the hit ratio is
  // over tokens (prompt tokens served from the cache / tokens of admitted sequences).
  bool prefix_cache_enabled = false;
  int64_t prefix_cache_entries = 0;
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_misses = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_miss_tokens = 0;
  int64_t prefix_cache_evictions = 0;
  double prefix_cache_hit_ratio = 0;
  // SSD tier (--ssd-cache): entries/bytes on disk; hits/misses count lookups of prompts the device cache
  // did not fully cover (a hit restored at least one block); writes count snapshot files written.
  bool ssd_cache_enabled = false;
  int64_t ssd_cache_entries = 0;
  int64_t ssd_cache_bytes = 0;
  int64_t ssd_cache_hits = 0;
  int64_t ssd_cache_misses = 0;
  int64_t ssd_cache_hit_tokens = 0;
  int64_t ssd_cache_writes = 0;
  int64_t ssd_cache_write_failures = 0;
  int64_t ssd_cache_quarantined = 0;
  int64_t ssd_cache_evictions = 0;
  int64_t ssd_cache_dropped = 0;  // snapshots skipped because the write queue was full
  // Restores (asynchronous jobs, see engine_ssd.cpp): bytes copied into KV blocks by restores that
  // completed, and the seconds those jobs took from submission to their last copy landing (GB/s = ratio).
  int64_t ssd_cache_restored_bytes = 0;
  double ssd_cache_restore_s = 0;
  int64_t ssd_cache_restores_pending = 0;  // restore jobs in flight
  // RAM tier (--prompt-cache GB on CUDA): blocks evicted from the device cache, in pinned host memory.
  bool ram_cache_enabled = false;
  int64_t ram_cache_capacity_blocks = 0;
  int64_t ram_cache_entries = 0;
  int64_t ram_cache_bytes = 0;
  int64_t ram_cache_stores = 0;
  int64_t ram_cache_evictions = 0;
  int64_t ram_cache_hits = 0;
  int64_t ram_cache_hit_tokens = 0;
  // The RAM tier's sliding-window part (runners with a sliding block space; 0 otherwise): blocks evicted
  // from the sliding space's prefix cache, restored with the full-space blocks of a hit whose window they are.
  int64_t ram_cache_sliding_capacity_blocks = 0;
  int64_t ram_cache_sliding_entries = 0;
  int64_t ram_cache_sliding_bytes = 0;
  int64_t ram_cache_sliding_stores = 0;
  int64_t ram_cache_sliding_evictions = 0;
  int64_t ram_cache_sliding_hit_tokens = 0;  // tokens of the sliding blocks restored from RAM
  // The RAM tier's linear-attention checkpoints (hybrid models; 0 otherwise): checkpoints the device was about
  // to replace, one per slot, copied back on a hit that resumes from them.
  int64_t ram_cache_state_capacity = 0;  // slots
  int64_t ram_cache_state_entries = 0;
  int64_t ram_cache_state_bytes = 0;
  int64_t ram_cache_state_stores = 0;
  int64_t ram_cache_state_evictions = 0;
  int64_t ram_cache_state_hits = 0;  // checkpoints restored from RAM
  // Linear-attention state checkpoints (hybrid models with a prefix cache; 0 slots otherwise): the state at
  // a prompt's last full block, what a prefix hit on a hybrid resumes from (kv::StateCheckpoints).
  int64_t state_checkpoint_slots = 0;
  int64_t state_checkpoint_entries = 0;
  int64_t state_checkpoint_hits = 0;       // hits that resumed from a checkpoint
  int64_t state_checkpoint_saves = 0;      // checkpoints taken
  int64_t state_checkpoint_evictions = 0;  // checkpoints replaced by another prefix
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Validates and queues a request; the sink receives its events on the engine thread. Throws
  // Error("memory_admission", ...) when prompt + max_tokens can never fit (max_request_tokens()),
  // Error("engine", ...) / Error("sampling", ...) for invalid fields (empty prompt, token id outside the
  // vocabulary, bad sampling values, top_logprobs > 20).
  virtual RequestId submit(EngineRequest req, EventSink sink) = 0;
  // Any thread; the request ends with kFinish(kCancelled) within one step. Unknown/finished ids: no-op.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t max_request_tokens() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Cancels everything still running or queued (their sinks get kFinish(kCancelled)) and joins the thread.
  // Idempotent; the destructor calls it.
  virtual void shutdown() = 0;
};

struct EngineOptions {
  int64_t max_batch = 8;                 // sequences per step (<= the runner's max_seqs and max_logit_rows)
  int64_t max_num_batched_tokens = 512;  // tokens per step (<= the runner's max_tokens_per_step)
  std::vector<int32_t> default_eos{};    // used when a request gives no eos_ids
  std::vector<int32_t> xtc_exempt{};     // ids XTC never removes (EOS + newline tokens)
  int sampling_threads = 0;              // threads that sample a step's rows; 0: min(cores, 8)
  bool prefix_cache = true;              // automatic prefix caching of full KV blocks (device tier)
  // Prefix-cache namespace: blocks are reused only under the same value. 0: cache_namespace_of(the
  // runner's model config, KV dtype, block size). Callers that know more (tokenizer hash, adapter set,
  // weights fingerprint) pass their own hash of all of it. The Engine mixes in its runner's sliding-window
  // block space when there is one (another KV layout).
  uint64_t cache_namespace = 0;
  // SSD tier of the prefix cache (needs prefix_cache): "" disables it. Finished requests' prefixes are
  // snapshotted to this directory by a background thread; prompts the device cache misses are restored
  // from it by restore worker threads while the request waits and other sequences keep stepping (see
  // engine_ssd.cpp for the cost). Survives restarts.
  std::string ssd_cache_dir{};
  uint64_t ssd_cache_max_bytes = 32ull << 30;
  bool ssd_cache_verify = false;  // verify payload checksums on every restore (header + tokens always are)
  int ssd_restore_threads = 0;    // restore workers; 0: min(8, hardware threads)
  // Tests: runs on a restore worker as each restore job starts (it may block, to hold a restore in flight).
  std::function<void()> ssd_restore_hook{};
  // RAM tier of the prefix cache (needs prefix_cache): bytes of host memory (pinned for CUDA runners) that
  // blocks evicted from the device cache are copied into, and restored from on a later hit. 0: off.
  // `bunsen serve` sets it for CUDA only (a CPU pool is host RAM already). With a sliding-window block
  // space the bytes are split between the two spaces in the proportion of their device pools.
  uint64_t ram_cache_bytes = 0;
  // Where plain sampled rows (temperature > 0, no processor, no logprobs) are drawn: on the runner's device
  // (ops.h's sample() fed the request's next uniform: the host sampler's token from the same logits, and
  // only the rows that need the host sampler copied back) or on the host. Unset: on the device for CUDA
  // runners (BUNSEN_DEVICE_SAMPLING=0 turns it off), on the host for CPU ones.
  std::optional<bool> device_sampling{};
};

// The namespace the Engine derives from what it has: the model config's architecture fields (type,
// vocabulary, widths, layer/head counts, head_dim, rope, norm eps, sliding windows, multipliers), the KV
// dtype and the block size. Two models that differ in any of them never share cached blocks. Weights,
// tokenizer and adapters are not known here: callers mix them in with the ModelIdentity overload below.
uint64_t cache_namespace_of(const model::ModelConfig& cfg, DType kv_dtype, int32_t block_size);
// The same mixed with a per-layer quantized-KV scheme (the base value when nothing is quantized), so blocks
// written under one KV scheme are never reused under another. The Engine's default uses the runner's scheme.
uint64_t cache_namespace_of(const model::ModelConfig& cfg, DType kv_dtype, int32_t block_size,
                            const std::vector<kv::KvQuantSpec>& kv_quant);

// What else a cached block depends on: the weights (model::checkpoint_fingerprint), the tokenizer files
// (model::tokenizer_fingerprint) and the adapter set ("" = none; names + their fingerprints otherwise).
struct ModelIdentity {
  uint64_t weights = 0;
  uint64_t tokenizer = 0;
  std::string adapters;
};
// The namespace of the architecture + KV scheme above mixed with `id` (what `bunsen serve` passes as
// EngineOptions::cache_namespace): a fine-tune of the same shape, another tokenizer or adapter set never
// hits another's blocks, in the device cache or from the SSD tier after a restart.
uint64_t cache_namespace_of(const model::ModelConfig& cfg, DType kv_dtype, int32_t block_size,
                            const std::vector<kv::KvQuantSpec>& kv_quant, const ModelIdentity& id);

class Engine final : public Backend {
 public:
  Engine(Runner& runner, EngineOptions options);
  ~Engine() override;
  RequestId submit(EngineRequest req, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  int64_t max_request_tokens() const override;
  int64_t vocab_size() const override;
  void shutdown() override;

 private:
  struct Pending;
  struct Live;
  void loop();
  bool step_once();  // false: nothing could be scheduled
  void take_inbox();                         // inbox_/cancels_ -> scheduler (engine thread)
  void admit(std::unique_ptr<Pending> p);    // one new request into the scheduler
  // How each logits row of `out` gets its token (picks_): plain greedy rows (no processors, no logprobs)
  // by argmax where the logits are, plain sampled rows by the device sampler when device_sampling_ (their
  // uniform drawn from the request's RNG here), the rest by the host sampler. True when every row is argmax:
  // the step then asks the Runner for argmax ids only.
  bool plan_picks(const SchedulerOutput& out);
  // rows_ and sampled_ from the runner's ids (device-picked rows) and host_logits (the kHost rows in order).
  void pick_rows(const SchedulerOutput& out, std::span<const int32_t> ids, const Tensor& host_logits);
  void emit_step_events(const SchedulerOutput& out, const std::vector<SeqId>& finished);
  void end_request(RequestId id, EngineEvent::Kind kind, FinishReason why, const std::string& error);
  void fail_step(const SchedulerOutput& out, const std::string& error);  // the step's requests: kError
  void cancel_everything();                  // shutdown: queued and live requests end kCancelled
  void refresh_stats();
  // Hybrids (engine_state.cpp): checkpoint -> state slot copies the step needs, run before its forward;
  // state -> checkpoint copies of the chunks that ended at a checkpoint boundary, after it.
  void restore_states(const SchedulerOutput& out);
  void save_states(const SchedulerOutput& out);
  // SSD tier (engine_ssd.cpp), engine thread only.
  void ssd_open();
  void ssd_snapshot(const Sequence& s);  // a finished sequence's cached prefix -> the writer queue
  void ssd_restore_waiting();            // finishes done restores, starts those of sequences about to be admitted
  void ssd_restore(const Sequence& s);   // starts one restore job (the sequence is held until it ends)
  // The deepest prefix of s deeper than `above` blocks (keys: s's first blocks) whose snapshot the disk
  // index lists (no I/O), in blocks; 0 when none.
  int64_t ssd_lookup(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t above);
  // The SSD tier's namespace for a sequence namespace: hybrids' snapshots (K/V + linear-attention state,
  // format version 3) live under their own, so a file written without the state is never found by them.
  uint64_t ssd_namespace(uint64_t ns) const;
  // Hybrids: the deepest d <= n (keys: s's first blocks, at least n) whose block d - 1 has a device
  // checkpoint (kv::StateCheckpoints::holds, nothing changes); 0 when none.
  int64_t deepest_checkpoint(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t n) const;
  // One restore in flight: what the engine holds for it until its job is done.
  struct SsdRestore {
    SeqId seq = 0;
    std::shared_ptr<RestoreJob> job;
    uint64_t ns = 0;
    std::vector<int32_t> tokens;  // [n * block_size] the restored prefix's ids
    std::vector<kv::BlockKey> keys;
    int64_t d = 0, before = 0, n = 0;  // device hit, the hit the device alone allows, the hit restored
    std::vector<kv::BlockId> blocks;   // the device hit's d blocks, then the fresh ones of [d, n)
    std::vector<kv::BlockId> swa_held;  // sliding window blocks the device had (referenced)
    std::vector<int64_t> swa_missing;   // sliding window block indices restored from the file ...
    std::vector<kv::BlockId> fresh_swa;  // ... into these blocks
    int32_t checkpoint = -1;  // hybrids: the reserved checkpoint slot the file's state is copied into
  };
  // Releases what `r` holds; when its job succeeded (and was not cancelled) the restored blocks are cached.
  void ssd_finish_restore(SsdRestore& r);
  void ssd_drain_restores();  // shutdown: cancels and waits for every restore, then releases its blocks
  void ssd_poll_restores();           // every step: finishes the restores whose job is done (non-blocking)
  void ssd_cancel_restore(SeqId id);  // the request ended: its restore's copies stop (blocks freed when done)
  kv::SsdLayout ssd_layout() const;      // tensor_bytes per block (full space, then the sliding space)
  void fill_ssd_stats(EngineStats& s) const;  // any thread
  // The per-block tensors of one KV space (the full space: runner.storage(); the sliding one:
  // runner.sliding_storage()): every per-block tensor of every layer in snapshot order (K, V[, params]),
  // the bytes of one block of each, and the pitch when they are equal-sized at a constant distance.
  struct BlockSpace {
    std::vector<const Tensor*> tensors;
    std::vector<size_t> bytes;
    size_t pitch = 0;  // > 0: tensors[i].data == [0].data + i * pitch, equal bytes (a block is one 2-D copy)
    size_t per_block() const;
  };
  // The RAM tier of one space: slot bookkeeping and the host memory behind the slots.
  struct RamSpace {
    std::unique_ptr<kv::RamTier> tier;  // null when off
    kernels::DeviceMemory memory;       // [n_slots][tensor][block bytes] (pinned for CUDA runners)
  };
  // Shared by the tiers (engine_tiers.cpp), engine thread only.
  bool collect_block_tensors();  // fills blocks_ (and swa_blocks_); false: some space is not contiguous
  static bool collect_space(const kv::KvStorage& st, BlockSpace& out);  // false: not contiguous
  // Sliding space: the first block of the window a query right after a hit of d blocks sees; a hit of d
  // blocks is usable only with the sliding blocks [window_first_block(d), d).
  int64_t window_first_block(int64_t d) const;
  // The sliding prefix cache's entry for each of the first keys.size() blocks of s (-1: not cached).
  std::vector<kv::BlockId> sliding_on_device(const Sequence& s, std::span<const kv::BlockKey> keys) const;
  // The deepest d <= n whose window blocks all have have[j] (0 when none has).
  int64_t deepest_with_window(int64_t n, const std::vector<bool>& have) const;
  // RAM tier (engine_ram.cpp), engine thread only.
  void ram_open();
  bool ram_open_space(RamSpace& ram, const BlockSpace& space, uint64_t bytes, const char* what);
  void ram_store(RamSpace& ram, const BlockSpace& space, kv::BlockKey key, kv::BlockKey parent,
                 std::span<const int32_t> tokens, kv::BlockId id);
  void ram_restore(const Sequence& s);
  // The sliding side of a RAM restore: the hit it aims at and that hit's window blocks, pinned.
  struct RamWindow {
    int64_t before = 0;  // the deepest hit the device alone allows
    int64_t n = 0;       // the hit aimed at: the deepest one whose window is on the device or in RAM
    int64_t first = 0;   // the window is blocks [first, n) (empty unless n > before)
    std::vector<std::pair<kv::BlockId, int32_t>> blocks;  // per window block: (held entry, -1) or (-1, RAM slot)
    int64_t from_ram() const;
  };
  // keys: of the first n_full blocks of s, whose full-space blocks are on the device (d) or in RAM.
  RamWindow ram_pick_window(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t d, int64_t n_full);
  // Unpins the window; with `fresh` (the blocks its RAM entries were copied into, in order) they are cached.
  void ram_put_window(const Sequence& s, std::span<const kv::BlockKey> keys, const RamWindow& w,
                      std::span<const kv::BlockId> fresh);
  void ram_copy(const RamSpace& ram, const BlockSpace& space, int32_t slot, kv::BlockId block, bool to_device);
  // Hybrids: the RAM tier's linear-attention checkpoints (state_ram_). open: its share of `bytes` (returned,
  // 0 when off); store: the evict hook of checkpoints_ (a checkpoint about to be replaced is copied out);
  // pick: the hit a RAM restore aims at, the deepest d in (before, n_full] with a checkpoint on the device
  // or in RAM (*ram_slot: the RAM slot to bring back, pinned, or -1).
  uint64_t ram_open_state(uint64_t bytes);
  void ram_store_state(kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens, int32_t slot);
  int64_t ram_pick_checkpoint(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t before, int64_t n_full,
                              int32_t* ram_slot);
  void ram_publish_stats();
  void fill_ram_stats(EngineStats& s) const;

  Runner& runner_;
  EngineOptions opts_;
  std::unique_ptr<kv::PrefixCache> cache_;  // engine thread only; null when disabled (before scheduler_)
  std::unique_ptr<kv::StateCheckpoints> checkpoints_;  // hybrids with a prefix cache; null otherwise
  std::unique_ptr<kv::PrefixCache> swa_cache_;  // sliding space's prefix cache (with cache_); null otherwise
  Scheduler scheduler_;  // engine thread only
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;  // engine thread only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> inbox_;  // guarded by mu_
  std::vector<RequestId> cancels_;              // guarded by mu_
  EngineStats stats_;                           // guarded by mu_ (a snapshot refreshed every step)
  bool stopping_ = false;                       // guarded by mu_
  std::atomic<RequestId> next_id_{1};
  // Step buffers (engine thread only), cleared and refilled every step so a step does not reallocate.
  std::vector<std::unique_ptr<Pending>> drained_;
  std::vector<RequestId> drained_cancels_;
  std::vector<SeqChunk> chunks_;               // one per ScheduledChunk
  std::vector<SampledToken> sampled_;          // one per needs_logits chunk
  std::vector<sampling::SampleResult> rows_;   // the sample_row result of each logits row
  std::vector<SeqId> row_failed_;              // rows whose sampling threw (kError after the step)
  std::vector<std::string> row_errors_;
  std::vector<sampling::SamplerScratch> scratch_;  // one per logits row (rows are sampled in parallel)
  std::vector<std::string> row_error_;             // per row: what sampling threw ("" = fine)
  std::vector<const ScheduledChunk*> row_chunks_;  // the chunk of each logits row
  std::vector<Runner::RowPick> picks_;             // how each logits row is picked (plan_picks)
  std::vector<int64_t> host_rows_;                 // the logits rows the host sampler takes, in order
  bool device_sampling_ = false;                   // EngineOptions::device_sampling, resolved
  std::unique_ptr<ThreadPool> sample_pool_;        // samples a step's rows side by side
  std::unique_ptr<kv::SsdTier> ssd_;               // null when the SSD tier is off
  BlockSpace blocks_;                              // the full space's per-block tensors (RAM and SSD tiers)
  BlockSpace swa_blocks_;                          // the sliding space's (empty without one)
  RamSpace ram_;                                   // RAM tier of the full space (tier null: the RAM tier is off)
  RamSpace swa_ram_;                               // ... of the sliding space (on with ram_ when there is one)
  RamSpace state_ram_;                             // ... hybrids: linear-attention checkpoints (one per slot)
  bool ram_failed_ = false;                        // a copy failed: stores and restores stop
  mutable std::mutex ram_stats_mu_;
  kv::RamTierStats ram_stats_, swa_ram_stats_, state_ram_stats_;  // copies for other threads (ram_stats_mu_)
  std::unordered_set<SeqId> ssd_probed_;           // waiting sequences already looked up on disk
  std::vector<SsdRestore> ssd_restores_;           // restores in flight (engine thread only)
  std::vector<SeqId> ssd_followers_;               // held until a restore ends (another job restores their prefix)
  bool restore_done_ = false;                      // guarded by mu_: a restore job ended (wakes the loop)
  std::unique_ptr<RestorePool> restore_pool_;      // with ssd_; destroyed before it (declared after)
  bool ssd_snapshots_ = true;                      // off while shutting down
  EngineStats counters_;                       // engine thread's totals; copied into stats_ each step
  std::thread thread_;
};

// Replays scripted token sequences: the k-th submitted request gets scripts[k % scripts.size()], one token
// per kTokens event (logprob 0, top entries empty), ending kStop when the script ends (kLength at
// max_tokens, kStop early at an EOS id of the request). Validates like Engine.
class ReplayBackend final : public Backend {
 public:
  ReplayBackend(std::vector<std::vector<int32_t>> scripts, int64_t vocab_size, int64_t max_request_tokens);
  ~ReplayBackend() override;
  RequestId submit(EngineRequest req, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  int64_t max_request_tokens() const override { return max_request_tokens_; }
  int64_t vocab_size() const override { return vocab_size_; }
  void shutdown() override;

 private:
  struct Job;
  void loop();

  std::vector<std::vector<int32_t>> scripts_;
  int64_t vocab_size_, max_request_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  size_t next_script_ = 0;
  RequestId next_id_ = 1;
  EngineStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

// Validation shared by both backends (throws as Backend::submit documents).
void validate_request(const EngineRequest& req, int64_t vocab_size, int64_t max_request_tokens);

}  // namespace bunsen::engine
