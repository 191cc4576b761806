// Flat hash tables of the BPE hot path. MergeTable: a BPE pair (left id, right id) -> its merge (rank,
// new id). PieceCache: a piece's bytes -> its ids, with keys and ids in two arenas. Both use open
// addressing with linear probing over one slot array (std::unordered_map's node chasing and per-entry
// allocations dominated the encode profile). Not general containers. Invariants: MergeTable's capacity is
// fixed by reserve() (a power of two >= 2 x entries; ids are non-negative, so kEmpty never collides);
// PieceCache drops everything when it reaches its entry or arena limit; neither is thread-safe.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

struct MergeInfo {
  int32_t rank;
  int32_t new_id;
};

class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  // Requires a prior reserve() for at least as many distinct pairs.
  void insert_or_assign(int32_t a, int32_t b, MergeInfo v) {
    Slot& s = slots_[slot(key(a, b))];
    s.key = key(a, b);
    s.info = v;
  }
  const MergeInfo* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[slot(key(a, b))];
    return s.key == kEmpty ? nullptr : &s.info;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    MergeInfo info;  // key and value share a cache line: one miss per probe
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const {
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t i = static_cast<size_t>(h ^ (h >> 29)) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    return i;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

class PieceCache {
 public:
  explicit PieceCache(size_t max_entries) : max_entries_(max_entries) {
    size_t cap = 16;
    while (cap < 2 * max_entries) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Appends the cached ids of `key` to out; false when absent.
  bool find(std::string_view key, std::vector<int32_t>& out) const {
    uint64_t h = hash(key);
    for (size_t i = h & mask_; slots_[i].hash != 0; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
    }
    return false;
  }
  void insert(std::string_view key, const int32_t* ids, size_t n) {
    if (count_ >= max_entries_ || keys_.size() + key.size() > kMaxArena || ids_.size() + n > kMaxArena)
      clear();
    uint64_t h = hash(key);
    size_t i = h & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()),
                 static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(key);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  static constexpr size_t kMaxArena = size_t{1} << 26;
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s) | 1; }
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0, max_entries_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace bunsen::text
