// RamTier: the host-RAM tier of the prefix cache as bookkeeping: which block key lives in which of
// n_slots fixed-size host slots, with LRU replacement and pins. A block the device cache evicts is stored
// here (the engine copies its K/V into the slot, on the runner's stream, so the copy is ordered before the
// step that overwrites the device block and nothing waits); a prompt whose next blocks the device cache
// misses but this tier holds gets them copied back before its prefill. Not storage (the engine owns the
// pinned buffer), not thread-safe (the engine thread owns it), never touches a device.
// The engine keeps one RamTier per KV block space (the full space and, for Gemma-style models, the
// sliding-window space, both under the same chain keys) and, for hybrid models, one whose slots hold
// linear-attention state checkpoints (keyed by the block they end).
// Invariants: a key is in at most one slot; a pinned slot is never replaced; a lookup verifies the parent
// key and the block's tokens (a hash collision is a miss).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/prefix_cache.h"

namespace bunsen::kv {

struct RamTierStats {
  bool enabled = false;
  int64_t capacity = 0;    // slots
  int64_t entries = 0;     // slots holding a block
  int64_t bytes = 0;       // entries * bytes per slot
  int64_t stores = 0;      // blocks copied in (device evictions)
  int64_t evictions = 0;   // entries replaced by newer ones
  int64_t hits = 0;        // lookups that restored at least one block (hybrids: or only a checkpoint)
  int64_t hit_tokens = 0;  // tokens restored from RAM
};

class RamTier {
 public:
  RamTier(int32_t n_slots, int32_t block_size, size_t bytes_per_slot);

  // The slot a block evicted from the device under `key` should be copied into: a free slot, else the least
  // recently used unpinned one (its old entry is dropped). nullopt when the key is held already (it becomes
  // the most recent) or every slot is pinned.
  std::optional<int32_t> store(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // The slot holding `key` when its parent key and tokens match; pinned (release() it) and most recent.
  std::optional<int32_t> acquire(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // Whether acquire() would find `key` (verified the same way); changes nothing.
  bool holds(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const;
  void release(int32_t slot);
  void count_hit(int64_t tokens);

  int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }
  size_t bytes_per_slot() const { return bytes_per_slot_; }
  RamTierStats stats() const;

 private:
  struct Slot {
    bool used = false;
    int32_t pins = 0;
    BlockKey key = 0, parent = 0;
    std::list<int32_t>::iterator lru;
  };
  void touch(int32_t slot);
  std::optional<int32_t> find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const;

  int32_t block_size_;
  size_t bytes_per_slot_;
  std::vector<Slot> slots_;
  std::vector<int32_t> tokens_;  // [n_slots, block_size]
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;       // used slots, front = least recently used
  std::unordered_map<BlockKey, int32_t> map_;
  RamTierStats counts_;
};

}  // namespace bunsen::kv
