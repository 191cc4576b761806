// Engine + prefix cache on the CPU (tiny synthetic model): a prompt whose prefix comes from the cache must
// give the same tokens and bit-identical logprobs as without the cache (CPU kernels are batch-invariant,
// so the K/V of a block is a pure function of the tokens up to it); Usage.cached_tokens reports the hit;
// other namespaces (salt, model/KV scheme) miss; stats count entries/hits/misses; blocks are not leaked.
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

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // chosen-token logprob of each step (the whole logits row feeds it)
  Usage usage;
};

EngineRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t salt = 0) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 3;  // takes the full-logits path: logprobs compare the whole forward, not just argmax
  r.ignore_eos = true;
  r.cache_salt = salt;
  return r;
}

Result run(Engine& e, EngineRequest req) {
  Collector c;
  e.submit(std::move(req), c.sink());
  EXPECT_TRUE(c.wait());
  c.expect_one_terminal();
  Result r;
  for (const TokenOut& t : c.token_outs()) {
    r.tokens.push_back(t.token);
    r.logprobs.push_back(t.logprob);
  }
  EXPECT_EQ(c.last().kind, EngineEvent::Kind::kFinish);
  r.usage = c.last().usage;
  return r;
}

void expect_bitwise_equal(const Result& a, const Result& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.logprobs[i], &b.logprobs[i], sizeof(float)), 0)
        << "logprob " << i << ": " << a.logprobs[i] << " vs " << b.logprobs[i];
}

EngineOptions opts(bool cache, int64_t batch = 2, int64_t step = 16) {
  EngineOptions o;
  o.max_batch = batch;
  o.max_num_batched_tokens = step;
  o.prefix_cache = cache;
  return o;
}

// Reference outputs from an engine without the cache.
Result reference(EngineRequest req) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, opts(false));
  return run(e, std::move(req));
}

TEST(EnginePrefixCache, SamePromptTwiceHitsAndMatchesBitForBit) {
  const auto prompt = make_prompt(3, 23);
  const Result ref = reference(greedy(prompt, 8));
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, opts(true));
  const Result first = run(e, greedy(prompt, 8));
  EXPECT_EQ(first.usage.cached_tokens, 0);
  const Result second = run(e, greedy(prompt, 8));
  // Every full block but the one holding the last prompt token: (23 - 1) / 4 * 4 = 20 tokens.
  EXPECT_EQ(second.usage.cached_tokens, 20);
  EXPECT_EQ(second.usage.prompt_tokens, 23);
  expect_bitwise_equal(first, ref);
  expect_bitwise_equal(second, ref);
  const EngineStats st = e.stats();
  EXPECT_TRUE(st.prefix_cache_enabled);
  EXPECT_EQ(st.prefix_cache_hits, 5);
  EXPECT_EQ(st.prefix_cache_misses, 5);  // the first request looked up 5 blocks and found none
  EXPECT_EQ(st.prefix_cache_hit_tokens, 20);
  EXPECT_DOUBLE_EQ(st.prefix_cache_hit_ratio, 20.0 / 46.0);
  // Both requests computed 23 + 8 - 1 = 30 tokens: 7 full blocks, cached once (the second one's are
  // the same blocks or duplicates).
  EXPECT_EQ(st.prefix_cache_entries, 7);
  EXPECT_GT(st.prefix_cache_bytes, 0);
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);  // cached blocks are evictable: allocatable
  // Prompt tokens served from the cache are not counted as computed.
  EXPECT_EQ(st.prompt_tokens, 23 + 3);
}

TEST(EnginePrefixCache, ConversationExtensionHitsPromptAndGeneratedBlocks) {
  const auto prompt = make_prompt(5, 21);
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, opts(true));
  const Result first = run(e, greedy(prompt, 7));
  // Next turn: the previous prompt, the reply, then new tokens.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  for (int32_t t : make_prompt(9, 6)) next.push_back(t);
  const Result second = run(e, greedy(next, 7));
  // The first request computed 21 + 7 - 1 = 27 tokens: 6 full blocks (24 tokens) are reusable.
  EXPECT_EQ(second.usage.cached_tokens, 24);
  EXPECT_GE(second.usage.cached_tokens, static_cast<int64_t>(prompt.size()) / kBlock * kBlock);
  expect_bitwise_equal(second, reference(greedy(next, 7)));
}

TEST(EnginePrefixCache, OtherNamespaceMisses) {
  const auto prompt = make_prompt(7, 19);
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, opts(true));
  run(e, greedy(prompt, 4, /*salt=*/1));
  EXPECT_EQ(run(e, greedy(prompt, 4, /*salt=*/2)).usage.cached_tokens, 0);
  EXPECT_EQ(run(e, greedy(prompt, 4, /*salt=*/0)).usage.cached_tokens, 0);
  EXPECT_EQ(run(e, greedy(prompt, 4, /*salt=*/1)).usage.cached_tokens, 16);

  // The derived namespace changes with the KV dtype, the block size and the model's shape.
  const model::ModelConfig& cfg = m->config();
  const uint64_t base = cache_namespace_of(cfg, DType::kF32, 16);
  EXPECT_EQ(base, cache_namespace_of(cfg, DType::kF32, 16));
  EXPECT_NE(base, cache_namespace_of(cfg, DType::kBF16, 16));
  EXPECT_NE(base, cache_namespace_of(cfg, DType::kF32, 32));
  // The quantized-KV scheme is part of it: off == base; int8 != int4 != base.
  const std::vector<kv::KvQuantSpec> off(static_cast<size_t>(cfg.n_layers)), int8(off.size(), kv::KvQuantSpec{8, 64}),
      int4(off.size(), kv::KvQuantSpec{4, 64});
  EXPECT_EQ(base, cache_namespace_of(cfg, DType::kF32, 16, off));
  EXPECT_NE(base, cache_namespace_of(cfg, DType::kF32, 16, int8));
  EXPECT_NE(cache_namespace_of(cfg, DType::kF32, 16, int8), cache_namespace_of(cfg, DType::kF32, 16, int4));
  // fp8 (e4m3) codes have int8's sizes but another meaning: a namespace of their own.
  const std::vector<kv::KvQuantSpec> fp8(off.size(), kv::KvQuantSpec{8, 64, true});
  EXPECT_NE(cache_namespace_of(cfg, DType::kF32, 16, fp8), cache_namespace_of(cfg, DType::kF32, 16, int8));
  EXPECT_NE(cache_namespace_of(cfg, DType::kF32, 16, fp8), base);
  model::ModelConfig other = cfg;
  other.rope.theta *= 2;
  EXPECT_NE(base, cache_namespace_of(other, DType::kF32, 16));
  other = cfg;
  other.n_layers += 1;
  EXPECT_NE(base, cache_namespace_of(other, DType::kF32, 16));
}

TEST(EnginePrefixCache, DisabledNeverReportsCachedTokens) {
  const auto prompt = make_prompt(2, 17);
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, opts(false));
  run(e, greedy(prompt, 3));
  EXPECT_EQ(run(e, greedy(prompt, 3)).usage.cached_tokens, 0);
  const EngineStats st = e.stats();
  EXPECT_FALSE(st.prefix_cache_enabled);
  EXPECT_EQ(st.prefix_cache_entries, 0);
  EXPECT_EQ(st.prefix_cache_hits, 0);
}

// Requests sharing a "system prompt" run batched in a small pool (evictions and preemptions happen);
// every output equals the no-cache output bit for bit and no block leaks.
TEST(EnginePrefixCache, BatchedSharedPrefixesUnderPressureMatchNoCache) {
  const auto system = make_prompt(11, 14);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> p = system;
    for (int32_t t : make_prompt(20 + i % 4, 3 + i % 5)) p.push_back(t);
    reqs.push_back(greedy(p, 6 + i % 3));
  }
  std::vector<Result> refs;
  for (const EngineRequest& r : reqs) refs.push_back(reference(r));

  auto m = tiny_model();
  Runner runner(*m, runner_opts(4, 24, /*n_blocks=*/20, kBlock), cpu_ctx());
  {
    Engine e(runner, opts(true, 4, 24));
    for (int round = 0; round < 2; ++round) {
      std::vector<std::unique_ptr<Collector>> cs;
      for (const EngineRequest& r : reqs) {
        cs.push_back(std::make_unique<Collector>());
        e.submit(r, cs.back()->sink());
      }
      int64_t cached = 0;
      for (size_t i = 0; i < cs.size(); ++i) {
        ASSERT_TRUE(cs[i]->wait());
        cs[i]->expect_one_terminal();
        Result got;
        for (const TokenOut& t : cs[i]->token_outs()) {
          got.tokens.push_back(t.token);
          got.logprobs.push_back(t.logprob);
        }
        expect_bitwise_equal(got, refs[i]);
        cached += cs[i]->last().usage.cached_tokens;
      }
      if (round == 1) {
        EXPECT_GT(cached, 0);
      }
    }
    const EngineStats st = e.stats();
    EXPECT_GT(st.prefix_cache_hits, 0);
    EXPECT_GT(st.prefix_cache_evictions, 0);
    EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
  }
  EXPECT_EQ(runner.pool().n_free(), runner.pool().n_blocks()) << "the engine's cache returned its blocks";
}

}  // namespace
}  // namespace bunsen::engine
