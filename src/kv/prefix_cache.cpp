// PrefixCache: hash-chained block keys, refcounted sharing through BlockPool, LRU eviction of unreferenced
// entries. Not thread-safe and not storage. Invariants (see the header): one cache reference per cached
// block; LRU == cached blocks with refcount 1; a match is verified token by token (collisions miss).
#include "kv/prefix_cache.h"

#include <algorithm>

#include "core/status.h"

namespace bunsen::kv {
namespace {

// A 64-bit finalizer (good avalanche): every input bit affects every output bit.
uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

}  // namespace

double PrefixCacheStats::hit_ratio() const {
  const int64_t total = hit_tokens + miss_tokens;
  return total > 0 ? static_cast<double>(hit_tokens) / static_cast<double>(total) : 0.0;
}

PrefixCache::PrefixCache(BlockPool& pool, int32_t block_size, size_t bytes_per_block)
    : pool_(pool), block_size_(block_size), bytes_per_block_(bytes_per_block) {
  check(block_size > 0, "kv", strfmt("prefix cache block size must be > 0, got %d", block_size));
  slots_.resize(static_cast<size_t>(pool.n_blocks()));
  tokens_.assign(static_cast<size_t>(pool.n_blocks()) * static_cast<size_t>(block_size), 0);
  map_.reserve(static_cast<size_t>(pool.n_blocks()));
}

PrefixCache::~PrefixCache() {
  for (const auto& [key, id] : map_) {
    if (pool_.refcount(id) > 0) pool_.release(id);
  }
}

BlockKey PrefixCache::chain_key(uint64_t ns, BlockKey parent, std::span<const int32_t> block_tokens) {
  uint64_t h = fmix64(ns + kGolden);
  h = fmix64(h ^ (parent + 2 * kGolden));
  h = fmix64(h ^ static_cast<uint64_t>(block_tokens.size()));
  for (int32_t t : block_tokens) h = fmix64(h + kGolden + static_cast<uint32_t>(t));
  return h;
}

std::vector<BlockKey> PrefixCache::block_keys(uint64_t ns, std::span<const int32_t> tokens, int64_t n_blocks) const {
  check(n_blocks >= 0 && n_blocks * block_size_ <= static_cast<int64_t>(tokens.size()), "kv",
        strfmt("block_keys: %lld full blocks of %d tokens need more than the %zu tokens given", (long long)n_blocks,
               block_size_, tokens.size()));
  std::vector<BlockKey> keys;
  keys.reserve(static_cast<size_t>(n_blocks));
  BlockKey parent = 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    parent = chain_key(ns, parent, tokens.subspan(static_cast<size_t>(i * block_size_), block_size_));
    keys.push_back(parent);
  }
  return keys;
}

bool PrefixCache::verify(BlockId id, BlockKey parent, std::span<const int32_t> block_tokens) const {
  const Slot& s = slots_[static_cast<size_t>(id)];
  if (!s.cached || s.parent != parent) return false;
  const int32_t* stored = tokens_.data() + static_cast<size_t>(id) * block_size_;
  return std::equal(block_tokens.begin(), block_tokens.end(), stored);
}

int64_t PrefixCache::match(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks,
                           std::vector<BlockId>& out) {
  max_blocks = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  BlockKey parent = 0;
  int64_t hits = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto blk = tokens.subspan(static_cast<size_t>(i * block_size_), block_size_);
    const BlockKey key = chain_key(ns, parent, blk);
    auto it = map_.find(key);
    if (it == map_.end() || !verify(it->second, parent, blk)) break;
    const BlockId id = it->second;
    acquire(id);
    out.push_back(id);
    parent = key;
    ++hits;
  }
  return hits;
}

std::optional<BlockId> PrefixCache::find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const {
  check(static_cast<int64_t>(block_tokens.size()) == block_size_, "kv",
        strfmt("find: a block holds %d tokens, got %zu", block_size_, block_tokens.size()));
  auto it = map_.find(key);
  if (it == map_.end() || !verify(it->second, parent, block_tokens)) return std::nullopt;
  return it->second;
}

void PrefixCache::acquire(BlockId id) {
  if (!is_cached(id)) throw Error("kv", strfmt("acquire: block %d is not cached", id));
  Slot& s = slots_[static_cast<size_t>(id)];
  if (s.in_lru) {  // unreferenced until now: no longer evictable
    lru_.erase(s.lru);
    s.in_lru = false;
  }
  pool_.retain(id);
}

void PrefixCache::release_keyed(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens, BlockId id) {
  check(static_cast<int64_t>(block_tokens.size()) == block_size_, "kv",
        strfmt("release_keyed: a block holds %d tokens, got %zu", block_size_, block_tokens.size()));
  if (pool_.refcount(id) <= 0) throw Error("kv", strfmt("release_keyed: block %d is free", id));
  insert(key, parent, block_tokens, id);
  release(id);
}

void PrefixCache::record_lookup(int64_t hit_blocks, int64_t looked_up_blocks, int64_t hit_tokens,
                                int64_t total_tokens) {
  counts_.hit_blocks += hit_blocks;
  counts_.miss_blocks += looked_up_blocks - hit_blocks;
  counts_.hit_tokens += hit_tokens;
  counts_.miss_tokens += total_tokens - hit_tokens;
}

void PrefixCache::insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens, BlockId id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  if (s.cached || map_.count(key)) return;  // already cached (a hit block) or a duplicate of an entry
  pool_.retain(id);                         // the cache's own reference
  s.cached = true;
  s.key = key;
  s.parent = parent;
  std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + static_cast<size_t>(id) * block_size_);
  map_.emplace(key, id);
}

void PrefixCache::release(BlockId id) {
  pool_.release(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  if (s.cached && !s.in_lru && pool_.refcount(id) == 1) {
    s.lru = lru_.insert(lru_.end(), id);
    s.in_lru = true;
  }
}

void PrefixCache::release_sequence(uint64_t ns, std::span<const int32_t> tokens, int64_t n_computed,
                                   std::span<const BlockId> blocks) {
  const int64_t n_full = std::min<int64_t>(
      {n_computed / block_size_, static_cast<int64_t>(blocks.size()), static_cast<int64_t>(tokens.size()) / block_size_});
  const std::vector<BlockKey> keys = block_keys(ns, tokens, n_full);
  for (int64_t i = n_full - 1; i >= 0; --i)
    insert(keys[static_cast<size_t>(i)], i > 0 ? keys[static_cast<size_t>(i - 1)] : 0,
           tokens.subspan(static_cast<size_t>(i * block_size_), block_size_), blocks[static_cast<size_t>(i)]);
  // Deepest first: the first block is released last, so it is the most recently used of the chain.
  for (size_t i = blocks.size(); i-- > 0;) release(blocks[i]);
}

void PrefixCache::evict_one() {
  const BlockId id = lru_.front();
  lru_.pop_front();
  Slot& s = slots_[static_cast<size_t>(id)];
  map_.erase(s.key);
  s = Slot{};
  ++counts_.evictions;
  pool_.release(id);  // the cache's reference was the last one: back to the free list
}

std::optional<BlockId> PrefixCache::allocate() {
  if (pool_.n_free() == 0 && !lru_.empty()) {
    if (evict_hook_) {
      const BlockId id = lru_.front();
      const Slot& s = slots_[static_cast<size_t>(id)];
      evict_hook_(s.key, s.parent,
                  std::span<const int32_t>(tokens_.data() + static_cast<size_t>(id) * static_cast<size_t>(block_size_),
                                           static_cast<size_t>(block_size_)),
                  id);
    }
    evict_one();
  }
  return pool_.allocate();
}

bool PrefixCache::is_cached(BlockId id) const {
  if (!(id >= 0 && id < pool_.n_blocks()))
    throw Error("kv", strfmt("block id %d out of range [0, %d)", id, pool_.n_blocks()));
  return slots_[static_cast<size_t>(id)].cached;
}

int64_t PrefixCache::evict_all() {
  int64_t n = 0;
  while (!lru_.empty()) {
    evict_one();
    ++n;
  }
  return n;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = counts_;
  s.entries = n_entries();
  s.evictable = n_evictable();
  s.bytes = s.entries * static_cast<int64_t>(bytes_per_block_);
  return s;
}

}  // namespace bunsen::kv
