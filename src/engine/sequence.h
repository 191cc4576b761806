// Sequence: the host-side state of one request inside the scheduler — its token ids (prompt then generated),
// how many of them have their K/V written (num_computed_tokens), its status and its KV block table.
// Not a tensor holder and not thread-safe: the Scheduler is its only writer.
// Invariants: tokens = prompt ++ generated (EOS excluded); a waiting sequence owns no blocks and has
// num_computed_tokens == 0; a running one owns exactly ceil(num_computed_tokens / block_size) blocks between
// steps (full computed ones may be shared with other sequences and the prefix cache); a finished one owns none.
// With a sliding-window block space, swa_table has as many entries as table; its leading entries are released
// (their positions left the window) and its live ones cover at least [num_computed_tokens - window, ...).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace bunsen::engine {

using SeqId = int64_t;

enum class SeqStatus { kWaiting, kRunning, kFinishedStop, kFinishedLength, kFinishedCancelled };
const char* seq_status_name(SeqStatus s);
inline bool is_finished(SeqStatus s) { return s >= SeqStatus::kFinishedStop; }

// What add() takes: one request's prompt and its stop conditions.
struct NewSequence {
  SeqId id = 0;
  std::vector<int32_t> prompt;   // must be non-empty
  int64_t max_tokens = 256;      // generated tokens (EOS excluded) before finishing with "length"
  std::vector<int32_t> eos_ids;  // a sampled id in this set finishes with "stop" (not appended)
  uint64_t cache_namespace = 0;  // prefix-cache namespace: blocks are shared only within one namespace
};

struct Sequence {
  Sequence(NewSequence req, int32_t block_size, int64_t arrival);

  SeqId id;
  std::vector<int32_t> tokens;  // prompt then generated; capacity reserved at add (no growth per step)
  int64_t n_prompt;
  int64_t max_tokens;
  std::vector<int32_t> eos_ids;
  int64_t num_computed_tokens = 0;  // tokens whose K/V are in the cache
  SeqStatus status = SeqStatus::kWaiting;
  kv::BlockTable table;
  kv::BlockTable swa_table;  // sliding-window layers' blocks (runners with a sliding space; empty otherwise)
  // Prefix-cache keys of the first full blocks (a memo, extended as sliding blocks leave the window).
  std::vector<kv::BlockKey> block_keys;
  int64_t arrival;  // admission order (smaller = older); FCFS and preemption order
  int32_t n_preemptions = 0;
  uint64_t cache_namespace = 0;
  // Prompt tokens whose K/V came from the prefix cache at the first admission (-1: not admitted yet).
  // Readmissions after a preemption may hit too (that saves recompute) but do not change it.
  int64_t num_cached_tokens = -1;
  // A waiting sequence whose prefix a tier is restoring (Scheduler::set_held): admission passes it by.
  bool held = false;

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_generated() const { return n_tokens() - n_prompt; }
  std::span<const int32_t> prompt() const { return {tokens.data(), static_cast<size_t>(n_prompt)}; }
  std::span<const int32_t> generated() const {
    return {tokens.data() + n_prompt, static_cast<size_t>(n_generated())};
  }
  // True when every token but the last sampled one is computed: the next chunk is one decode token.
  bool is_decoding() const { return n_generated() > 0 && num_computed_tokens == n_tokens() - 1; }
};

}  // namespace bunsen::engine
