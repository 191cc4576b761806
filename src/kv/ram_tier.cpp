// RamTier bookkeeping (see ram_tier.h): key -> slot map, LRU over used slots, pins that block replacement.
#include "kv/ram_tier.h"

#include <algorithm>

#include "core/status.h"

namespace bunsen::kv {

RamTier::RamTier(int32_t n_slots, int32_t block_size, size_t bytes_per_slot)
    : block_size_(block_size), bytes_per_slot_(bytes_per_slot), slots_(static_cast<size_t>(n_slots)),
      tokens_(static_cast<size_t>(n_slots) * static_cast<size_t>(block_size)) {
  check(n_slots >= 0 && block_size > 0, "kv", "RamTier: bad slot count or block size");
  for (int32_t i = n_slots - 1; i >= 0; --i) free_.push_back(i);
  counts_.enabled = n_slots > 0;
  counts_.capacity = n_slots;
}

void RamTier::touch(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  lru_.erase(s.lru);
  s.lru = lru_.insert(lru_.end(), slot);
}

std::optional<int32_t> RamTier::store(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  check(static_cast<int32_t>(block_tokens.size()) == block_size_, "kv", "RamTier::store: not one full block");
  if (auto it = map_.find(key); it != map_.end()) {
    touch(it->second);
    return std::nullopt;
  }
  int32_t slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    auto victim = std::find_if(lru_.begin(), lru_.end(), [&](int32_t i) { return slots_[static_cast<size_t>(i)].pins == 0; });
    if (victim == lru_.end()) return std::nullopt;
    slot = *victim;
    lru_.erase(victim);
    map_.erase(slots_[static_cast<size_t>(slot)].key);
    ++counts_.evictions;
  }
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.used = true;
  s.pins = 0;
  s.key = key;
  s.parent = parent;
  s.lru = lru_.insert(lru_.end(), slot);
  std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(slot) * block_size_);
  map_[key] = slot;
  ++counts_.stores;
  return slot;
}

std::optional<int32_t> RamTier::find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const {
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  const int32_t slot = it->second;
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const auto* t = tokens_.data() + static_cast<ptrdiff_t>(slot) * block_size_;
  if (s.parent != parent || static_cast<int32_t>(block_tokens.size()) != block_size_ ||
      !std::equal(block_tokens.begin(), block_tokens.end(), t))
    return std::nullopt;
  return slot;
}

std::optional<int32_t> RamTier::acquire(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) {
  const std::optional<int32_t> slot = find(key, parent, block_tokens);
  if (!slot) return std::nullopt;
  ++slots_[static_cast<size_t>(*slot)].pins;
  touch(*slot);
  return slot;
}

bool RamTier::holds(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const {
  return find(key, parent, block_tokens).has_value();
}

void RamTier::release(int32_t slot) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (!(s.used && s.pins > 0)) throw Error("kv", strfmt("RamTier::release: slot %d is not pinned", slot));
  --s.pins;
}

void RamTier::count_hit(int64_t tokens) {
  ++counts_.hits;
  counts_.hit_tokens += tokens;
}

RamTierStats RamTier::stats() const {
  RamTierStats s = counts_;
  s.entries = static_cast<int64_t>(map_.size());
  s.bytes = s.entries * static_cast<int64_t>(bytes_per_slot_);
  return s;
}

}  // namespace bunsen::kv
