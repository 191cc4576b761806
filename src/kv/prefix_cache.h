// PrefixCache: the device tier of automatic prefix caching. Maps the key of a FULL block of token ids to the
// pool block holding its K/V; a key is a hash chain over (namespace, parent key, the block's tokens), so a
// key names the whole prefix up to the end of its block. Not storage (KvStorage) and not a scheduler: pure
// host bookkeeping over a BlockPool, single-threaded (the engine thread owns it).
// Invariants: the cache holds exactly one pool reference per cached block; a cached block no sequence
// holds (refcount 1) sits in the LRU exactly once and is the only kind ever evicted; only full blocks are
// cached; a match verifies the parent key and the tokens of every block, so a hash collision is a miss.
// With the cache: free + evictable + (blocks held by sequences) == total.
// The engine's sliding-window block space has its own PrefixCache over its own pool, under the same keys:
// its blocks leave a sequence one at a time (release_keyed) as they fall out of the window, and a hit
// looks single blocks up by key (find + acquire) instead of walking the chain from block 0.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace bunsen::kv {

using BlockKey = uint64_t;

struct PrefixCacheStats {
  int64_t entries = 0;    // cached blocks, held by sequences or not
  int64_t evictable = 0;  // cached blocks no sequence holds (the LRU)
  int64_t bytes = 0;      // entries * bytes per block (device memory the entries occupy)
  int64_t hit_blocks = 0, miss_blocks = 0;  // full blocks looked up at admission: found / not found
  int64_t hit_tokens = 0, miss_tokens = 0;  // tokens of admitted sequences served from / not from the cache
  int64_t evictions = 0;
  double hit_ratio() const;  // hit_tokens / (hit_tokens + miss_tokens); 0 before any lookup
};

class PrefixCache {
 public:
  // bytes_per_block only feeds the stats. pool and the cache share the block size of the block tables.
  PrefixCache(BlockPool& pool, int32_t block_size, size_t bytes_per_block);
  // Drops the cache's reference on every entry (the pool outlives the cache: unreferenced blocks are free).
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The key of one block: a 64-bit mix of the namespace, the parent's key (0 for the first block) and the
  // block's `block_size` token ids.
  static BlockKey chain_key(uint64_t ns, BlockKey parent, std::span<const int32_t> block_tokens);
  // Keys of the first n_blocks full blocks of `tokens` (n_blocks * block_size <= tokens.size()).
  std::vector<BlockKey> block_keys(uint64_t ns, std::span<const int32_t> tokens, int64_t n_blocks) const;

  // The longest cached prefix of the first max_blocks full blocks of `tokens`: appends the hit blocks to
  // `out`, each retained for the caller (release them with release()). Returns the number of hit blocks.
  // Does not touch the stats (record_lookup does, once the admission sticks).
  int64_t match(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks, std::vector<BlockId>& out);
  void record_lookup(int64_t hit_blocks, int64_t looked_up_blocks, int64_t hit_tokens, int64_t total_tokens);

  // Takes over a sequence's references to `blocks` (its block table, in order): each full block whose
  // tokens are all computed (block i with (i + 1) * block_size <= n_computed) is inserted under its key
  // unless the key is cached already, then every reference is released. Deeper blocks enter the LRU
  // first, so eviction drops a chain from its end.
  void release_sequence(uint64_t ns, std::span<const int32_t> tokens, int64_t n_computed,
                        std::span<const BlockId> blocks);
  // Drops one reference (undoing a match); a cached block left unreferenced enters the LRU.
  void release(BlockId id);
  // Caches one full block under `key` (unless the block or the key is cached already), then drops the
  // caller's reference, as release_sequence does for one block.
  void release_keyed(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens, BlockId id);
  // The cached block under `key` whose parent key and tokens match (verified), or nullopt. Takes nothing.
  std::optional<BlockId> find(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens) const;
  // Takes a reference on a cached block (from find()) for the caller: it stops being evictable.
  void acquire(BlockId id);

  // A block for writing: the pool's free list first, then the least recently used evictable entry.
  std::optional<BlockId> allocate();
  // Called with every entry allocate() evicts, before the block is handed out (the RAM tier copies it out;
  // the block's contents stay valid until the caller writes the new owner's K/V).
  using EvictHook = std::function<void(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens, BlockId id)>;
  void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }
  int32_t n_available() const { return pool_.n_free() + n_evictable(); }
  int32_t n_evictable() const { return static_cast<int32_t>(lru_.size()); }
  int64_t n_entries() const { return static_cast<int64_t>(map_.size()); }
  bool is_cached(BlockId id) const;
  // Evicts every unreferenced entry (back to the free list); returns how many.
  int64_t evict_all();
  PrefixCacheStats stats() const;
  int32_t block_size() const { return block_size_; }
  const BlockPool& pool() const { return pool_; }

 private:
  struct Slot {
    bool cached = false;
    bool in_lru = false;
    BlockKey key = 0, parent = 0;
    std::list<BlockId>::iterator lru;
  };
  void insert(BlockKey key, BlockKey parent, std::span<const int32_t> block_tokens, BlockId id);
  void evict_one();
  bool verify(BlockId id, BlockKey parent, std::span<const int32_t> block_tokens) const;

  BlockPool& pool_;
  int32_t block_size_;
  size_t bytes_per_block_;
  std::unordered_map<BlockKey, BlockId> map_;
  std::vector<Slot> slots_;           // [n_blocks]
  std::vector<int32_t> tokens_;       // [n_blocks, block_size]: the tokens of each cached block
  std::list<BlockId> lru_;            // front = least recently used
  PrefixCacheStats counts_;           // lookups and evictions (entries/bytes computed in stats())
  EvictHook evict_hook_;
};

}  // namespace bunsen::kv
