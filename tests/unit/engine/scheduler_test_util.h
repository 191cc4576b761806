// Helpers for the scheduler tests: fake requests, a fake "model" whose sampled token depends only on
// (sequence id, position), and the invariant checks run between steps. Header only (test sources are
// globbed as *.cpp). Not a model: no tensors.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "engine/scheduler.h"

namespace bunsen::engine::test {

// The token a sequence holds at `pos` once generated there, independent of batching and preemption.
inline int32_t fake_token(SeqId id, int64_t pos) {
  return static_cast<int32_t>(1000 + (id * 131 + pos * 7) % 9973);
}

inline NewSequence make_seq(SeqId id, int64_t prompt_len, int64_t max_tokens) {
  NewSequence r;
  r.id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>((id * 17 + i) % 500));
  r.max_tokens = max_tokens;
  return r;
}

// One sampled token per needs_logits chunk: the token at the position after the chunk.
inline std::vector<SampledToken> sample_for(const SchedulerOutput& out) {
  std::vector<SampledToken> v;
  for (const auto& c : out.chunks)
    if (c.needs_logits) v.push_back({c.id, fake_token(c.id, c.start_pos + c.n_tokens)});
  return v;
}

inline SchedulerOutput run_step(Scheduler& s) {
  SchedulerOutput out = s.schedule();
  s.on_step_done(sample_for(out));
  return out;
}

// Between steps: block ownership, per-sequence block counts, queue order and limits. Without a prefix
// cache every block is owned once or free; with one, refcount == owners + (cached ? 1 : 0) and
// free + cached-unreferenced + owned == total.
inline void check_invariants(const Scheduler& s) {
  const kv::BlockPool& pool = s.pool();
  const kv::PrefixCache* cache = s.prefix_cache();
  const int32_t bs = s.config().block_size;
  std::map<kv::BlockId, int32_t> owners;
  for (const Sequence* q : s.running()) {
    ASSERT_EQ(q->status, SeqStatus::kRunning);
    ASSERT_LT(q->num_computed_tokens, q->n_tokens());
    ASSERT_EQ(static_cast<int64_t>(q->table.blocks().size()), (q->num_computed_tokens + bs - 1) / bs) << q->id;
    std::set<kv::BlockId> mine(q->table.blocks().begin(), q->table.blocks().end());
    ASSERT_EQ(mine.size(), q->table.blocks().size()) << "sequence " << q->id << " holds a block twice";
    for (kv::BlockId b : q->table.blocks()) ++owners[b];
  }
  for (const auto& [b, n] : owners) {
    if (!cache) ASSERT_EQ(n, 1) << "a block is owned twice: " << b;
    ASSERT_EQ(pool.refcount(b), n + (cache && cache->is_cached(b) ? 1 : 0)) << "block " << b;
  }
  const int64_t evictable = cache ? cache->n_evictable() : 0;
  ASSERT_EQ(static_cast<int64_t>(pool.n_free()) + evictable + static_cast<int64_t>(owners.size()), pool.n_blocks())
      << "free + cached-unreferenced + owned != total";
  if (cache) ASSERT_LE(cache->n_entries(), pool.n_blocks() - pool.n_free());
  for (const Sequence* q : s.waiting()) {
    ASSERT_EQ(q->status, SeqStatus::kWaiting);
    ASSERT_TRUE(q->table.blocks().empty());
    ASSERT_EQ(q->num_computed_tokens, 0);
  }
  ASSERT_LE(static_cast<int64_t>(s.running().size()), s.config().max_num_seqs);
  for (size_t i = 1; i < s.running().size(); ++i) ASSERT_LT(s.running()[i - 1]->arrival, s.running()[i]->arrival);
  for (size_t i = 1; i < s.waiting().size(); ++i) ASSERT_LT(s.waiting()[i - 1]->arrival, s.waiting()[i]->arrival);
  if (!s.running().empty() && !s.waiting().empty()) {
    ASSERT_LT(s.running().back()->arrival, s.waiting().front()->arrival);
  }
}

}  // namespace bunsen::engine::test
