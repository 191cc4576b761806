// StateCheckpoints: bookkeeping of the linear-attention state checkpoints of a hybrid model. A checkpoint is
// a copy of one sequence's state slot taken right after the token that ends a full prompt block; it is keyed
// by that block's PrefixCache key, so a prefix hit on blocks [0, d) can resume the DeltaNet layers exactly
// where the attention layers' cached K/V end. Not storage (the Runner holds the checkpoint tensors, shaped
// like StateStorage slots) and not a copier (engine/runner does the copies); single-threaded (engine thread).
// The cache tiers (engine_ram.cpp, engine_ssd.cpp) use two extra calls: an evict hook that sees a checkpoint
// before its slot is reused (the RAM tier copies it out), and reserve/commit/unreserve, which hand a restore
// a slot that nobody finds or replaces until the restored state has landed in it.
// Invariants: a key maps to at most one slot and a slot to at most one key; lookups verify the parent key
// and the block's tokens (a hash collision is a miss); when every slot is taken the least recently used
// checkpoint is the one replaced; a reserved slot is neither found nor replaced, and at least one slot always
// stays unreserved (insert() never fails for lack of a slot).
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/prefix_cache.h"

namespace bunsen::kv {

struct StateCheckpointStats {
  int64_t entries = 0;
  int64_t hits = 0;       // find() calls that returned a slot
  int64_t saves = 0;      // insert() and commit() calls
  int64_t evictions = 0;  // checkpoints replaced by another key
};

class StateCheckpoints {
 public:
  // Runs before the slot of a stored checkpoint is reused for another key (its contents are still intact):
  // the checkpoint's key, parent key, block tokens and slot.
  using EvictHook = std::function<void(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens,
                                       int32_t slot)>;

  // n_slots checkpoint slots (>= 0; 0 = nothing is ever stored) over blocks of block_size tokens.
  StateCheckpoints(int32_t n_slots, int32_t block_size);
  int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t block_size() const { return block_size_; }
  void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }

  // The slot holding the checkpoint taken at the end of the block with this key, parent key and tokens
  // ([block_size]); marks it most recently used. nullopt when absent or when the stored parent/tokens differ.
  std::optional<int32_t> find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // The slot find() would return; changes nothing (no LRU move, not counted).
  std::optional<int32_t> peek(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const;
  bool holds(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const {
    return peek(key, parent, block_tokens).has_value();
  }
  // The slot to copy a new checkpoint of `key` into: the key's own slot when stored (its metadata is
  // rewritten), else a free slot, else the least recently used one (replaced). Becomes most recently
  // used. Requires n_slots() > 0.
  int32_t insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // A slot for a restore to write a checkpoint into: a free one, else the least recently used one (replaced).
  // It holds no key until commit(). nullopt when taking it would leave no unreserved slot.
  std::optional<int32_t> reserve();
  // The reserved `slot` now holds the checkpoint of `key` (a slot holding the same key already is freed);
  // most recently used.
  void commit(int32_t slot, BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // The reserved `slot` goes back, empty (a restore that failed).
  void unreserve(int32_t slot);
  int32_t n_reserved() const { return n_reserved_; }
  StateCheckpointStats stats() const;

 private:
  enum class State : uint8_t { kFree, kUsed, kReserved };
  struct Slot {
    State state = State::kFree;
    BlockKey key = 0, parent = 0;
    std::list<int32_t>::iterator lru;
  };
  void touch(int32_t slot);
  const int32_t* tokens_of(int32_t slot) const;
  int32_t take_slot();        // a free slot, else the LRU one (evicted, hook run); not in lru_ afterwards
  void drop(int32_t slot);    // a used slot loses its key (no hook) and becomes free
  void store(int32_t slot, BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);

  int32_t block_size_;
  std::vector<Slot> slots_;                   // [n_slots]
  std::vector<int32_t> tokens_;               // [n_slots, block_size]: each checkpoint's block tokens
  std::unordered_map<BlockKey, int32_t> map_;
  std::list<int32_t> lru_;                    // used slots; front = least recently used
  std::vector<int32_t> free_;                 // free slots, the lowest id last (taken first)
  int32_t n_reserved_ = 0;
  EvictHook evict_hook_;
  StateCheckpointStats counts_;
};

}  // namespace bunsen::kv
