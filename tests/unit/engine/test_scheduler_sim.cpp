// Randomized scheduler simulation (fixed seeds, small pools): random arrivals, lengths, EOS positions and
// cancellations (queued, mid-prefill, mid-decode, in flight). Every step checks the budget, chunk positions,
// decode-rows-first order, block accounting (no block owned twice, free + owned == total), no deadlock and
// no starvation of the oldest; every sequence must end with exactly the tokens the fake model implies.
// With the prefix cache on, prompts come from a few shared families (so blocks are shared and evicted),
// and a shadow copy of every block's contents checks that each chunk reads only blocks holding its own
// tokens and writes only blocks it holds alone: free + cached-unreferenced + owned == total every step.
// Hybrid mode adds state slots and a few state checkpoints: chunks stop at each prompt's checkpoint
// boundary, a shadow of every checkpoint's token prefix checks that a restore resumes exactly the sequence's
// own prefix in its own state slot, and every state slot comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "core/status.h"
#include "engine/scheduler.h"
#include "scheduler_test_util.h"

namespace bunsen::engine {
namespace {

using test::fake_token;

struct SimConfig {
  uint64_t seed = 1;
  int64_t arrival_steps = 1000;  // steps during which requests arrive (0: until `lifecycles` were added)
  int64_t lifecycles = 0;        // admitted requests to create when arrival_steps == 0
  SchedulerConfig sched;
  int32_t n_blocks = 16;
  int max_prompt = 40, max_gen = 30;
  double p_arrival = 0.5, p_cancel = 0.03;
  size_t max_waiting = 1000000;  // no arrivals while this many wait
  bool prefix_cache = false;
  int n_families = 3;  // with the cache: prompts are prefixes of one of these token streams
  bool hybrid = false;  // state slots (one per running sequence) + `checkpoints` state checkpoints
  int32_t checkpoints = 3;
};

struct Expected {
  int64_t prompt = 0, max_tokens = 0, eos_at = -1;  // eos_at: generated count at which EOS is sampled
  int64_t steps_oldest = 0;
};

struct SimStats {
  int64_t added = 0, rejected = 0, cancelled = 0, stopped = 0, lengthed = 0, preemptions = 0, steps = 0;
  int64_t hit_tokens = 0, evictions = 0, restores = 0;
};

// Checks a sequence that ended against what the fake model implies.
void check_final(const Sequence& q, const Expected& e) {
  for (int64_t i = 0; i < q.n_generated(); ++i) ASSERT_EQ(q.generated()[i], fake_token(q.id, e.prompt + i));
  if (q.status == SeqStatus::kFinishedCancelled) return;
  if (e.eos_at >= 0 && e.eos_at < e.max_tokens) {
    ASSERT_EQ(q.status, SeqStatus::kFinishedStop) << q.id;
    ASSERT_EQ(q.n_generated(), e.eos_at);
  } else {
    ASSERT_EQ(q.status, SeqStatus::kFinishedLength) << q.id;
    ASSERT_EQ(q.n_generated(), e.max_tokens);
  }
}

void check_step(const Scheduler& s, const SchedulerOutput& out) {
  const SchedulerConfig& c = s.config();
  ASSERT_LE(out.n_tokens(), c.max_num_batched_tokens);
  ASSERT_LE(static_cast<int64_t>(out.chunks.size()), c.max_num_seqs);
  if (s.has_unfinished()) {
    ASSERT_FALSE(out.chunks.empty()) << "deadlock: live sequences but an empty step";
  }
  bool seen_prefill = false;
  for (const ScheduledChunk& ch : out.chunks) {
    if (!ch.is_decode) seen_prefill = true;
    ASSERT_FALSE(ch.is_decode && seen_prefill) << "decode row after a prefill chunk";
    const Sequence& q = s.get(ch.id);
    ASSERT_EQ(q.status, SeqStatus::kRunning);
    ASSERT_EQ(ch.start_pos, q.num_computed_tokens);
    ASSERT_GE(ch.n_tokens, 1);
    ASSERT_LE(ch.start_pos + ch.n_tokens, q.n_tokens());
    ASSERT_EQ(ch.needs_logits, ch.start_pos + ch.n_tokens == q.n_tokens());
    ASSERT_EQ(static_cast<int64_t>(q.table.blocks().size()),
              (ch.start_pos + ch.n_tokens + c.block_size - 1) / c.block_size);
  }
}

class Sim {
 public:
  explicit Sim(const SimConfig& cfg)
      : cfg_(cfg),
        rng_(cfg.seed),
        pool_(cfg.n_blocks, cfg.hybrid ? static_cast<int32_t>(cfg.sched.max_num_seqs) : 0),
        cache_(cfg.prefix_cache ? std::make_unique<kv::PrefixCache>(pool_, cfg.sched.block_size, 0) : nullptr),
        ckpt_(cfg.hybrid && cache_ ? std::make_unique<kv::StateCheckpoints>(cfg.checkpoints, cfg.sched.block_size)
                                   : nullptr),
        ckpt_prefix_(static_cast<size_t>(cfg.checkpoints)),
        s_(cfg.sched, pool_, cache_.get(), ckpt_.get()),
        content_(static_cast<size_t>(cfg.n_blocks) * static_cast<size_t>(cfg.sched.block_size), -1) {}

  SimStats run() {
    for (;;) {
      const bool arriving = cfg_.arrival_steps > 0 ? stats_.steps < cfg_.arrival_steps : stats_.added < cfg_.lifecycles;
      if (!arriving && !s_.has_unfinished()) break;
      if (arriving) arrive();
      maybe_cancel();
      const SchedulerOutput& out = s_.schedule();
      check_step(s_, out);
      if (cache_) check_contents(out);
      if (ckpt_) check_restores(out);
      if (::testing::Test::HasFatalFailure()) return stats_;
      stats_.preemptions += static_cast<int64_t>(out.preempted.size());
      const auto sampled = test::sample_for(out);
      maybe_cancel();  // while the step is in flight
      if (ckpt_) save_checkpoints(out);
      s_.on_step_done(sampled);
      ++stats_.steps;
      test::check_invariants(s_);
      track_oldest();
      collect();
      if (::testing::Test::HasFatalFailure()) return stats_;
      EXPECT_LT(stats_.steps, 10'000'000) << "simulation does not terminate";
    }
    EXPECT_TRUE(live_.empty());
    if (cache_) {
      EXPECT_EQ(pool_.n_free() + cache_->n_evictable(), pool_.n_blocks()) << "leaked blocks";
      stats_.hit_tokens = cache_->stats().hit_tokens;
      stats_.evictions = cache_->stats().evictions;
      cache_->evict_all();
    }
    EXPECT_EQ(pool_.n_free(), pool_.n_blocks()) << "leaked blocks";
    EXPECT_EQ(pool_.n_free_state_slots(), pool_.n_state_slots()) << "leaked state slots";
    EXPECT_EQ(s_.n_sequences(), 0u);
    ::testing::Test::RecordProperty(
        "stats", strfmt("steps=%lld added=%lld rejected=%lld cancelled=%lld stop=%lld length=%lld preemptions=%lld",
                        (long long)stats_.steps, (long long)stats_.added, (long long)stats_.rejected,
                        (long long)stats_.cancelled, (long long)stats_.stopped, (long long)stats_.lengthed,
                        (long long)stats_.preemptions));
    return stats_;
  }

 private:
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  void arrive() {
    if (s_.waiting().size() >= cfg_.max_waiting || !chance(cfg_.p_arrival)) return;
    const int n = static_cast<int>(uniform(1, 2));
    for (int i = 0; i < n; ++i) {
      const SeqId id = next_id_++;
      Expected e{uniform(1, cfg_.max_prompt), uniform(0, cfg_.max_gen), -1};
      NewSequence r = test::make_seq(id, e.prompt, e.max_tokens);
      if (cache_) {  // a prefix of one family's stream: families share blocks, ids do not matter
        const int64_t f = uniform(0, cfg_.n_families - 1);
        for (int64_t i = 0; i < e.prompt; ++i) r.prompt[static_cast<size_t>(i)] = static_cast<int32_t>(f * 97 + i * 3);
      }
      if (chance(0.3)) {
        e.eos_at = uniform(0, e.max_tokens + 3);
        r.eos_ids = {fake_token(id, e.prompt + e.eos_at), 7};  // 7 never appears (fake tokens are >= 1000)
      }
      const int32_t bs = cfg_.sched.block_size;
      if ((e.prompt + e.max_tokens + bs - 1) / bs > pool_.n_blocks()) {
        try {
          s_.add(r);
          ADD_FAILURE() << "over-pool request " << id << " was accepted";
        } catch (const Error& err) {
          EXPECT_EQ(err.component(), "memory_admission");
        }
        ++stats_.rejected;
        continue;
      }
      s_.add(std::move(r));
      ++stats_.added;
      live_.emplace(id, e);
    }
  }

  void maybe_cancel() {
    if (live_.empty() || !chance(cfg_.p_cancel)) return;
    auto it = std::next(live_.begin(), uniform(0, static_cast<int64_t>(live_.size()) - 1));
    const Sequence& q = s_.get(it->first);
    if (is_finished(q.status)) return;  // max_tokens == 0: finished at add
    const int32_t free_before = pool_.n_free();
    const auto held = static_cast<int32_t>(q.table.blocks().size());
    ASSERT_TRUE(s_.cancel(it->first));
    if (!cache_) ASSERT_EQ(pool_.n_free(), free_before + held) << "cancel did not free blocks at once";
    if (cache_) ASSERT_TRUE(q.table.blocks().empty()) << "cancel did not release the blocks at once";
  }

  // The step's "forward": each chunk reads positions [0, start_pos) of its table and writes
  // [start_pos, start_pos + n_tokens); a read must find the sequence's own token, a write must hit a block
  // nobody else holds and the cache does not hold.
  void check_contents(const SchedulerOutput& out) {
    const int32_t bs = cfg_.sched.block_size;
    for (const ScheduledChunk& ch : out.chunks) {
      const Sequence& q = s_.get(ch.id);
      for (int64_t p = 0; p < ch.start_pos; ++p)
        ASSERT_EQ(content_[static_cast<size_t>(q.table.slot(p))], q.tokens[static_cast<size_t>(p)])
            << "sequence " << q.id << " reads a block holding other tokens at position " << p;
      for (int64_t p = ch.start_pos; p < ch.start_pos + ch.n_tokens; ++p) {
        const kv::BlockId b = q.table.blocks()[static_cast<size_t>(p / bs)];
        ASSERT_EQ(pool_.refcount(b), 1) << "write into a shared block " << b;
        ASSERT_FALSE(cache_->is_cached(b)) << "write into a cached block " << b;
        content_[static_cast<size_t>(q.table.slot(p))] = q.tokens[static_cast<size_t>(p)];
      }
    }
  }

  // A restore hands the admitted sequence a checkpoint taken after exactly its own first start_pos tokens.
  void check_restores(const SchedulerOutput& out) {
    for (const StateRestore& r : out.restores) {
      const Sequence& q = s_.get(r.id);
      ASSERT_EQ(r.state_slot, q.table.state_slot());
      const auto ch = std::find_if(out.chunks.begin(), out.chunks.end(), [&](const auto& c) { return c.id == r.id; });
      ASSERT_NE(ch, out.chunks.end());
      const std::vector<int32_t>& prefix = ckpt_prefix_[static_cast<size_t>(r.checkpoint)];
      ASSERT_EQ(static_cast<int64_t>(prefix.size()), ch->start_pos) << "restore at the wrong position";
      ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), q.tokens.begin())) << "restore of another prefix";
      ++stats_.restores;
    }
    for (const ScheduledChunk& ch : out.chunks) {
      const Sequence& q = s_.get(ch.id);
      const int64_t b = (q.n_prompt - 1) / cfg_.sched.block_size * cfg_.sched.block_size;
      ASSERT_EQ(ch.save_state, b > 0 && ch.start_pos < b && ch.start_pos + ch.n_tokens == b);
      ASSERT_FALSE(ch.start_pos < b && ch.start_pos + ch.n_tokens > b) << "a chunk crosses the checkpoint";
    }
  }

  // What the Engine does after a step: the state after a save_state chunk goes into a checkpoint.
  void save_checkpoints(const SchedulerOutput& out) {
    const int32_t bs = cfg_.sched.block_size;
    for (const ScheduledChunk& ch : out.chunks) {
      const Sequence& q = s_.get(ch.id);
      if (!ch.save_state || is_finished(q.status)) continue;
      const int64_t nb = (ch.start_pos + ch.n_tokens) / bs;
      const auto keys = cache_->block_keys(q.cache_namespace, q.tokens, nb);
      const auto blk = std::span<const int32_t>(q.tokens).subspan(static_cast<size_t>((nb - 1) * bs), bs);
      const int32_t slot = ckpt_->insert(keys.back(), nb > 1 ? keys[static_cast<size_t>(nb - 2)] : 0, blk);
      ckpt_prefix_[static_cast<size_t>(slot)].assign(q.tokens.begin(), q.tokens.begin() + nb * bs);
    }
  }

  void track_oldest() {
    if (live_.empty()) return;
    auto it = live_.begin();  // ids grow with arrival
    if (is_finished(s_.get(it->first).status)) return;
    Expected& e = it->second;
    ++e.steps_oldest;
    // Once oldest it is never preempted and progresses >= 1 token per step: it ends within its own tokens.
    ASSERT_LE(e.steps_oldest, e.prompt + e.max_tokens + 2) << "oldest sequence " << it->first << " starves";
  }

  void collect() {
    for (auto it = live_.begin(); it != live_.end();) {
      const Sequence& q = s_.get(it->first);
      if (!is_finished(q.status)) {
        ++it;
        continue;
      }
      check_final(q, it->second);
      if (q.status == SeqStatus::kFinishedCancelled) ++stats_.cancelled;
      if (q.status == SeqStatus::kFinishedStop) ++stats_.stopped;
      if (q.status == SeqStatus::kFinishedLength) ++stats_.lengthed;
      s_.remove(it->first);
      it = live_.erase(it);
    }
  }

  SimConfig cfg_;
  std::mt19937_64 rng_;
  kv::BlockPool pool_;
  std::unique_ptr<kv::PrefixCache> cache_;
  std::unique_ptr<kv::StateCheckpoints> ckpt_;
  std::vector<std::vector<int32_t>> ckpt_prefix_;  // [checkpoints]: the tokens each checkpoint was taken after
  Scheduler s_;
  std::vector<int32_t> content_;  // [n_blocks * block_size]: the token each slot was last written with
  std::map<SeqId, Expected> live_;
  SeqId next_id_ = 1;
  SimStats stats_;
};

TEST(SchedulerSim, ThousandStepsSmallPoolKeepsInvariants) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SimConfig cfg;
    cfg.seed = seed;
    cfg.sched = {5, 12, 4};
    cfg.n_blocks = 16;  // 64 tokens; prompts up to 40 and outputs up to 30: rejections and preemptions
    const SimStats st = Sim(cfg).run();
    if (HasFatalFailure()) return;
    EXPECT_GT(st.preemptions, 0) << seed;
    EXPECT_GT(st.cancelled, 0) << seed;
    EXPECT_GT(st.rejected, 0) << seed;
    EXPECT_GT(st.stopped, 0) << seed;
    EXPECT_GT(st.lengthed, 0) << seed;
    EXPECT_EQ(st.cancelled + st.stopped + st.lengthed, st.added) << seed;
  }
}

TEST(SchedulerSim, WithPrefixCacheKeepsInvariantsAndHits) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SimConfig cfg;
    cfg.seed = seed;
    cfg.sched = {5, 12, 4};
    cfg.n_blocks = 16;
    cfg.prefix_cache = true;
    const SimStats st = Sim(cfg).run();
    if (HasFatalFailure()) return;
    EXPECT_GT(st.preemptions, 0) << seed;
    EXPECT_GT(st.cancelled, 0) << seed;
    EXPECT_GT(st.hit_tokens, 0) << seed;
    EXPECT_GT(st.evictions, 0) << seed;
    EXPECT_EQ(st.cancelled + st.stopped + st.lengthed, st.added) << seed;
  }
}

TEST(SchedulerSim, TenThousandLifecyclesWithPrefixCacheLeakNoBlock) {
  SimConfig cfg;
  cfg.seed = 77;
  cfg.arrival_steps = 0;
  cfg.lifecycles = 10'000;
  cfg.sched = {8, 32, 4};
  cfg.n_blocks = 24;
  cfg.max_prompt = 30;
  cfg.max_gen = 20;
  cfg.p_arrival = 0.7;
  cfg.p_cancel = 0.05;
  cfg.max_waiting = 16;
  cfg.prefix_cache = true;
  cfg.n_families = 5;
  const SimStats st = Sim(cfg).run();
  EXPECT_EQ(st.added, 10'000);
  EXPECT_EQ(st.cancelled + st.stopped + st.lengthed, st.added);
  EXPECT_GT(st.hit_tokens, 0);
  EXPECT_GT(st.evictions, 0);
}

TEST(SchedulerSim, HybridWithCheckpointsRestoresOwnPrefixesAndLeaksNothing) {
  for (uint64_t seed : {5u, 6u, 7u}) {
    SimConfig cfg;
    cfg.seed = seed;
    cfg.arrival_steps = 0;
    cfg.lifecycles = 3000;
    cfg.sched = {6, 16, 4};
    cfg.n_blocks = 24;
    cfg.max_prompt = 30;
    cfg.max_gen = 12;
    cfg.p_arrival = 0.6;
    cfg.max_waiting = 12;
    cfg.prefix_cache = true;
    cfg.n_families = 4;
    cfg.hybrid = true;
    const SimStats st = Sim(cfg).run();
    if (HasFatalFailure()) return;
    EXPECT_EQ(st.cancelled + st.stopped + st.lengthed, st.added) << seed;
    EXPECT_GT(st.hit_tokens, 0) << seed;
    EXPECT_GT(st.restores, 0) << seed;
    EXPECT_GT(st.preemptions, 0) << seed;
  }
}

TEST(SchedulerSim, TenThousandLifecyclesLeakNoBlock) {
  SimConfig cfg;
  cfg.seed = 20261129;
  cfg.arrival_steps = 0;
  cfg.lifecycles = 10'000;
  cfg.sched = {8, 32, 4};
  cfg.n_blocks = 24;
  cfg.max_prompt = 30;
  cfg.max_gen = 20;
  cfg.p_arrival = 0.7;
  cfg.p_cancel = 0.05;
  cfg.max_waiting = 16;
  const SimStats st = Sim(cfg).run();
  EXPECT_EQ(st.added, 10'000);
  EXPECT_EQ(st.cancelled + st.stopped + st.lengthed, st.added);
  EXPECT_GT(st.preemptions, 0);
}

}  // namespace
}  // namespace bunsen::engine
