// SsdTier: the prefix cache's SSD tier as the engine uses it: an SsdStore plus ONE background writer thread
// that writes prefix snapshots handed over by the engine thread, so the engine loop never waits on the disk
// for writes; debouncing (a prefix key is queued at most once per process, and never when the store
// already holds it); a cap on the bytes waiting in the queue (snapshots past it are dropped, counted);
// lookup counters. Not the copy out of / into KV memory (the engine does that: kv knows no devices) and not
// hashing (callers pass SsdEntryKey). Invariants: snapshots are written in submission order; the
// destructor writes what is queued, then joins; all methods are thread-safe.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "kv/ssd_store.h"

namespace bunsen::kv {

// One finished prefix, copied out of the KV cache: payload tensors hold n_blocks blocks each
// ([n_blocks, block_size, n_kv_heads, head_dim] per K and V of every layer, in layout order). It is
// written once per target: target i is the prefix of targets[i].n_blocks blocks under targets[i].key
// (a prefix of each tensor, so several prefix lengths share one copy). Models with a sliding-window block
// space: layout.sliding.n_tensors > 0, the last that many entries of layout.tensor_bytes are the sliding
// space's tensors, and each target carries its own copy of them (the window at ITS end differs), written as
// a version-2 file; `tensors` then holds the full space's tensors only. Hybrid models: layout.state.n_tensors > 0,
// the entries of layout.tensor_bytes after the full space's are the linear-attention state tensors (whole
// bytes, not per block), and each target carries its own checkpoint of them (a version-3 file).
struct SsdSnapshot {
  struct Target {
    SsdEntryKey key;
    int64_t n_blocks = 0;  // <= the snapshot's n_blocks
    // Sliding space only: its blocks [swa_first_block, n_blocks) of this prefix, one buffer per sliding
    // tensor ([n_blocks - swa_first_block] blocks each, layout order).
    int64_t swa_first_block = 0;
    std::vector<std::vector<std::byte>> swa_tensors{};
    // Hybrids only: the linear-attention state at the end of this prefix, one buffer per state tensor.
    std::vector<std::vector<std::byte>> state_tensors{};
  };
  std::vector<Target> targets;
  int64_t n_blocks = 0;
  std::vector<int32_t> tokens;  // [n_blocks * block_size]
  SsdLayout layout;             // block_size etc.; tensor_bytes = bytes per BLOCK of each tensor
  std::vector<std::vector<std::byte>> tensors;
  size_t bytes() const;
};

struct SsdTierStats {
  bool enabled = false;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;        // lookups that restored a prefix from disk
  int64_t misses = 0;      // lookups (a prompt the device cache did not fully cover) with nothing usable
  int64_t hit_tokens = 0;  // tokens restored from disk
  int64_t writes = 0;
  int64_t write_failures = 0;
  int64_t quarantined = 0;
  int64_t evictions = 0;
  int64_t dropped = 0;  // snapshots not queued because the queue was over its byte cap
  int64_t pending = 0;  // snapshots waiting for the writer
  int64_t restored_bytes = 0;  // payload bytes restores copied into KV blocks (completed restores)
  double restore_s = 0;        // seconds those restores took (submission to the last copy landing)
};

class SsdTier {
 public:
  SsdTier(SsdStoreOptions options, size_t max_pending_bytes = size_t{1} << 30);
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  SsdStore& store() { return store_; }
  // Whether a snapshot under `key` is wanted: enabled, not queued or written by this process, not stored.
  bool wants(const SsdEntryKey& key) const;
  // Whether `bytes` more would fit the queue's byte cap (callers check before copying payloads out); a
  // false answer counts the snapshot as dropped.
  bool has_room(size_t bytes);
  // Queues a snapshot; its targets count as written from now on (wants() is false for them). False when
  // dropped (disabled, no target wanted, or over the queue cap).
  bool submit(SsdSnapshot snapshot);
  // Blocks until every queued snapshot is written (tests, orderly shutdown).
  void flush();
  void count_lookup(bool hit, int64_t restored_tokens);
  void count_restore(double seconds, int64_t bytes);  // one completed restore
  SsdTierStats stats() const;

 private:
  void run();
  void write(const SsdSnapshot& s);
  void refresh_store_stats();

  SsdStore store_;
  size_t max_pending_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the writer waits for work
  std::condition_variable idle_cv_;  // flush() waits for an empty queue
  std::deque<SsdSnapshot> queue_;    // guarded by mu_
  size_t pending_bytes_ = 0;         // guarded by mu_
  bool busy_ = false;                // guarded by mu_: the writer holds a snapshot
  bool stopping_ = false;            // guarded by mu_
  std::unordered_set<SsdEntryKey, SsdEntryKeyHash> seen_;  // guarded by mu_
  int64_t hits_ = 0, misses_ = 0, hit_tokens_ = 0, dropped_ = 0;  // guarded by mu_
  int64_t restored_bytes_ = 0;  // guarded by mu_
  double restore_s_ = 0;        // guarded by mu_
  SsdTierStats store_stats_;  // guarded by mu_: the store's numbers as of the last refresh
  std::thread thread_;
};

}  // namespace bunsen::kv
