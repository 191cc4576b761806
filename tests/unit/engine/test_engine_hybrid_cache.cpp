// Prefix-cache hits for hybrid (gated DeltaNet + attention) models through linear-attention state
// checkpoints, on the CPU with the qwen3_5_text and qwen3_next golden fixtures' architectures (synthetic
// weights): a longer prompt, a resent prompt and a continued conversation hit at the checkpoint boundary of
// the earlier prompt and answer bit for bit like an engine without the cache; a prompt that diverges before
// the checkpoint gets no hit; random concurrent traffic with few blocks and few checkpoint slots answers like
// the cache-off path and leaks no block or state slot; save_state/load_state copy every linear layer's slot.
#include <gtest/gtest.h>

#include <cstring>

#include "core/status.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

class HybridPrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridPrefixCache, HitsAtTheCheckpointAndAnswersLikeNoCache) {
  constexpr int32_t kBs = 8;
  auto m = fixture_model(GetParam());
  Runner ref_runner(*m, runner_opts(2, 32, 0, kBs), cpu_ctx());
  EngineOptions off{2, 32, {}, {}};
  off.prefix_cache = false;
  Engine ref(ref_runner, off);
  Runner runner(*m, runner_opts(2, 32, 0, kBs), cpu_ctx());
  ASSERT_EQ(runner.n_state_checkpoints(), 8);
  Engine eng(runner, EngineOptions{2, 32, {}, {}});
  ASSERT_TRUE(eng.stats().prefix_cache_enabled);

  const std::vector<int32_t> a = make_prompt(1, 70);  // checkpoint boundary floor(69 / 8) * 8 = 64
  struct Case {
    std::string name;
    std::vector<int32_t> prompt;
    int64_t cached;
  };
  const Answer first = ask(eng, a, 6);
  expect_same(first.tokens, ask(ref, a, 6).tokens, "A");
  EXPECT_EQ(first.cached, 0);
  std::vector<int32_t> a_out;
  for (const TokenOut& t : first.tokens) a_out.push_back(t.token);
  std::vector<int32_t> d(a.begin(), a.begin() + 40);  // shares 5 blocks of A, diverges before 64
  d = concat(d, make_prompt(3, 30));
  const std::vector<Case> cases = {
      {"B = A + 20 tokens", concat(a, make_prompt(2, 20)), 64},
      {"A resent", a, 64},
      // A + its answer + more: the KV hit reaches into A's answer (72 tokens), the checkpoint is at 64.
      {"A + answer + 12", concat(concat(a, a_out), make_prompt(4, 12)), 64},
      {"D diverges at 40", d, 0},
      {"D resent", d, 64},
  };
  for (const Case& c : cases) {
    const Answer got = ask(eng, c.prompt, 6);
    expect_same(got.tokens, ask(ref, c.prompt, 6).tokens, c.name);
    EXPECT_EQ(got.cached, c.cached) << c.name;
  }
  const EngineStats st = eng.stats();
  EXPECT_EQ(st.prefix_cache_hit_tokens, 4 * 64);
  // Every hit above resumed its linear-attention state from a checkpoint, and /stats sees them.
  EXPECT_GT(st.state_checkpoint_slots, 0);
  EXPECT_GE(st.state_checkpoint_hits, 4);
  EXPECT_GE(st.state_checkpoint_saves, st.state_checkpoint_entries);
  EXPECT_GT(st.state_checkpoint_entries, 0);
  EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridPrefixCache, ::testing::Values("qwen3_5_text", "qwen3_next"));

TEST(HybridPrefixCache, RandomTrafficAnswersLikeNoCacheAndLeaksNothing) {
  auto m = fixture_model("qwen3_5_text");
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;
  uint32_t rng = 12345;
  auto next = [&](uint32_t n) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
  };
  for (int i = 0; i < 24; ++i) {  // three shared stems, random cut points and random tails
    const std::vector<int32_t> stem = make_prompt(static_cast<int>(next(3)), 48);
    std::vector<int32_t> p(stem.begin(), stem.begin() + 4 + next(44));
    p = concat(p, make_prompt(100 + static_cast<int>(next(4)), 1 + static_cast<int>(next(24))));
    prompts.push_back(p);
    max_tokens.push_back(2 + next(10));
  }
  std::vector<std::vector<TokenOut>> want;
  {
    Runner r(*m, runner_opts(1, 64), cpu_ctx());
    EngineOptions off{1, 64, {}, {}};
    off.prefix_cache = false;
    Engine ref(r, off);
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(ask(ref, prompts[i], max_tokens[i]).tokens);
  }
  RunnerOptions o = runner_opts(4, 16, /*n_blocks=*/60, /*block=*/4);
  o.state_checkpoints = 3;  // fewer than the distinct boundaries: replacement happens
  Runner runner(*m, o, cpu_ctx(2));
  Engine eng(runner, EngineOptions{4, 16, {}, {}});
  for (int round = 0; round < 2; ++round) {  // the second round finds the first's cache and checkpoints
    std::vector<std::unique_ptr<Collector>> cs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest e;
      e.prompt = prompts[i];
      e.max_tokens = max_tokens[i];
      e.sampling.temperature = 0.0f;
      e.top_logprobs = 0;
      cs.push_back(std::make_unique<Collector>());
      eng.submit(std::move(e), cs.back()->sink());
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      ASSERT_TRUE(cs[i]->wait());
      cs[i]->expect_one_terminal();
      expect_same(cs[i]->token_outs(), want[i], "round " + std::to_string(round) + " request " + std::to_string(i));
    }
  }
  EXPECT_TRUE(eventually([&] { return eng.stats().requests_finished == 48; }));
  const EngineStats st = eng.stats();
  EXPECT_GT(st.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(st.kv_blocks_free, 60);
  EXPECT_EQ(runner.pool().n_free_state_slots(), 4);
}

TEST(HybridPrefixCache, NoCheckpointSlotsTurnTheCacheOff) {
  auto m = fixture_model("qwen3_5_text");
  RunnerOptions o = runner_opts(1, 32);
  o.state_checkpoints = 0;
  Runner runner(*m, o, cpu_ctx());
  EXPECT_EQ(runner.n_state_checkpoints(), 0);
  Engine eng(runner, EngineOptions{1, 32, {}, {}});
  EXPECT_FALSE(eng.stats().prefix_cache_enabled);
  const std::vector<int32_t> a = make_prompt(5, 30);
  ask(eng, a, 2);
  EXPECT_EQ(ask(eng, a, 2).cached, 0);
}

TEST(HybridPrefixCache, SaveAndLoadStateCopyEveryLinearLayer) {
  auto m = fixture_model("qwen3_next");
  RunnerOptions o = runner_opts(2, 32);
  o.state_checkpoints = 3;
  Runner runner(*m, o, cpu_ctx());
  ASSERT_EQ(runner.n_state_checkpoints(), 3);
  kv::BlockTable t0(runner.block_size()), t1(runner.block_size());
  ASSERT_TRUE(t0.acquire_state_slot(runner.pool()));
  ASSERT_TRUE(t1.acquire_state_slot(runner.pool()));
  std::vector<kv::BlockId> blocks;
  ASSERT_TRUE(runner.pool().allocate_n(t0.blocks_needed(12), blocks));
  for (auto b : blocks) t0.append(b);
  const std::vector<int32_t> toks = make_prompt(9, 12);
  SeqChunk c{&t0, toks.data(), 12, 0, SeqChunk::Logits::kLast};
  runner.step({&c, 1});
  const int32_t s0 = t0.state_slot(), s1 = t1.state_slot();
  auto slot_bytes = [&](int32_t slot) {
    std::vector<char> out;
    for (const auto& l : runner.state_storage().layers())
      for (const Tensor* t : {&l.conv, &l.recurrent}) {
        const size_t per = t->nbytes() / static_cast<size_t>(t->dim(0));
        const char* p = static_cast<const char*>(t->data) + static_cast<size_t>(slot) * per;
        out.insert(out.end(), p, p + per);
      }
    return out;
  };
  const std::vector<char> state = slot_bytes(s0);
  ASSERT_EQ(runner.state_storage().layers().size(), 2u);
  ASSERT_NE(state, slot_bytes(s1)) << "the step changed slot s0";
  runner.save_state(s0, 2);
  runner.load_state(2, s1);
  EXPECT_EQ(slot_bytes(s1), state);
  EXPECT_THROW(runner.save_state(s0, 3), Error);
  EXPECT_THROW(runner.load_state(0, 2), Error);
  t0.release_all(runner.pool());
  t1.release_all(runner.pool());
}

}  // namespace
}  // namespace bunsen::engine::test
