// StateCheckpoints: key -> checkpoint slot with verified lookups and LRU replacement. Host bookkeeping only;
// the checkpoint tensors and their copies live in engine/runner (DESIGN.md: kv/ runs no device work).
#include "kv/state_checkpoints.h"

#include <algorithm>

#include "core/status.h"

namespace bunsen::kv {

StateCheckpoints::StateCheckpoints(int32_t n_slots, int32_t block_size) : block_size_(block_size) {
  check(n_slots >= 0, "kv", strfmt("state checkpoint slots must be >= 0, got %d", n_slots));
  check(block_size > 0, "kv", strfmt("state checkpoint block size must be > 0, got %d", block_size));
  slots_.resize(static_cast<size_t>(n_slots));
  tokens_.assign(static_cast<size_t>(n_slots) * static_cast<size_t>(block_size), 0);
  map_.reserve(static_cast<size_t>(n_slots));
}

void StateCheckpoints::touch(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  lru_.splice(lru_.end(), lru_, s.lru);
}

std::optional<int32_t> StateCheckpoints::find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  auto it = map_.find(key);
  if (it == map_.end() || static_cast<int64_t>(block_tokens.size()) != block_size_) return std::nullopt;
  const int32_t slot = it->second;
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const int32_t* stored = tokens_.data() + static_cast<size_t>(slot) * static_cast<size_t>(block_size_);
  if (s.parent != parent || !std::equal(block_tokens.begin(), block_tokens.end(), stored)) return std::nullopt;
  touch(slot);
  ++counts_.hits;
  return slot;
}

int32_t StateCheckpoints::insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  check(!slots_.empty(), "kv", "state checkpoints: insert with no slots");
  check(static_cast<int64_t>(block_tokens.size()) == block_size_, "kv",
        strfmt("state checkpoints: a block has %d tokens, got %zu", block_size_, block_tokens.size()));
  int32_t slot;
  auto it = map_.find(key);
  if (it != map_.end()) {
    slot = it->second;  // the same key again (or a collision): the new checkpoint replaces it
    touch(slot);
  } else if (static_cast<size_t>(map_.size()) < slots_.size()) {
    slot = static_cast<int32_t>(map_.size());  // slots fill in order and are never freed, only replaced
    slots_[static_cast<size_t>(slot)].lru = lru_.insert(lru_.end(), slot);
  } else {
    slot = lru_.front();
    map_.erase(slots_[static_cast<size_t>(slot)].key);
    touch(slot);
    ++counts_.evictions;
  }
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.key = key;
  s.parent = parent;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(slot) * static_cast<ptrdiff_t>(block_size_));
  map_[key] = slot;
  ++counts_.saves;
  return slot;
}

StateCheckpointStats StateCheckpoints::stats() const {
  StateCheckpointStats s = counts_;
  s.entries = static_cast<int64_t>(map_.size());
  return s;
}

}  // namespace bunsen::kv
