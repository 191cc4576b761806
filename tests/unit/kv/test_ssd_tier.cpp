// Tests for SsdTier (writer thread + debouncing over SsdStore) on a per-test temp directory: a submitted
// snapshot is written for each target prefix length (a prefix of each tensor), a key is queued once only,
// the queue's byte cap drops (and counts) snapshots, the destructor drains the queue, a disabled store
// takes nothing, lookups are counted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "../../support/scratch_dir.h"
#include "kv/ssd_tier.h"

namespace fs = std::filesystem;
using namespace bunsen::kv;

namespace {

constexpr uint64_t kNs = 0xfeedfacecafebeefull;
constexpr int32_t kBlockSize = 4;

using bunsen::test_support::ScratchDir;

// n_blocks blocks of 2 tensors, 16 bytes per block each, byte value = tensor * 100 + block.
SsdSnapshot make_snapshot(int64_t n_blocks, std::vector<SsdSnapshot::Target> targets) {
  SsdSnapshot s;
  s.targets = std::move(targets);
  s.n_blocks = n_blocks;
  for (int64_t i = 0; i < n_blocks * kBlockSize; ++i) s.tokens.push_back(static_cast<int32_t>(i * 3 + 1));
  s.layout = {1, kBlockSize, 1, 4, bunsen::DType::kF32, {16, 16}};
  for (int t = 0; t < 2; ++t) {
    std::vector<std::byte> p;
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int k = 0; k < 16; ++k) p.push_back(static_cast<std::byte>(t * 100 + b));
    s.tensors.push_back(std::move(p));
  }
  return s;
}

SsdStoreOptions opts(const fs::path& dir) {
  SsdStoreOptions o;
  o.dir = dir.string();
  return o;
}

TEST(SsdTier, WritesEveryTargetAsAPrefixOfTheCopy) {
  ScratchDir dir("bunsen_ssd_tier");
  SsdTier tier(opts(dir.path()));
  const SsdEntryKey full{kNs, 111}, part{kNs, 222};
  ASSERT_TRUE(tier.wants(full));
  ASSERT_TRUE(tier.submit(make_snapshot(3, {{full, 3}, {part, 2}})));
  tier.flush();
  auto e3 = tier.store().get(full);
  auto e2 = tier.store().get(part);
  ASSERT_TRUE(e3 && e2);
  EXPECT_EQ(e3->tokens.size(), 12u);
  ASSERT_EQ(e2->tokens.size(), 8u);
  EXPECT_EQ(e2->tokens[7], 7 * 3 + 1);
  ASSERT_EQ(e2->tensors.size(), 2u);
  EXPECT_EQ(e2->layout.tensor_bytes, (std::vector<uint64_t>{32, 32}));
  EXPECT_EQ(e2->tensors[1][16], static_cast<std::byte>(101));  // tensor 1, block 1
  EXPECT_EQ(e3->tensors[0][40], static_cast<std::byte>(2));    // tensor 0, block 2
  EXPECT_EQ(tier.stats().writes, 2);
  EXPECT_EQ(tier.stats().entries, 2);
  EXPECT_GT(tier.stats().bytes, 0);
}

TEST(SsdTier, SlidingBlocksAreWrittenPerTargetAsVersion2) {
  ScratchDir dir("bunsen_ssd_tier");
  SsdTier tier(opts(dir.path()));
  SsdSnapshot s = make_snapshot(4, {});
  s.layout.tensor_bytes.push_back(8);  // one sliding tensor of 8 bytes per block
  s.layout.sliding = {1, 6, 0, 0};
  const SsdEntryKey deep{kNs, 41}, shallow{kNs, 42};
  SsdSnapshot::Target t4{deep, 4, 2, {std::vector<std::byte>(16, std::byte{7})}, {}};     // blocks [2, 4)
  SsdSnapshot::Target t2{shallow, 2, 0, {std::vector<std::byte>(16, std::byte{9})}, {}};  // blocks [0, 2)
  s.targets = {t4, t2};
  EXPECT_EQ(s.bytes(), 4u * kBlockSize * 4 + 2 * 4 * 16 + 2 * 16);  // tokens, full tensors, windows
  ASSERT_TRUE(tier.submit(std::move(s)));
  tier.flush();
  auto e4 = tier.store().get(deep);
  auto e2 = tier.store().get(shallow);
  ASSERT_TRUE(e4 && e2);
  EXPECT_EQ(e4->layout.tensor_bytes, (std::vector<uint64_t>{64, 64, 16}));
  EXPECT_EQ(e4->layout.sliding, (SsdSlidingPart{1, 6, 2, 2}));
  EXPECT_EQ(e2->layout.sliding, (SsdSlidingPart{1, 6, 0, 2}));
  ASSERT_EQ(e4->tensors.size(), 3u);
  EXPECT_EQ(e4->tensors[2][15], std::byte{7});
  EXPECT_EQ(e2->tensors[2][0], std::byte{9});
  EXPECT_EQ(e2->tensors[1][16], static_cast<std::byte>(101));  // the full space: tensor 1, block 1

  SsdSnapshot bad = make_snapshot(2, {{SsdEntryKey{kNs, 43}, 2}});  // no sliding copy for its target
  bad.layout.tensor_bytes.push_back(8);
  bad.layout.sliding = {1, 6, 0, 0};
  ASSERT_TRUE(tier.submit(std::move(bad)));
  tier.flush();  // the writer logs it and writes nothing
  EXPECT_FALSE(tier.store().contains(SsdEntryKey{kNs, 43}));
}

TEST(SsdTier, AKeyIsQueuedOnceAndNotWhenStored) {
  ScratchDir dir("bunsen_ssd_tier");
  const SsdEntryKey k{kNs, 5};
  {
    SsdTier tier(opts(dir.path()));
    EXPECT_TRUE(tier.submit(make_snapshot(1, {{k, 1}})));
    EXPECT_FALSE(tier.wants(k));
    EXPECT_FALSE(tier.submit(make_snapshot(1, {{k, 1}})));  // debounced
  }  // the destructor drains the queue
  SsdTier again(opts(dir.path()));
  EXPECT_TRUE(again.store().contains(k));
  EXPECT_FALSE(again.wants(k));  // already on disk
  EXPECT_TRUE(again.wants(SsdEntryKey{kNs, 6}));
}

TEST(SsdTier, QueueByteCapDropsAndCounts) {
  ScratchDir dir("bunsen_ssd_tier");
  SsdTier tier(opts(dir.path()), /*max_pending_bytes=*/64);
  EXPECT_FALSE(tier.has_room(1000));
  EXPECT_FALSE(tier.submit(make_snapshot(4, {{SsdEntryKey{kNs, 9}, 4}})));  // 4 * 32 + tokens > 64
  EXPECT_EQ(tier.stats().dropped, 2);
  EXPECT_TRUE(tier.has_room(32));
  EXPECT_TRUE(tier.wants(SsdEntryKey{kNs, 9}));  // a dropped key may be offered again
}

TEST(SsdTier, DisabledStoreTakesNothing) {
  SsdTier tier(opts("/proc/bunsen-no-such-dir/ssd"));
  EXPECT_FALSE(tier.stats().enabled);
  EXPECT_FALSE(tier.wants(SsdEntryKey{kNs, 1}));
  EXPECT_FALSE(tier.submit(make_snapshot(1, {{SsdEntryKey{kNs, 1}, 1}})));
  tier.flush();  // returns at once
}

TEST(SsdTier, CountsLookups) {
  ScratchDir dir("bunsen_ssd_tier");
  SsdTier tier(opts(dir.path()));
  tier.count_lookup(true, 32);
  tier.count_lookup(false, 0);
  tier.count_lookup(false, 0);
  const SsdTierStats s = tier.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hit_tokens, 32);
  EXPECT_TRUE(s.enabled);
}

}  // namespace
