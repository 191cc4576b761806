// Scheduler with fake sequences (no model): FCFS, token budget, chunked prefill positions, decode rows first,
// block accounting, preemption of the newest with recompute, cancellation in every state, max_num_seqs,
// memory admission. The "model" samples token f(id, position), so a sequence's expected output is known
// independently of the scheduler and a preempted/recomputed sequence must reproduce it exactly.
#include <gtest/gtest.h>

#include <numeric>

#include "core/status.h"
#include "engine/scheduler.h"
#include "scheduler_test_util.h"

namespace bunsen::engine {
namespace {

using test::fake_token;
using test::make_seq;
using test::run_step;

TEST(Scheduler, FcfsAdmissionAndPrefillOrder) {
  kv::BlockPool pool(64);
  Scheduler s({4, 8, 4}, pool);
  s.add(make_seq(10, 5, 3));
  s.add(make_seq(11, 5, 3));
  s.add(make_seq(12, 5, 3));
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 10);
  EXPECT_EQ(out.chunks[0].n_tokens, 5);
  EXPECT_TRUE(out.chunks[0].needs_logits);
  EXPECT_EQ(out.chunks[1].id, 11);
  EXPECT_EQ(out.chunks[1].n_tokens, 3);  // the rest of the budget
  EXPECT_FALSE(out.chunks[1].needs_logits);
  s.on_step_done(test::sample_for(out));
  const SchedulerOutput out2 = s.schedule();  // 10 decodes, 11 finishes its prompt, 12 starts
  ASSERT_EQ(out2.chunks.size(), 3u);
  EXPECT_EQ(out2.chunks[0].id, 10);
  EXPECT_TRUE(out2.chunks[0].is_decode);
  EXPECT_EQ(out2.chunks[1].id, 11);
  EXPECT_EQ(out2.chunks[1].start_pos, 3);
  EXPECT_EQ(out2.chunks[1].n_tokens, 2);
  EXPECT_EQ(out2.chunks[2].id, 12);
  EXPECT_EQ(out2.chunks[2].n_tokens, 5);
  EXPECT_EQ(out2.n_tokens(), 8);
}

TEST(Scheduler, HeldSequencesArePassedByUntilReleased) {
  kv::BlockPool pool(64);
  Scheduler s({4, 16, 4}, pool);
  s.add(make_seq(10, 5, 3));
  s.add(make_seq(11, 5, 3));
  s.set_held(10, true);  // e.g. its prefix is being restored from the SSD tier
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 11);  // 11 overtakes the held head of the queue
  EXPECT_EQ(s.waiting().size(), 1u);
  EXPECT_TRUE(s.get(10).table.blocks().empty());  // held: owns nothing
  s.on_step_done(test::sample_for(out));
  s.set_held(10, false);
  const SchedulerOutput out2 = s.schedule();
  ASSERT_EQ(out2.chunks.size(), 2u);
  EXPECT_EQ(out2.chunks[0].id, 11);
  EXPECT_TRUE(out2.chunks[0].is_decode);
  EXPECT_EQ(out2.chunks[1].id, 10);
  EXPECT_EQ(out2.chunks[1].n_tokens, 5);
  s.on_step_done(test::sample_for(out2));
  s.set_held(10, true);  // a running sequence is never held
  EXPECT_FALSE(s.get(10).held);
  test::check_invariants(s);
}

TEST(Scheduler, ChunkedPrefillSpansStepsWithContiguousPositions) {
  kv::BlockPool pool(64);
  Scheduler s({2, 16, 4}, pool);
  s.add(make_seq(1, 50, 3));
  int64_t next = 0;
  std::vector<int64_t> sizes;
  while (s.has_unfinished()) {
    const SchedulerOutput out = run_step(s);
    ASSERT_EQ(out.chunks.size(), 1u);
    const ScheduledChunk& c = out.chunks[0];
    EXPECT_EQ(c.start_pos, next);
    EXPECT_LE(c.n_tokens, 16);
    next += c.n_tokens;
    sizes.push_back(c.n_tokens);
    EXPECT_EQ(c.needs_logits, next >= 50);
    EXPECT_EQ(c.is_decode, next > 50);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{16, 16, 16, 2, 1, 1}));
  const Sequence& q = s.get(1);
  EXPECT_EQ(q.status, SeqStatus::kFinishedLength);
  ASSERT_EQ(q.n_generated(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(q.generated()[i], fake_token(1, 50 + i));
  EXPECT_EQ(pool.n_free(), 64);
}

TEST(Scheduler, DecodeRowsFirstAndBudgetRespected) {
  kv::BlockPool pool(64);
  Scheduler s({4, 6, 4}, pool);
  s.add(make_seq(1, 3, 20));
  s.add(make_seq(2, 2, 20));
  run_step(s);  // both prefills (5 tokens)
  s.add(make_seq(3, 30, 5));
  for (int step = 0; step < 5; ++step) {
    const SchedulerOutput& out = s.schedule();
    ASSERT_EQ(out.chunks.size(), 3u);
    EXPECT_TRUE(out.chunks[0].is_decode);
    EXPECT_EQ(out.chunks[0].id, 1);
    EXPECT_TRUE(out.chunks[1].is_decode);
    EXPECT_EQ(out.chunks[1].id, 2);
    EXPECT_EQ(out.chunks[2].id, 3);
    EXPECT_FALSE(out.chunks[2].is_decode);
    EXPECT_EQ(out.chunks[2].start_pos, 4 * step);
    EXPECT_EQ(out.chunks[2].n_tokens, 4);
    EXPECT_LE(out.n_tokens(), 6);
    s.on_step_done(test::sample_for(out));
  }
}

TEST(Scheduler, BlocksMatchScheduledTokens) {
  kv::BlockPool pool(40);
  Scheduler s({3, 7, 4}, pool);
  s.add(make_seq(1, 9, 6));
  s.add(make_seq(2, 13, 4));
  s.add(make_seq(3, 1, 9));
  while (s.has_unfinished()) {
    const SchedulerOutput& out = s.schedule();
    for (const auto& c : out.chunks)  // mid-step: blocks cover exactly the computed + scheduled tokens
      EXPECT_EQ(s.get(c.id).table.blocks().size(), static_cast<size_t>((c.start_pos + c.n_tokens + 3) / 4));
    s.on_step_done(test::sample_for(out));
    test::check_invariants(s);
  }
  EXPECT_EQ(pool.n_free(), 40);
}

TEST(Scheduler, PreemptsNewestAndRecomputesToTheSameTokens) {
  kv::BlockPool pool(6);  // 24 tokens: two sequences of 20 cannot both finish
  Scheduler s({4, 16, 4}, pool);
  s.add(make_seq(1, 8, 12));
  s.add(make_seq(2, 8, 12));
  bool saw_preempt = false;
  while (s.has_unfinished()) {
    const SchedulerOutput out = run_step(s);
    for (SeqId v : out.preempted) {
      EXPECT_EQ(v, 2);  // never the older one
      saw_preempt = true;
      EXPECT_EQ(s.get(2).status, SeqStatus::kWaiting);
      EXPECT_TRUE(s.get(2).table.blocks().empty());
      EXPECT_EQ(s.waiting().front()->id, 2);
    }
    test::check_invariants(s);
  }
  ASSERT_TRUE(saw_preempt);
  EXPECT_GE(s.get(2).n_preemptions, 1);
  EXPECT_EQ(s.get(1).n_preemptions, 0);
  for (SeqId id : {1, 2}) {
    const Sequence& q = s.get(id);
    EXPECT_EQ(q.status, SeqStatus::kFinishedLength);
    ASSERT_EQ(q.n_generated(), 12);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(q.generated()[i], fake_token(id, 8 + i)) << id << " " << i;
  }
  EXPECT_EQ(pool.n_free(), 6);
}

TEST(Scheduler, RecomputeChunkCoversPromptAndGenerated) {
  kv::BlockPool pool(5);
  Scheduler s({4, 32, 4}, pool);
  s.add(make_seq(1, 8, 4));   // finishes in the step where 2 runs out of blocks
  s.add(make_seq(2, 6, 12));  // newest: preempts itself at position 8, resumes alone
  int64_t tokens_at_preempt = -1;
  while (s.has_unfinished()) {
    const SchedulerOutput out = run_step(s);
    if (!out.preempted.empty() && tokens_at_preempt < 0) tokens_at_preempt = s.get(2).n_tokens();
    for (const auto& c : out.chunks)
      if (c.id == 2 && tokens_at_preempt > 0 && !c.is_decode && c.start_pos == 0) {
        EXPECT_EQ(c.n_tokens, tokens_at_preempt);  // prompt + generated so far, one chunk (budget allows)
        EXPECT_TRUE(c.needs_logits);
      }
  }
  ASSERT_GT(tokens_at_preempt, 6);
  EXPECT_EQ(s.get(2).n_generated(), 12);
}

TEST(Scheduler, CancelFreesBlocksAtOnceInEveryState) {
  kv::BlockPool pool(32);
  Scheduler s({4, 8, 4}, pool);
  s.add(make_seq(1, 3, 50));   // will be decoding
  s.add(make_seq(2, 20, 5));   // will be mid-prefill
  s.add(make_seq(3, 4, 5));    // queued behind 2
  run_step(s);
  run_step(s);
  ASSERT_TRUE(s.get(1).is_decoding());
  ASSERT_GT(s.get(2).num_computed_tokens, 0);
  ASSERT_LT(s.get(2).num_computed_tokens, 20);
  const int32_t free0 = pool.n_free();
  const size_t b2 = s.get(2).table.blocks().size();
  EXPECT_TRUE(s.cancel(2));  // mid-prefill
  EXPECT_EQ(pool.n_free(), free0 + static_cast<int32_t>(b2));
  EXPECT_EQ(s.get(2).status, SeqStatus::kFinishedCancelled);
  EXPECT_FALSE(s.cancel(2));
  EXPECT_FALSE(s.cancel(99));
  s.add(make_seq(4, 4, 5));
  EXPECT_TRUE(s.cancel(4));  // while queued
  EXPECT_EQ(s.waiting().size(), 1u);
  const SchedulerOutput& out = s.schedule();
  const size_t b1 = s.get(1).table.blocks().size();
  const int32_t free1 = pool.n_free();
  EXPECT_TRUE(s.cancel(1));  // mid-decode, while its step is in flight: its row is ignored
  EXPECT_EQ(pool.n_free(), free1 + static_cast<int32_t>(b1));
  s.on_step_done(test::sample_for(out));
  EXPECT_EQ(s.get(1).status, SeqStatus::kFinishedCancelled);
  while (s.has_unfinished()) run_step(s);
  EXPECT_EQ(s.get(3).status, SeqStatus::kFinishedLength);
  EXPECT_EQ(pool.n_free(), 32);
  s.remove(2);
  EXPECT_EQ(s.find(2), nullptr);
}

TEST(Scheduler, MaxNumSeqsRespected) {
  kv::BlockPool pool(100);
  Scheduler s({3, 64, 4}, pool);
  for (int i = 0; i < 7; ++i) s.add(make_seq(i, 2, 4));
  size_t max_running = 0;
  while (s.has_unfinished()) {
    const SchedulerOutput out = run_step(s);
    EXPECT_LE(out.chunks.size(), 3u);
    max_running = std::max(max_running, s.running().size());
    EXPECT_LE(s.running().size(), 3u);
  }
  EXPECT_EQ(max_running, 3u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(s.get(i).status, SeqStatus::kFinishedLength);
}

TEST(Scheduler, EosStopsWithoutAppendingAndZeroMaxTokens) {
  kv::BlockPool pool(16);
  Scheduler s({2, 16, 4}, pool);
  NewSequence r = make_seq(5, 4, 30);
  r.eos_ids = {fake_token(5, 6)};  // the third sampled token
  s.add(r);
  s.add(make_seq(6, 4, 0));
  EXPECT_EQ(s.get(6).status, SeqStatus::kFinishedLength);
  std::vector<SeqId> done;
  while (s.has_unfinished()) {
    const SchedulerOutput& out = s.schedule();
    for (SeqId id : s.on_step_done(test::sample_for(out))) done.push_back(id);
  }
  EXPECT_EQ(done, std::vector<SeqId>{5});
  EXPECT_EQ(s.get(5).status, SeqStatus::kFinishedStop);
  EXPECT_EQ(s.get(5).n_generated(), 2);
  EXPECT_EQ(pool.n_free(), 16);
}

TEST(Scheduler, MemoryAdmissionRejectsWhatCanNeverFit) {
  kv::BlockPool pool(10);  // 40 tokens
  Scheduler s({2, 16, 4}, pool);
  try {
    s.add(make_seq(1, 30, 11));
    FAIL() << "expected memory_admission";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "memory_admission");
    const std::string m = e.message();
    for (const char* n : {"30", "11", "41", "10 blocks", "40 tokens"}) EXPECT_NE(m.find(n), std::string::npos) << m;
  }
  EXPECT_EQ(s.n_sequences(), 0u);
  s.add(make_seq(2, 30, 10));  // exactly the pool
  while (s.has_unfinished()) run_step(s);
  EXPECT_EQ(s.get(2).n_generated(), 10);
}

TEST(Scheduler, MisuseIsAnError) {
  kv::BlockPool pool(8);
  EXPECT_THROW(Scheduler({4, 3, 4}, pool), Error);  // budget below max_num_seqs
  Scheduler s({2, 8, 4}, pool);
  EXPECT_THROW(s.add(make_seq(1, 0, 3)), Error);
  s.add(make_seq(1, 3, 3));
  EXPECT_THROW(s.add(make_seq(1, 3, 3)), Error);
  EXPECT_THROW(s.remove(1), Error);  // not finished
  const SchedulerOutput& out = s.schedule();
  EXPECT_THROW(s.schedule(), Error);
  std::vector<SampledToken> wrong{{7, 1}};
  EXPECT_THROW(s.on_step_done(wrong), Error);
  EXPECT_EQ(s.get(1).num_computed_tokens, 0);  // a rejected completion changes nothing
  EXPECT_THROW(s.on_step_done({}), Error);       // one logits row is owed
  s.on_step_done(test::sample_for(out));
  EXPECT_EQ(s.get(1).n_generated(), 1);
  EXPECT_THROW(s.on_step_done({}), Error);  // no step in flight
  EXPECT_THROW(s.add(make_seq(2, 1, int64_t{1} << 62)), Error);  // huge max_tokens: rejected, no overflow
}

}  // namespace
}  // namespace bunsen::engine
