// PrefixCache unit tests: the hash chain (namespace, parent and every token matter), refcounted sharing with
// the BlockPool, LRU eviction (unreferenced entries only, deepest block of a chain first), namespace
// isolation, stats, and the accounting invariant free + evictable + held == total.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/status.h"
#include "kv/prefix_cache.h"

namespace bunsen::kv {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> seq(int32_t start, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(start + i);
  return t;
}

// Allocates ceil(n_tokens / kBs) blocks from the cache, like a sequence that computed n_tokens.
std::vector<BlockId> alloc(PrefixCache& c, int64_t n_tokens) {
  std::vector<BlockId> b;
  for (int64_t i = 0; i < (n_tokens + kBs - 1) / kBs; ++i) b.push_back(*c.allocate());
  return b;
}

TEST(PrefixCacheKeys, ChainDependsOnNamespaceParentAndEveryToken) {
  const auto t = seq(10, 8);
  const auto k = PrefixCache(*std::make_unique<BlockPool>(4), kBs, 0).block_keys(1, t, 2);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0], PrefixCache::chain_key(1, 0, std::span(t).subspan(0, 4)));
  EXPECT_EQ(k[1], PrefixCache::chain_key(1, k[0], std::span(t).subspan(4, 4)));
  // Same block tokens under another parent (another prefix) or namespace: another key.
  EXPECT_NE(PrefixCache::chain_key(1, 0, std::span(t).subspan(4, 4)), k[1]);
  EXPECT_NE(PrefixCache::chain_key(2, 0, std::span(t).subspan(0, 4)), k[0]);
  // Each single-token change, each position swap changes the key.
  std::set<BlockKey> seen{k[0]};
  for (int i = 0; i < 4; ++i) {
    auto u = std::vector<int32_t>(t.begin(), t.begin() + 4);
    u[static_cast<size_t>(i)] += 1;
    EXPECT_TRUE(seen.insert(PrefixCache::chain_key(1, 0, u)).second) << i;
  }
  std::vector<int32_t> swapped{t[1], t[0], t[2], t[3]};
  EXPECT_TRUE(seen.insert(PrefixCache::chain_key(1, 0, swapped)).second);
  EXPECT_THROW(PrefixCache(*std::make_unique<BlockPool>(4), kBs, 0).block_keys(1, t, 3), Error);
}

TEST(PrefixCache, FinishedSequenceBlocksAreSharedByTheNextOne) {
  BlockPool pool(8);
  PrefixCache c(pool, kBs, 100);
  const auto t = seq(0, 10);  // 2 full blocks + 2 tokens
  auto a = alloc(c, 10);
  ASSERT_EQ(a.size(), 3u);
  c.release_sequence(7, t, 10, a);  // full computed blocks 0 and 1 are cached; block 2 is freed
  EXPECT_EQ(c.n_entries(), 2);
  EXPECT_EQ(c.n_evictable(), 2);
  EXPECT_EQ(pool.n_free(), 6);
  EXPECT_TRUE(c.is_cached(a[0]) && c.is_cached(a[1]) && !c.is_cached(a[2]));
  EXPECT_EQ(c.stats().bytes, 200);

  std::vector<BlockId> hit;
  EXPECT_EQ(c.match(7, t, 2, hit), 2);
  EXPECT_EQ(hit, (std::vector<BlockId>{a[0], a[1]}));
  EXPECT_EQ(pool.refcount(a[0]), 2);  // the cache + this sequence
  EXPECT_EQ(c.n_evictable(), 0);
  // A second sharer of the first block only (another continuation after 4 tokens).
  auto other = seq(0, 4);
  other.push_back(99);
  std::vector<BlockId> hit2;
  EXPECT_EQ(c.match(7, other, 1, hit2), 1);
  EXPECT_EQ(pool.refcount(a[0]), 3);
  // Extension: a longer prompt with the same first 8 tokens hits both blocks; a different namespace none.
  auto longer = seq(0, 20);
  std::vector<BlockId> hit3, none;
  EXPECT_EQ(c.match(7, longer, 4, hit3), 2);
  EXPECT_EQ(c.match(8, longer, 4, none), 0);
  EXPECT_TRUE(none.empty());
  // A changed token in block 1 keeps block 0 only.
  auto changed = t;
  changed[5] = 1000;
  std::vector<BlockId> hit4;
  EXPECT_EQ(c.match(7, changed, 2, hit4), 1);
  for (auto* v : {&hit, &hit2, &hit3, &hit4})
    for (BlockId b : *v) c.release(b);
  EXPECT_EQ(pool.refcount(a[0]), 1);
  EXPECT_EQ(c.n_evictable(), 2);
  EXPECT_EQ(pool.n_free() + c.n_evictable(), pool.n_blocks());
}

TEST(PrefixCache, OnlyFullyComputedBlocksAreCached) {
  BlockPool pool(8);
  PrefixCache c(pool, kBs, 0);
  const auto t = seq(0, 12);
  auto a = alloc(c, 12);
  c.release_sequence(1, t, 7, a);  // 7 computed tokens: block 0 only (block 1 is half written)
  EXPECT_EQ(c.n_entries(), 1);
  EXPECT_EQ(pool.n_free(), 7);
  std::vector<BlockId> hit;
  EXPECT_EQ(c.match(1, t, 3, hit), 1);
  c.release(hit[0]);
}

TEST(PrefixCache, DuplicateContentKeepsTheFirstBlockAndFreesTheSecond) {
  BlockPool pool(8);
  PrefixCache c(pool, kBs, 0);
  const auto t = seq(0, 8);
  auto a = alloc(c, 8), b = alloc(c, 8);  // two sequences computed the same prefix side by side
  c.release_sequence(1, t, 8, a);
  c.release_sequence(1, t, 8, b);
  EXPECT_EQ(c.n_entries(), 2);
  EXPECT_EQ(pool.n_free(), 6);
  EXPECT_EQ(pool.refcount(b[0]), 0);
  EXPECT_TRUE(c.is_cached(a[0]) && c.is_cached(a[1]));
}

TEST(PrefixCache, EvictsOnlyUnreferencedEntriesLeastRecentFirstDeepestFirst) {
  BlockPool pool(6);
  PrefixCache c(pool, kBs, 0);
  const auto x = seq(0, 12), y = seq(100, 12);
  auto a = alloc(c, 12);
  c.release_sequence(1, x, 12, a);  // x: 3 entries
  auto b = alloc(c, 12);
  c.release_sequence(1, y, 12, b);  // y: 3 entries, more recent
  ASSERT_EQ(pool.n_free(), 0);
  ASSERT_EQ(c.n_available(), 6);
  std::vector<BlockId> held;
  ASSERT_EQ(c.match(1, x, 1, held), 1);  // x's first block is in use: never evicted, now most recent
  // Allocation evicts x's deepest blocks first (x is the older chain), then y from its end.
  EXPECT_EQ(*c.allocate(), a[2]);
  EXPECT_EQ(*c.allocate(), a[1]);
  EXPECT_EQ(*c.allocate(), b[2]);
  EXPECT_EQ(c.stats().evictions, 3);
  std::vector<BlockId> hy;
  EXPECT_EQ(c.match(1, y, 3, hy), 2);  // the evicted tail is a miss, the head still hits
  // Everything is now held (3 allocated, a[0], b[0], b[1] matched): nothing to evict.
  EXPECT_EQ(c.n_available(), 0);
  EXPECT_EQ(c.allocate(), std::nullopt);
  for (BlockId id : held) c.release(id);
  EXPECT_EQ(c.n_evictable(), 1);
  EXPECT_EQ(*c.allocate(), a[0]);
}

TEST(PrefixCache, StatsCountHitsAndMissesInBlocksAndTokens) {
  BlockPool pool(4);
  PrefixCache c(pool, kBs, 64);
  EXPECT_EQ(c.stats().hit_ratio(), 0.0);
  c.record_lookup(0, 2, 0, 10);
  c.record_lookup(2, 2, 8, 10);
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.hit_blocks, 2);
  EXPECT_EQ(s.miss_blocks, 2);
  EXPECT_EQ(s.hit_tokens, 8);
  EXPECT_EQ(s.miss_tokens, 12);
  EXPECT_DOUBLE_EQ(s.hit_ratio(), 8.0 / 20.0);
}

TEST(PrefixCache, DestructionAndEvictAllReturnEveryBlockToThePool) {
  BlockPool pool(6);
  {
    PrefixCache c(pool, kBs, 0);
    auto a = alloc(c, 8), b = alloc(c, 8);
    c.release_sequence(1, seq(0, 8), 8, a);
    c.release_sequence(1, seq(50, 8), 8, b);
    EXPECT_EQ(c.evict_all(), 4);
    EXPECT_EQ(pool.n_free(), 6);
    EXPECT_EQ(c.n_entries(), 0);
    auto d = alloc(c, 8);
    c.release_sequence(1, seq(0, 8), 8, d);
    EXPECT_EQ(pool.n_free(), 4);
  }
  EXPECT_EQ(pool.n_free(), 6);
}

// Random sequences over a small vocabulary (many shared prefixes): after every operation, every block is
// free, evictable (cached, refcount 1) or held, with refcount == holders + cached, and a hit block always
// holds the tokens the sequence asked for.
TEST(PrefixCache, RandomizedSharingKeepsTheAccountingInvariant) {
  BlockPool pool(24);
  PrefixCache c(pool, kBs, 0);
  std::vector<int32_t> content(24 * kBs, -1);  // what each block holds
  struct Live {
    std::vector<int32_t> tokens;
    std::vector<BlockId> blocks;
  };
  std::vector<Live> live;
  uint64_t rng = 12345;
  auto next = [&](uint64_t n) { rng = rng * 6364136223846793005ULL + 1442695040888963407ULL; return (rng >> 33) % n; };
  for (int step = 0; step < 3000; ++step) {
    if (live.size() < 4 && next(2) == 0) {
      Live l;
      const int n = 1 + static_cast<int>(next(14));
      for (int i = 0; i < n; ++i) l.tokens.push_back(static_cast<int32_t>(next(2)));
      const int64_t hits = c.match(1, l.tokens, (n - 1) / kBs, l.blocks);
      for (size_t b = 0; b < l.blocks.size(); ++b)
        for (int o = 0; o < kBs; ++o)
          ASSERT_EQ(content[l.blocks[b] * kBs + o], l.tokens[b * kBs + o]) << "hit block with other tokens";
      bool ok = true;
      while (static_cast<int64_t>(l.blocks.size()) * kBs < n) {
        auto id = c.allocate();
        if (!id) { ok = false; break; }
        l.blocks.push_back(*id);
      }
      if (!ok) {
        c.release_sequence(1, l.tokens, 0, l.blocks);  // computed nothing: nothing inserted
      } else {
        for (int64_t p = hits * kBs; p < n; ++p)  // the "forward" writes only the blocks it owns alone
          content[static_cast<size_t>(l.blocks[p / kBs] * kBs + p % kBs)] = l.tokens[static_cast<size_t>(p)];
        live.push_back(std::move(l));
      }
    } else if (!live.empty()) {
      const size_t k = next(live.size());
      c.release_sequence(1, live[k].tokens, static_cast<int64_t>(live[k].tokens.size()), live[k].blocks);
      live.erase(live.begin() + static_cast<long>(k));
    }
    std::vector<int32_t> holders(24, 0);
    for (const Live& l : live)
      for (BlockId b : l.blocks) ++holders[b];
    int held = 0;
    for (BlockId b = 0; b < 24; ++b) {
      ASSERT_EQ(pool.refcount(b), holders[b] + (c.is_cached(b) ? 1 : 0)) << "block " << b;
      held += holders[b] > 0;
    }
    ASSERT_EQ(pool.n_free() + c.n_evictable() + held, 24);
  }
  for (Live& l : live) c.release_sequence(1, l.tokens, static_cast<int64_t>(l.tokens.size()), l.blocks);
  c.evict_all();
  EXPECT_EQ(pool.n_free(), 24);
  EXPECT_GT(c.stats().evictions, 0);
}

}  // namespace
}  // namespace bunsen::kv
