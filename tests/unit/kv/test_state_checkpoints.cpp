// StateCheckpoints (host bookkeeping of hybrid models' linear-attention state checkpoints): verified lookups
// (a colliding key with another parent or other tokens is a miss), LRU replacement when full, re-inserting a
// key keeps its slot, zero slots store nothing.
#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"
#include "kv/state_checkpoints.h"

namespace bunsen::kv {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> block(int32_t base) { return {base, base + 1, base + 2, base + 3}; }

TEST(StateCheckpoints, FindReturnsTheInsertedSlotOnlyForTheSameParentAndTokens) {
  StateCheckpoints c(3, kBs);
  const auto b1 = block(10);
  const BlockKey k1 = PrefixCache::chain_key(7, 0, b1);
  EXPECT_FALSE(c.find(k1, 0, b1));
  const int32_t s1 = c.insert(k1, 0, b1);
  EXPECT_GE(s1, 0);
  EXPECT_LT(s1, 3);
  ASSERT_TRUE(c.find(k1, 0, b1));
  EXPECT_EQ(*c.find(k1, 0, b1), s1);
  // A hash collision: the same key but another parent or other tokens is a miss.
  EXPECT_FALSE(c.find(k1, 99, b1));
  EXPECT_FALSE(c.find(k1, 0, block(11)));
  EXPECT_FALSE(c.find(k1, 0, std::vector<int32_t>{10, 11, 12}));  // wrong length
  EXPECT_FALSE(c.find(k1 + 1, 0, b1));
  // The colliding entry may overwrite the slot; the old block is gone then.
  const int32_t s2 = c.insert(k1, 99, block(50));
  EXPECT_EQ(s2, s1);
  EXPECT_FALSE(c.find(k1, 0, b1));
  EXPECT_TRUE(c.find(k1, 99, block(50)));
  EXPECT_EQ(c.stats().entries, 1);
  EXPECT_EQ(c.stats().evictions, 0);
}

TEST(StateCheckpoints, FullStoreReplacesTheLeastRecentlyUsed) {
  StateCheckpoints c(2, kBs);
  const int32_t a = c.insert(1, 0, block(0));
  const int32_t b = c.insert(2, 1, block(4));
  EXPECT_NE(a, b);
  EXPECT_TRUE(c.find(1, 0, block(0)));  // a is now the most recently used
  const int32_t d = c.insert(3, 2, block(8));
  EXPECT_EQ(d, b) << "b was the least recently used";
  EXPECT_FALSE(c.find(2, 1, block(4)));
  EXPECT_TRUE(c.find(1, 0, block(0)));
  EXPECT_TRUE(c.find(3, 2, block(8)));
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_EQ(c.stats().entries, 2);
  // Re-inserting an existing key keeps its slot and makes it most recent: the other one goes next.
  EXPECT_EQ(c.insert(1, 0, block(0)), a);
  EXPECT_EQ(c.insert(4, 3, block(12)), d);
  EXPECT_TRUE(c.find(1, 0, block(0)));
  EXPECT_FALSE(c.find(3, 2, block(8)));
}

TEST(StateCheckpoints, SlotsStayInRangeUnderChurn) {
  StateCheckpoints c(5, kBs);
  std::vector<int> owner(5, -1);
  for (int i = 0; i < 200; ++i) {
    const int key = (i * 7) % 13;
    const auto blk = block(key * 4);
    if (auto s = c.find(static_cast<BlockKey>(key + 1), 0, blk)) {
      EXPECT_EQ(owner[static_cast<size_t>(*s)], key);
      continue;
    }
    const int32_t s = c.insert(static_cast<BlockKey>(key + 1), 0, blk);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, 5);
    owner[static_cast<size_t>(s)] = key;
  }
  EXPECT_EQ(c.stats().entries, 5);
}

TEST(StateCheckpoints, ZeroSlotsStoreNothing) {
  StateCheckpoints c(0, kBs);
  EXPECT_EQ(c.n_slots(), 0);
  EXPECT_FALSE(c.find(1, 0, block(0)));
  EXPECT_THROW(c.insert(1, 0, block(0)), Error);
  EXPECT_THROW(StateCheckpoints(-1, kBs), Error);
  EXPECT_THROW(StateCheckpoints(2, 0), Error);
}

}  // namespace
}  // namespace bunsen::kv
