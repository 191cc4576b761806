// Sliding-window bookkeeping in kv: BlockTable's released leading entries (release_front, append_released,
// slot() refusing a released block, release_all skipping them) and PrefixCache's single-block API used by
// the sliding space (release_keyed, find, acquire), with the free + evictable + held == total invariant.
#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"
#include "kv/prefix_cache.h"

namespace bunsen::kv {
namespace {

constexpr int32_t kBs = 4;

TEST(SlidingBlockTable, ReleaseFrontKeepsLogicalPositions) {
  BlockPool pool(8);
  BlockTable t(kBs);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate_n(3, ids));
  for (BlockId b : ids) t.append(b);
  EXPECT_EQ(t.slot(5), ids[1] * kBs + 1);
  EXPECT_EQ(t.release_front(), ids[0]);
  pool.release(ids[0]);
  EXPECT_EQ(t.n_released(), 1);
  EXPECT_EQ(t.blocks()[0], BlockTable::kReleased);
  EXPECT_EQ(t.capacity_tokens(), 3 * kBs);  // logical length unchanged
  EXPECT_EQ(t.slot(9), ids[2] * kBs + 1);   // later positions keep their slots
  EXPECT_THROW(t.slot(2), Error);           // a released block is never written
  EXPECT_EQ(t.release_front(), ids[1]);
  pool.release(ids[1]);
  t.release_all(pool);  // only the live block goes back: no double free
  EXPECT_EQ(pool.n_free(), 8);
  EXPECT_EQ(t.n_released(), 0);
  EXPECT_TRUE(t.blocks().empty());
}

TEST(SlidingBlockTable, ReleasedEntriesAreAPrefix) {
  BlockPool pool(4);
  BlockTable t(kBs);
  t.append_released();
  t.append_released();
  t.append(*pool.allocate());
  EXPECT_EQ(t.n_released(), 2);
  EXPECT_THROW(t.append_released(), Error);  // after a live block
  EXPECT_EQ(t.release_front(), 0);
  EXPECT_EQ(t.n_released(), 3);
  EXPECT_THROW(t.release_front(), Error);  // nothing live left
  pool.release(0);
  t.clear();
  EXPECT_EQ(t.n_released(), 0);
  EXPECT_EQ(pool.n_free(), 4);
}

std::vector<int32_t> tokens(int32_t start, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

TEST(SlidingPrefixCache, ReleaseKeyedThenFindAndAcquire) {
  BlockPool pool(4);
  PrefixCache cache(pool, kBs, 0);
  const auto t = tokens(100, 3 * kBs);
  const std::vector<BlockKey> keys = cache.block_keys(9, t, 3);
  const auto blk = [&](int j) { return std::span<const int32_t>(t).subspan(static_cast<size_t>(j * kBs), kBs); };
  // Block 1 leaves the window first, then block 0 (an arbitrary order: each is keyed on its own).
  const BlockId b1 = *cache.allocate(), b0 = *cache.allocate();
  cache.release_keyed(keys[1], keys[0], blk(1), b1);
  cache.release_keyed(keys[0], 0, blk(0), b0);
  EXPECT_EQ(cache.n_entries(), 2);
  EXPECT_EQ(cache.n_evictable(), 2);
  EXPECT_EQ(pool.n_free() + cache.n_evictable(), pool.n_blocks());
  EXPECT_EQ(cache.find(keys[1], keys[0], blk(1)), b1);
  EXPECT_EQ(cache.find(keys[0], 0, blk(0)), b0);
  EXPECT_FALSE(cache.find(keys[2], keys[1], blk(2)).has_value());   // never cached
  EXPECT_FALSE(cache.find(keys[1], 0, blk(1)).has_value());         // wrong parent: a miss
  EXPECT_FALSE(cache.find(keys[1], keys[0], blk(0)).has_value());   // wrong tokens: a miss
  cache.acquire(b1);
  EXPECT_EQ(pool.refcount(b1), 2);
  EXPECT_EQ(cache.n_evictable(), 1);
  // Allocation evicts only the unreferenced entry, never the acquired one.
  std::vector<BlockId> got;
  for (int i = 0; i < 3; ++i) got.push_back(*cache.allocate());
  EXPECT_FALSE(cache.find(keys[0], 0, blk(0)).has_value());
  EXPECT_EQ(cache.find(keys[1], keys[0], blk(1)), b1);
  EXPECT_FALSE(cache.allocate().has_value());
  cache.release(b1);  // back to the LRU
  EXPECT_EQ(cache.n_evictable(), 1);
  for (BlockId b : got) cache.release(b);
  EXPECT_EQ(pool.n_free() + cache.n_evictable(), pool.n_blocks());
  EXPECT_THROW(cache.acquire(got[0]), Error);  // not cached
}

TEST(SlidingPrefixCache, ReleaseKeyedOfADuplicateFreesTheBlock) {
  BlockPool pool(3);
  PrefixCache cache(pool, kBs, 0);
  const auto t = tokens(7, kBs);
  const BlockKey k = PrefixCache::chain_key(1, 0, t);
  const BlockId a = *cache.allocate(), b = *cache.allocate();
  cache.release_keyed(k, 0, t, a);
  cache.release_keyed(k, 0, t, b);  // same key from another sequence: not cached twice
  EXPECT_EQ(cache.n_entries(), 1);
  EXPECT_EQ(cache.find(k, 0, t), a);
  EXPECT_EQ(pool.refcount(b), 0);
  EXPECT_EQ(pool.n_free() + cache.n_evictable(), pool.n_blocks());
  EXPECT_THROW(cache.release_keyed(k, 0, t, b), Error);  // a free block
  EXPECT_THROW(cache.release_keyed(k, 0, tokens(7, kBs - 1), a), Error);  // not a full block
}

}  // namespace
}  // namespace bunsen::kv
