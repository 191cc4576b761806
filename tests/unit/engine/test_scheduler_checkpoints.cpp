// Scheduler with a hybrid pool (state slots), a prefix cache and state checkpoints, fake sequences (no model):
// a prefill chunk stops at the prompt's last full block boundary and is marked save_state there; a prefix hit
// is cut back to the deepest block with a checkpoint (restore entry; the extra hit blocks go back to the
// cache); a hit with no checkpoint starts from position 0; the checkpoint store is required for a hybrid
// pool with a cache.
#include <gtest/gtest.h>

#include "core/status.h"
#include "engine/scheduler.h"
#include "scheduler_test_util.h"

namespace bunsen::engine {
namespace {

using test::make_seq;
using test::run_step;

constexpr int32_t kBs = 4;

NewSequence with_prompt(SeqId id, std::vector<int32_t> prompt, int64_t max_tokens) {
  NewSequence r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

// Runs every step to the end; returns the save_state chunks' end positions.
std::vector<int64_t> run_to_end(Scheduler& s) {
  std::vector<int64_t> saves;
  while (s.has_unfinished()) {
    const SchedulerOutput out = run_step(s);
    for (const auto& c : out.chunks)
      if (c.save_state) saves.push_back(c.start_pos + c.n_tokens);
  }
  return saves;
}

TEST(SchedulerCheckpoints, PrefillStopsAtTheCheckpointBoundary) {
  kv::BlockPool pool(64, 2);
  kv::PrefixCache cache(pool, kBs, 0);
  kv::StateCheckpoints ckpt(4, kBs);
  Scheduler s({2, 64, kBs}, pool, &cache, &ckpt);
  s.add(make_seq(1, 30, 2));  // boundary floor(29 / 4) * 4 = 28
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].start_pos, 0);
  EXPECT_EQ(out.chunks[0].n_tokens, 28);
  EXPECT_TRUE(out.chunks[0].save_state);
  EXPECT_FALSE(out.chunks[0].needs_logits);
  EXPECT_TRUE(out.restores.empty());
  s.on_step_done(test::sample_for(out));
  const SchedulerOutput out2 = s.schedule();
  ASSERT_EQ(out2.chunks.size(), 1u);
  EXPECT_EQ(out2.chunks[0].start_pos, 28);
  EXPECT_EQ(out2.chunks[0].n_tokens, 2);
  EXPECT_FALSE(out2.chunks[0].save_state);
  EXPECT_TRUE(out2.chunks[0].needs_logits);
  s.on_step_done(test::sample_for(out2));
  EXPECT_TRUE(run_to_end(s).empty());
  // A budget smaller than the boundary: chunks of the budget, the one that reaches 28 stops there.
  Scheduler small({2, 12, kBs}, pool, &cache, &ckpt);
  small.add(make_seq(2, 30, 1));
  EXPECT_EQ(run_to_end(small), std::vector<int64_t>{28});
  // A prompt of one block or less has no boundary.
  small.add(make_seq(3, 4, 1));
  EXPECT_TRUE(run_to_end(small).empty());
}

TEST(SchedulerCheckpoints, HitIsCutBackToTheDeepestCheckpoint) {
  kv::BlockPool pool(64, 2);
  kv::PrefixCache cache(pool, kBs, 0);
  kv::StateCheckpoints ckpt(4, kBs);
  Scheduler s({2, 64, kBs}, pool, &cache, &ckpt);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back(100 + i);
  s.add(with_prompt(1, prompt, 4));
  run_to_end(s);  // 33 computed tokens: 8 full blocks go to the cache
  EXPECT_EQ(cache.n_entries(), 8);
  // Same prompt, no checkpoint stored yet: the 7 KV hit blocks are released, the prefill starts at 0.
  s.add(with_prompt(2, prompt, 1));
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].start_pos, 0);
  EXPECT_TRUE(out.restores.empty());
  EXPECT_EQ(s.get(2).num_cached_tokens, 0);
  EXPECT_EQ(s.get(2).table.blocks().size(), 7u);  // fresh ones for the 28-token chunk
  s.on_step_done(test::sample_for(out));
  run_to_end(s);
  // A checkpoint at the end of block 4 (position 20) and one at the end of block 6 (28).
  const auto keys = cache.block_keys(0, prompt, 7);
  const int32_t c20 = ckpt.insert(keys[4], keys[3], std::span<const int32_t>(prompt).subspan(16, kBs));
  const int32_t c28 = ckpt.insert(keys[6], keys[5], std::span<const int32_t>(prompt).subspan(24, kBs));
  // The conversation continued (prompt + sequence 1's answer + more): the KV hit covers 8 blocks (32
  // tokens), the deepest checkpoint is at 28.
  std::vector<int32_t> longer = s.get(1).tokens;
  for (int i = 0; i < 10; ++i) longer.push_back(500 + i);
  const int64_t evictable = cache.n_evictable();
  s.add(with_prompt(3, longer, 1));
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].start_pos, 28);
  ASSERT_EQ(out.restores.size(), 1u);
  EXPECT_EQ(out.restores[0].id, 3);
  EXPECT_EQ(out.restores[0].checkpoint, c28);
  EXPECT_EQ(out.restores[0].state_slot, s.get(3).table.state_slot());
  EXPECT_GE(out.restores[0].state_slot, 0);
  EXPECT_EQ(s.get(3).num_cached_tokens, 28);
  EXPECT_EQ(cache.n_evictable(), evictable - 7) << "hit blocks 0..6 held, block 7 back in the LRU";
  s.on_step_done(test::sample_for(out));
  run_to_end(s);
  // A prompt that diverges in block 6: the hit (6 blocks) is cut back to the checkpoint at 20.
  std::vector<int32_t> fork(prompt.begin(), prompt.begin() + 26);
  for (int i = 0; i < 8; ++i) fork.push_back(900 + i);
  s.add(with_prompt(4, fork, 1));
  out = s.schedule();
  ASSERT_EQ(out.restores.size(), 1u);
  EXPECT_EQ(out.restores[0].checkpoint, c20);
  EXPECT_EQ(out.chunks[0].start_pos, 20);
  EXPECT_EQ(out.chunks[0].n_tokens, 32 - 20);  // stops at its own boundary floor(33 / 4) * 4 = 32
  EXPECT_TRUE(out.chunks[0].save_state);
  s.on_step_done(test::sample_for(out));
  run_to_end(s);
  EXPECT_EQ(pool.n_free_state_slots(), 2);
  EXPECT_EQ(pool.n_free() + cache.n_evictable(), 64);
}

TEST(SchedulerCheckpoints, HybridPoolWithACacheNeedsCheckpoints) {
  kv::BlockPool pool(16, 2);
  kv::PrefixCache cache(pool, kBs, 0);
  kv::StateCheckpoints ckpt(2, kBs);
  EXPECT_THROW(Scheduler({2, 16, kBs}, pool, &cache), Error);
  EXPECT_THROW(Scheduler({2, 16, kBs}, pool, nullptr, &ckpt), Error);
  kv::StateCheckpoints other_bs(2, 8);
  EXPECT_THROW(Scheduler({2, 16, kBs}, pool, &cache, &other_bs), Error);
  EXPECT_NO_THROW(Scheduler({2, 16, kBs}, pool, &cache, &ckpt));
  EXPECT_NO_THROW(Scheduler({2, 16, kBs}, pool));  // no cache: nothing to restore
}

}  // namespace
}  // namespace bunsen::engine
