// Tests for BlockPool (allocate/free/refcount/all-or-nothing/double free) and BlockTable slot arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/status.h"
#include "kv/block_pool.h"

using bunsen::Error;
using bunsen::kv::BlockId;
using bunsen::kv::BlockPool;
using bunsen::kv::BlockTable;

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_blocks(), 4);
  EXPECT_EQ(pool.n_free(), 4);
  std::set<BlockId> seen;
  for (int i = 0; i < 4; ++i) {
    auto id = pool.allocate();
    ASSERT_TRUE(id.has_value());
    EXPECT_GE(*id, 0);
    EXPECT_LT(*id, 4);
    EXPECT_EQ(pool.refcount(*id), 1);
    EXPECT_TRUE(seen.insert(*id).second) << "block handed out twice: " << *id;
  }
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_FALSE(pool.allocate().has_value());
}

TEST(BlockPool, ReleaseReturnsBlockAndIsReused) {
  BlockPool pool(2);
  BlockId a = *pool.allocate();
  BlockId b = *pool.allocate();
  pool.release(a);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.refcount(a), 0);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(*pool.allocate(), a);  // the only free block
}

TEST(BlockPool, RefcountKeepsSharedBlockInUse) {
  BlockPool pool(3);
  BlockId a = *pool.allocate();
  pool.retain(a);
  pool.retain(a);
  EXPECT_EQ(pool.refcount(a), 3);
  pool.release(a);
  pool.release(a);
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.n_free(), 2);
  pool.release(a);
  EXPECT_EQ(pool.refcount(a), 0);
  EXPECT_EQ(pool.n_free(), 3);
}

TEST(BlockPool, DoubleFreeThrows) {
  BlockPool pool(2);
  BlockId a = *pool.allocate();
  pool.release(a);
  try {
    pool.release(a);
    FAIL() << "double free did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "kv");
    EXPECT_NE(e.message().find("double free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.n_free(), 2);  // free list not corrupted
}

TEST(BlockPool, BadIdsThrow) {
  BlockPool pool(2);
  EXPECT_THROW(pool.release(-1), Error);
  EXPECT_THROW(pool.release(2), Error);
  EXPECT_THROW(pool.retain(5), Error);
  EXPECT_THROW(pool.refcount(2), Error);
  EXPECT_THROW(pool.retain(0), Error);  // retaining a free block
  EXPECT_THROW(BlockPool(-1), Error);
}

TEST(BlockPool, AllocateNIsAllOrNothing) {
  BlockPool pool(5);
  std::vector<BlockId> out = {42};  // existing content is kept (ids are appended)
  EXPECT_TRUE(pool.allocate_n(3, out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 42);
  EXPECT_EQ(pool.n_free(), 2);
  std::vector<BlockId> more;
  EXPECT_FALSE(pool.allocate_n(3, more));
  EXPECT_TRUE(more.empty());
  EXPECT_EQ(pool.n_free(), 2);  // nothing taken on failure
  EXPECT_TRUE(pool.allocate_n(2, more));
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_TRUE(pool.allocate_n(0, more));
  std::set<BlockId> all(out.begin() + 1, out.end());
  all.insert(more.begin(), more.end());
  EXPECT_EQ(all.size(), 5u);
}

TEST(BlockTable, BlocksNeededAtBoundaries) {
  BlockTable t(16);
  EXPECT_EQ(t.blocks_needed(0), 0);
  EXPECT_EQ(t.blocks_needed(1), 1);
  EXPECT_EQ(t.blocks_needed(15), 1);
  EXPECT_EQ(t.blocks_needed(16), 1);
  EXPECT_EQ(t.blocks_needed(17), 2);
  t.append(7);
  EXPECT_EQ(t.blocks_needed(0), 0);
  EXPECT_EQ(t.blocks_needed(1), 0);
  EXPECT_EQ(t.blocks_needed(15), 0);
  EXPECT_EQ(t.blocks_needed(16), 0);
  EXPECT_EQ(t.blocks_needed(17), 1);
  EXPECT_EQ(t.blocks_needed(33), 2);
}

TEST(BlockTable, SlotArithmetic) {
  BlockTable t(16);
  t.append(5);
  t.append(2);
  EXPECT_EQ(t.capacity_tokens(), 32);
  EXPECT_EQ(t.slot(0), 5 * 16);
  EXPECT_EQ(t.slot(1), 5 * 16 + 1);
  EXPECT_EQ(t.slot(15), 5 * 16 + 15);
  EXPECT_EQ(t.slot(16), 2 * 16);
  EXPECT_EQ(t.slot(31), 2 * 16 + 15);
  EXPECT_THROW(t.slot(32), Error);
  EXPECT_THROW(t.slot(-1), Error);
}

TEST(BlockTable, ReleaseAllReturnsBlocks) {
  BlockPool pool(4);
  BlockTable t(8);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate_n(3, ids));
  for (BlockId id : ids) t.append(id);
  pool.retain(ids[1]);  // shared with someone else
  t.release_all(pool);
  EXPECT_TRUE(t.blocks().empty());
  EXPECT_EQ(t.capacity_tokens(), 0);
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_EQ(pool.refcount(ids[1]), 1);
}
