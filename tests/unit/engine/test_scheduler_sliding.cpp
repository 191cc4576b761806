// Scheduler with a sliding-window block space (SlidingKv): blocks that left the window are released as a
// sequence grows (and never more than the window's worth stay live), prefix hits are cut to what the sliding
// cache still holds, and random lifecycles (shared prompt families, cancels, preemption on small pools) leak
// nothing from either space. A shadow of every slot's contents (a hash of the token prefix whose K/V it
// holds) checks that each chunk reads, in both spaces, only slots holding its own prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/status.h"
#include "engine/scheduler.h"
#include "scheduler_test_util.h"

namespace bunsen::engine {
namespace {

constexpr int32_t kBs = 4;
constexpr int32_t kWindow = 8;

// Pools and caches of both spaces for one scheduler.
struct Spaces {
  Spaces(int32_t n_full, int32_t n_sliding, bool cached)
      : pool(n_full), swa_pool(n_sliding) {
    if (cached) {
      cache = std::make_unique<kv::PrefixCache>(pool, kBs, 0);
      swa_cache = std::make_unique<kv::PrefixCache>(swa_pool, kBs, 0);
    }
  }
  SlidingKv sliding() { return {&swa_pool, swa_cache.get(), kWindow}; }
  kv::BlockPool pool, swa_pool;
  std::unique_ptr<kv::PrefixCache> cache, swa_cache;
};

Scheduler make_scheduler(Spaces& sp, int64_t max_seqs, int64_t step_tokens) {
  return Scheduler(SchedulerConfig{max_seqs, step_tokens, kBs}, sp.pool, sp.cache.get(), nullptr, sp.sliding());
}

int64_t first_live(int64_t next_pos) { return std::max<int64_t>(0, next_pos - kWindow) / kBs; }

// Between steps: both tables of every running sequence have the same logical length, the released prefix is
// exactly the blocks wholly before next - window, and no more than ceil(window / bs) + 1 blocks stay live.
void check_sliding(const Scheduler& s) {
  for (const Sequence* q : s.running()) {
    ASSERT_EQ(q->swa_table.blocks().size(), q->table.blocks().size()) << q->id;
    ASSERT_EQ(q->swa_table.n_released(),
              std::min<int64_t>(first_live(q->num_computed_tokens), static_cast<int64_t>(q->table.blocks().size())))
        << q->id;
    const int64_t live = static_cast<int64_t>(q->swa_table.blocks().size()) - q->swa_table.n_released();
    ASSERT_LE(live, (kWindow + kBs - 1) / kBs + 1) << q->id;
    for (size_t j = 0; j < q->swa_table.blocks().size(); ++j)
      ASSERT_EQ(q->swa_table.blocks()[j] < 0, static_cast<int64_t>(j) < q->swa_table.n_released()) << q->id;
  }
}

// free + evictable + held == total in one space, refcount == holders + cached.
void check_space(const kv::BlockPool& pool, const kv::PrefixCache* cache, const std::map<kv::BlockId, int32_t>& held) {
  for (const auto& [b, n] : held) ASSERT_EQ(pool.refcount(b), n + (cache && cache->is_cached(b) ? 1 : 0)) << b;
  ASSERT_EQ(pool.n_free() + (cache ? cache->n_evictable() : 0) + static_cast<int64_t>(held.size()), pool.n_blocks());
}

void check_accounting(const Scheduler& s, const Spaces& sp) {
  std::map<kv::BlockId, int32_t> full, swa;
  for (const Sequence* q : s.running()) {
    for (kv::BlockId b : q->table.blocks()) ++full[b];
    for (kv::BlockId b : q->swa_table.blocks())
      if (b >= 0) ++swa[b];
  }
  check_space(sp.pool, sp.cache.get(), full);
  check_space(sp.swa_pool, sp.swa_cache.get(), swa);
}

TEST(SchedulerSliding, ReleasesBlocksThatLeftTheWindow) {
  Spaces sp(64, 6, /*cached=*/false);
  Scheduler s = make_scheduler(sp, 1, 16);
  s.add(test::make_seq(1, 6, 40));
  int64_t max_released = 0;
  while (s.has_unfinished()) {
    test::run_step(s);
    ASSERT_NO_FATAL_FAILURE(check_sliding(s));
    ASSERT_NO_FATAL_FAILURE(check_accounting(s, sp));
    if (!s.running().empty()) max_released = std::max<int64_t>(max_released, s.running()[0]->swa_table.n_released());
  }
  // Up to 45 tokens computed: the sliding pool of 6 blocks held a 12-block sequence.
  EXPECT_GE(max_released, first_live(40));
  EXPECT_EQ(s.get(1).status, SeqStatus::kFinishedLength);
  EXPECT_EQ(sp.swa_pool.n_free(), 6);
  EXPECT_EQ(sp.pool.n_free(), 64);
}

TEST(SchedulerSliding, AdmissionCountsTheSlidingPool) {
  Spaces sp(64, 3, /*cached=*/false);  // fewer than ceil(8 / 4) + 2 blocks
  Scheduler s = make_scheduler(sp, 1, 16);
  EXPECT_NO_THROW(s.add(test::make_seq(1, 2, 6)));  // 8 tokens: 2 blocks, the window never fills
  try {
    s.add(test::make_seq(2, 10, 10));
    FAIL() << "a sequence longer than the window needs 4 sliding blocks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding"), std::string::npos) << e.what();
  }
}

// Runs one request to completion alone on `s` and returns its cached prompt tokens.
int64_t run_alone(Scheduler& s, SeqId id, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  NewSequence r;
  r.id = id;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  s.add(std::move(r));
  bool checked = false;
  while (s.has_unfinished()) {
    const SchedulerOutput& out = s.schedule();
    if (!checked) {  // the admitted sequence's tables right after the hit
      const Sequence& q = s.get(id);
      const int64_t hit = q.num_cached_tokens;
      EXPECT_EQ(q.swa_table.n_released(), hit > 0 ? first_live(hit) : 0);
      checked = true;
    }
    s.on_step_done(test::sample_for(out));
  }
  const int64_t cached = s.get(id).num_cached_tokens;
  s.remove(id);
  return cached;
}

TEST(SchedulerSliding, PrefixHitNeedsTheWindowBlocks) {
  Spaces sp(64, 24, /*cached=*/true);
  Scheduler s = make_scheduler(sp, 2, 64);
  std::vector<int32_t> p;
  for (int i = 0; i < 30; ++i) p.push_back(3 + i * 7 % 97);
  EXPECT_EQ(run_alone(s, 1, p, 1), 0);
  // Every full computed block (0..6) is cached in both spaces; a resend hits 7 blocks (never its last token).
  EXPECT_EQ(sp.swa_cache->n_entries(), 7);
  EXPECT_EQ(run_alone(s, 2, p, 1), 28);

  // Make blocks 3 and 4 the most recently used sliding entries, then evict the 5 least recently used
  // (0, 1, 2, 5, 6): block 6 (in the window of a 7-block hit) and 4..5 (6 blocks) are gone, 3..4 remain.
  const std::vector<kv::BlockKey> keys = sp.cache->block_keys(0, p, 7);
  for (int j : {3, 4}) {
    const auto blk = std::span<const int32_t>(p).subspan(static_cast<size_t>(j * kBs), kBs);
    const auto id = sp.swa_cache->find(keys[static_cast<size_t>(j)], keys[static_cast<size_t>(j - 1)], blk);
    ASSERT_TRUE(id.has_value()) << j;
    sp.swa_cache->acquire(*id);
    sp.swa_cache->release(*id);
  }
  std::vector<kv::BlockId> taken;
  while (sp.swa_cache->n_evictable() > 2) taken.push_back(*sp.swa_cache->allocate());
  for (kv::BlockId b : taken) sp.swa_cache->release(b);
  EXPECT_EQ(sp.cache->n_entries(), 7);  // the full space still holds the whole prefix
  // The hit is cut to 5 blocks: the window before position 20 is blocks 3..4.
  EXPECT_EQ(run_alone(s, 3, p, 1), 20);

  // Without any sliding entry no hit is usable, whatever the full space holds.
  sp.swa_cache->evict_all();
  EXPECT_EQ(run_alone(s, 4, p, 1), 0);
  ASSERT_NO_FATAL_FAILURE(check_accounting(s, sp));
}

// Hash of the token prefix [0, pos]: what the K/V at `pos` depends on.
uint64_t prefix_hash(const Sequence& q, int64_t pos) {
  uint64_t h = q.cache_namespace + 1469598103934665603ull;
  for (int64_t i = 0; i <= pos; ++i) h = (h ^ static_cast<uint64_t>(q.tokens[static_cast<size_t>(i)])) * 1099511628211ull;
  return h;
}

struct Shadow {  // slot -> prefix hash of the K/V written there, per space
  std::map<int64_t, uint64_t> full, swa;
};

// Before a step: each chunk reads what it should (full: [0, start); sliding: the window before start) and
// then writes its own positions.
void check_and_write(const Scheduler& s, const SchedulerOutput& out, Shadow& sh) {
  for (const ScheduledChunk& c : out.chunks) {
    const Sequence& q = s.get(c.id);
    for (int64_t p = 0; p < c.start_pos; ++p)
      ASSERT_EQ(sh.full[q.table.slot(p)], prefix_hash(q, p)) << "seq " << q.id << " full pos " << p;
    for (int64_t p = std::max<int64_t>(0, c.start_pos - kWindow + 1); p < c.start_pos; ++p)
      ASSERT_EQ(sh.swa[q.swa_table.slot(p)], prefix_hash(q, p)) << "seq " << q.id << " sliding pos " << p;
    for (int64_t p = c.start_pos; p < c.start_pos + c.n_tokens; ++p) {
      sh.full[q.table.slot(p)] = prefix_hash(q, p);
      sh.swa[q.swa_table.slot(p)] = prefix_hash(q, p);
    }
  }
}

void random_lifecycles(bool cached, uint64_t seed) {
  Spaces sp(40, 18, cached);
  Scheduler s = make_scheduler(sp, 4, 12);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> families(3);
  for (auto& f : families)
    for (int i = 0; i < 64; ++i) f.push_back(static_cast<int32_t>(rng() % 50));
  Shadow sh;
  SeqId next = 1;
  int64_t hits = 0, preempted = 0, steps = 0;
  while (next <= 150 || s.has_unfinished()) {
    if (next <= 150 && rng() % 2 == 0) {
      NewSequence r;
      r.id = next++;
      const auto& f = families[rng() % families.size()];
      r.prompt.assign(f.begin(), f.begin() + 1 + static_cast<int64_t>(rng() % 40));
      r.max_tokens = 1 + static_cast<int64_t>(rng() % 30);
      s.add(std::move(r));
    }
    if (rng() % 25 == 0 && !s.running().empty()) s.cancel(s.running()[rng() % s.running().size()]->id);
    const SchedulerOutput& out = s.schedule();
    preempted += static_cast<int64_t>(out.preempted.size());
    ASSERT_NO_FATAL_FAILURE(check_and_write(s, out, sh));
    const std::vector<SeqId> finished = s.on_step_done(test::sample_for(out));
    ++steps;
    ASSERT_LT(steps, 100000) << "no progress";
    ASSERT_NO_FATAL_FAILURE(check_sliding(s));
    ASSERT_NO_FATAL_FAILURE(check_accounting(s, sp));
    (void)finished;
    for (const Sequence* q : s.waiting()) ASSERT_TRUE(q->swa_table.blocks().empty());
    for (SeqId id = 1; id < next; ++id) {
      const Sequence* q = s.find(id);
      if (q && is_finished(q->status)) {
        for (int64_t i = 0; i < q->n_generated(); ++i)
          ASSERT_EQ(q->generated()[i], test::fake_token(id, q->n_prompt + i)) << id;
        hits += std::max<int64_t>(q->num_cached_tokens, 0);
        s.remove(id);
      }
    }
  }
  EXPECT_EQ(sp.pool.n_free() + (cached ? sp.cache->n_evictable() : 0), sp.pool.n_blocks());
  EXPECT_EQ(sp.swa_pool.n_free() + (cached ? sp.swa_cache->n_evictable() : 0), sp.swa_pool.n_blocks());
  if (cached) {
    EXPECT_GT(hits, 0);
    sp.cache->evict_all();
    sp.swa_cache->evict_all();
    EXPECT_EQ(sp.swa_pool.n_free(), sp.swa_pool.n_blocks());
  }
  EXPECT_GT(preempted, 0) << "the small pools should force preemption";
}

TEST(SchedulerSliding, RandomLifecyclesLeakNothing) {
  for (uint64_t seed : {1, 2, 3}) ASSERT_NO_FATAL_FAILURE(random_lifecycles(false, seed)) << seed;
}

TEST(SchedulerSliding, RandomLifecyclesWithPrefixCacheLeakNothing) {
  for (uint64_t seed : {4, 5, 6}) ASSERT_NO_FATAL_FAILURE(random_lifecycles(true, seed)) << seed;
}

}  // namespace
}  // namespace bunsen::engine
