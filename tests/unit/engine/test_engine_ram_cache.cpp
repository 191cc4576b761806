// Engine + RAM tier of the prefix cache on the CPU (tiny synthetic model; on CUDA the same code copies with
// 2-D async copies on the runner's stream): a request's blocks, evicted from a small KV pool by later
// requests, are kept in the RAM tier; the same request again restores them, reports them in
// Usage.cached_tokens and answers bit for bit like an engine without any cache.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace bunsen::engine {
namespace {

using test::Collector;
using test::cpu_ctx;
using test::make_prompt;
using test::runner_opts;
using test::tiny_model;

constexpr int32_t kBlock = 4;

using Result = test::GreedyResult;

Result run(Engine& e, const std::vector<int32_t>& prompt) { return test::run_greedy(e, prompt, 4); }

TEST(EngineRamCache, EvictedBlocksComeBackFromRamBitForBit) {
  const std::vector<int32_t> a = make_prompt(1, 40), b = make_prompt(2, 40), c = make_prompt(3, 40);
  // Reference: no prefix cache at all.
  auto m0 = tiny_model();
  Runner r0(*m0, runner_opts(1, 16, 0, kBlock), cpu_ctx());
  EngineOptions o0;
  o0.max_batch = 1;
  o0.max_num_batched_tokens = 16;
  o0.prefix_cache = false;
  Engine e0(r0, o0);
  const Result want = run(e0, a);
  e0.shutdown();

  // A pool of 20 blocks: each request (44 tokens = 11 blocks) evicts most of the previous one's cache.
  auto m = tiny_model();
  Runner runner(*m, runner_opts(1, 16, 20, kBlock), cpu_ctx());
  EngineOptions o;
  o.max_batch = 1;
  o.max_num_batched_tokens = 16;
  o.ram_cache_bytes = 64u << 20;
  Engine e(runner, o);
  const Result first = run(e, a);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  run(e, b);
  run(e, c);
  const EngineStats before = e.stats();
  EXPECT_TRUE(before.ram_cache_enabled);
  EXPECT_GT(before.ram_cache_stores, 0) << "the small pool evicted cached blocks into RAM";
  EXPECT_EQ(before.ram_cache_hits, 0);

  const Result again = run(e, a);
  const int64_t full = (static_cast<int64_t>(a.size()) - 1) / kBlock * kBlock;  // the last token always runs
  EXPECT_EQ(again.usage.cached_tokens, full);
  const EngineStats after = e.stats();
  EXPECT_EQ(after.ram_cache_hits, 1);
  EXPECT_GT(after.ram_cache_hit_tokens, 0);
  EXPECT_LE(after.ram_cache_hit_tokens, full);
  for (const Result* r : {&first, &again}) {
    ASSERT_EQ(r->tokens, want.tokens);
    ASSERT_EQ(r->logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < want.logprobs.size(); ++i)
      EXPECT_EQ(std::memcmp(&r->logprobs[i], &want.logprobs[i], sizeof(float)), 0) << "logprob " << i;
  }
  e.shutdown();
}

}  // namespace
}  // namespace bunsen::engine
