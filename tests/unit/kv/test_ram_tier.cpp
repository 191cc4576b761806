// RamTier bookkeeping (the prefix cache's host-RAM tier) and the PrefixCache eviction hook that feeds it:
// slots are reused least-recently-used first, pinned slots are never replaced, a lookup verifies parent and
// tokens, and the device cache reports exactly the entries it evicts (key, parent, tokens, block) once each.
#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv/ram_tier.h"

namespace bunsen::kv {
namespace {

std::vector<int32_t> block(int32_t v, int n = 4) { return std::vector<int32_t>(static_cast<size_t>(n), v); }

TEST(RamTier, StoresThenFindsWithParentAndTokens) {
  RamTier t(3, 4, 100);
  auto a = block(1);
  auto s = t.store(11, 0, a);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(t.store(11, 0, a).has_value());  // already held
  auto got = t.acquire(11, 0, a);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, *s);
  t.release(*got);
  EXPECT_FALSE(t.acquire(11, 5, a).has_value());        // other parent: a collision, not a hit
  EXPECT_FALSE(t.acquire(11, 0, block(2)).has_value());  // other tokens
  EXPECT_FALSE(t.acquire(12, 0, a).has_value());
  EXPECT_EQ(t.stats().entries, 1);
  EXPECT_EQ(t.stats().bytes, 100);
}

TEST(RamTier, ReplacesLeastRecentlyUsedAndNeverPinned) {
  RamTier t(2, 4, 8);
  auto s1 = *t.store(1, 0, block(1));
  auto s2 = *t.store(2, 1, block(2));
  EXPECT_NE(s1, s2);
  t.release(*t.acquire(1, 0, block(1)));  // 1 becomes the most recent: 2 is replaced next
  auto s3 = t.store(3, 2, block(3));
  ASSERT_TRUE(s3.has_value());
  EXPECT_EQ(*s3, s2);
  EXPECT_FALSE(t.acquire(2, 1, block(2)).has_value());
  EXPECT_EQ(t.stats().evictions, 1);
  auto p1 = *t.acquire(1, 0, block(1));
  auto p3 = *t.acquire(3, 2, block(3));
  EXPECT_FALSE(t.store(4, 3, block(4)).has_value());  // both pinned: nothing to replace
  t.release(p1);
  EXPECT_EQ(*t.store(4, 3, block(4)), p1);
  t.release(p3);
  EXPECT_THROW(t.release(p3), Error);
}

TEST(RamTier, PrefixCacheReportsEachEvictedEntry) {
  BlockPool pool(2);
  PrefixCache cache(pool, 4, 64);
  struct Seen {
    BlockKey key, parent;
    std::vector<int32_t> tokens;
    BlockId id;
  };
  std::vector<Seen> seen;
  cache.set_evict_hook([&](BlockKey k, BlockKey p, std::span<const int32_t> t, BlockId id) {
    seen.push_back({k, p, {t.begin(), t.end()}, id});
  });
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<BlockId> ids = {*cache.allocate(), *cache.allocate()};
  EXPECT_TRUE(seen.empty());  // free blocks: nothing evicted
  cache.release_sequence(9, tokens, 8, ids);  // both blocks cached, unreferenced
  const std::vector<BlockKey> keys = cache.block_keys(9, tokens, 2);
  auto a = cache.allocate();  // evicts the deepest block first (its chain's end)
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].key, keys[1]);
  EXPECT_EQ(seen[0].parent, keys[0]);
  EXPECT_EQ(seen[0].tokens, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(seen[0].id, *a);
  auto b = cache.allocate();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].key, keys[0]);
  EXPECT_EQ(seen[1].parent, 0u);
  EXPECT_FALSE(cache.allocate().has_value());
  EXPECT_EQ(seen.size(), 2u);
  pool.release(*a);
  pool.release(*b);
}

}  // namespace
}  // namespace bunsen::kv
