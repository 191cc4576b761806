// StateCheckpoints: key -> checkpoint slot with verified lookups, LRU replacement, an evict hook and reserved
// slots for restores. Host bookkeeping only; the checkpoint tensors and their copies live in engine/runner
// (DESIGN.md: kv/ runs no device work).
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
  for (int32_t i = n_slots; i-- > 0;) free_.push_back(i);  // slots fill in order 0, 1, ...
}

void StateCheckpoints::touch(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  lru_.splice(lru_.end(), lru_, s.lru);
}

const int32_t* StateCheckpoints::tokens_of(int32_t slot) const {
  return tokens_.data() + static_cast<size_t>(slot) * static_cast<size_t>(block_size_);
}

std::optional<int32_t> StateCheckpoints::peek(BlockKey key, BlockKey parent,
                                              std::span<const int32_t> block_tokens) const {
  auto it = map_.find(key);
  if (it == map_.end() || static_cast<int64_t>(block_tokens.size()) != block_size_) return std::nullopt;
  const int32_t slot = it->second;
  if (slots_[static_cast<size_t>(slot)].parent != parent ||
      !std::equal(block_tokens.begin(), block_tokens.end(), tokens_of(slot)))
    return std::nullopt;
  return slot;
}

std::optional<int32_t> StateCheckpoints::find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  const std::optional<int32_t> slot = peek(key, parent, block_tokens);
  if (!slot) return std::nullopt;
  touch(*slot);
  ++counts_.hits;
  return slot;
}

int32_t StateCheckpoints::take_slot() {
  if (!free_.empty()) {
    const int32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  check(!lru_.empty(), "kv", "state checkpoints: no slot to take (every slot is reserved)");
  const int32_t slot = lru_.front();
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (evict_hook_)
    evict_hook_(s.key, s.parent, std::span<const int32_t>(tokens_of(slot), static_cast<size_t>(block_size_)), slot);
  map_.erase(s.key);
  lru_.erase(s.lru);
  s.state = State::kFree;
  ++counts_.evictions;
  return slot;
}

void StateCheckpoints::drop(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  map_.erase(s.key);
  lru_.erase(s.lru);
  s.state = State::kFree;
  free_.push_back(slot);
}

void StateCheckpoints::store(int32_t slot, BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.state = State::kUsed;
  s.key = key;
  s.parent = parent;
  s.lru = lru_.insert(lru_.end(), slot);
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(slot) * static_cast<ptrdiff_t>(block_size_));
  map_[key] = slot;
  ++counts_.saves;
}

int32_t StateCheckpoints::insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  check(!slots_.empty(), "kv", "state checkpoints: insert with no slots");
  check(static_cast<int64_t>(block_tokens.size()) == block_size_, "kv",
        strfmt("state checkpoints: a block has %d tokens, got %zu", block_size_, block_tokens.size()));
  auto it = map_.find(key);
  if (it == map_.end()) {
    const int32_t slot = take_slot();
    store(slot, key, parent, block_tokens);
    return slot;
  }
  const int32_t slot = it->second;  // the same key again (or a collision): the new checkpoint replaces it
  slots_[static_cast<size_t>(slot)].parent = parent;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(slot) * static_cast<ptrdiff_t>(block_size_));
  touch(slot);
  ++counts_.saves;
  return slot;
}

std::optional<int32_t> StateCheckpoints::reserve() {
  if (n_reserved_ + 1 >= n_slots()) return std::nullopt;  // one slot stays for insert()
  const int32_t slot = take_slot();
  slots_[static_cast<size_t>(slot)].state = State::kReserved;
  ++n_reserved_;
  return slot;
}

void StateCheckpoints::commit(int32_t slot, BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  check(slot >= 0 && slot < n_slots() && slots_[static_cast<size_t>(slot)].state == State::kReserved, "kv",
        strfmt("state checkpoints: commit of slot %d, which is not reserved", slot));
  check(static_cast<int64_t>(block_tokens.size()) == block_size_, "kv",
        strfmt("state checkpoints: a block has %d tokens, got %zu", block_size_, block_tokens.size()));
  auto it = map_.find(key);
  if (it != map_.end()) drop(it->second);  // stored meanwhile (the same prefix): the restored copy replaces it
  --n_reserved_;
  store(slot, key, parent, block_tokens);
}

void StateCheckpoints::unreserve(int32_t slot) {
  check(slot >= 0 && slot < n_slots() && slots_[static_cast<size_t>(slot)].state == State::kReserved, "kv",
        strfmt("state checkpoints: unreserve of slot %d, which is not reserved", slot));
  slots_[static_cast<size_t>(slot)].state = State::kFree;
  free_.push_back(slot);
  --n_reserved_;
}

StateCheckpointStats StateCheckpoints::stats() const {
  StateCheckpointStats s = counts_;
  s.entries = static_cast<int64_t>(map_.size());
  return s;
}

}  // namespace bunsen::kv
