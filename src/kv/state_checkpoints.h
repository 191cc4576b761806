// StateCheckpoints: bookkeeping of the linear-attention state checkpoints of a hybrid model. A checkpoint is
// a copy of one sequence's state slot taken right after the token that ends a full prompt block; it is keyed
// by that block's PrefixCache key, so a prefix hit on blocks [0, d) can resume the DeltaNet layers exactly
// where the attention layers' cached K/V end. Not storage (the Runner holds the checkpoint tensors, shaped
// like StateStorage slots) and not a copier (engine/runner does the copies); single-threaded (engine thread).
// Invariants: a key maps to at most one slot and a slot to at most one key; lookups verify the parent key
// and the block's tokens (a hash collision is a miss); when every slot is taken the least recently used
// checkpoint is the one replaced.
#pragma once
#include <cstdint>
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
  int64_t saves = 0;      // insert() calls
  int64_t evictions = 0;  // checkpoints replaced by another key
};

class StateCheckpoints {
 public:
  // n_slots checkpoint slots (>= 0; 0 = nothing is ever stored) over blocks of block_size tokens.
  StateCheckpoints(int32_t n_slots, int32_t block_size);
  int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t block_size() const { return block_size_; }

  // The slot holding the checkpoint taken at the end of the block with this key, parent key and tokens
  // ([block_size]); marks it most recently used. nullopt when absent or when the stored parent/tokens differ.
  std::optional<int32_t> find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  // The slot to copy a new checkpoint of `key` into: the key's own slot when stored (its metadata is
  // rewritten), else a never-used slot, else the least recently used one (replaced). Becomes most recently
  // used. Requires n_slots() > 0.
  int32_t insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens);
  StateCheckpointStats stats() const;

 private:
  struct Slot {
    BlockKey key = 0, parent = 0;
    std::list<int32_t>::iterator lru;
  };
  void touch(int32_t slot);

  int32_t block_size_;
  std::vector<Slot> slots_;                   // [n_slots]
  std::vector<int32_t> tokens_;               // [n_slots, block_size]: each checkpoint's block tokens
  std::unordered_map<BlockKey, int32_t> map_;
  std::list<int32_t> lru_;                    // used slots; front = least recently used
  StateCheckpointStats counts_;
};

}  // namespace bunsen::kv
