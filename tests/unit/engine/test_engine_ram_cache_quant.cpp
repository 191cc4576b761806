// Engine + RAM tier of the prefix cache over a quantized KV cache (int8, int4, fp8; CPU, tiny synthetic
// model): blocks evicted from a small pool and restored from RAM must bring their scale/bias params along
// with the codes (the tier copies every per-block tensor of a layer), so the restored request answers bit
// for bit like an engine without any cache over the same quantized KV.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "core/status.h"
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

RunnerOptions quant(RunnerOptions o, const model::Model& m, kv::KvQuantSpec spec) {
  o.kv_quant.assign(m.kv_layout().size(), spec);
  return o;
}

TEST(EngineRamCacheQuant, RestoredQuantizedBlocksBringTheirParams) {
  const std::vector<int32_t> a = make_prompt(1, 40), b = make_prompt(2, 40), c = make_prompt(3, 40);
  for (const kv::KvQuantSpec spec : {kv::KvQuantSpec{8, 64}, kv::KvQuantSpec{4, 64}, kv::KvQuantSpec{8, 0, true}}) {
    SCOPED_TRACE(strfmt("bits %d fp8 %d", spec.bits, spec.fp8 ? 1 : 0));
    auto m0 = tiny_model();
    Runner r0(*m0, quant(runner_opts(1, 16, 0, kBlock), *m0, spec), cpu_ctx());
    ASSERT_TRUE(r0.storage().quantized());
    EngineOptions o0;
    o0.max_batch = 1;
    o0.max_num_batched_tokens = 16;
    o0.prefix_cache = false;
    Engine e0(r0, o0);
    const Result want = run(e0, a);
    e0.shutdown();

    auto m = tiny_model();
    Runner runner(*m, quant(runner_opts(1, 16, 20, kBlock), *m, spec), cpu_ctx());
    EngineOptions o;
    o.max_batch = 1;
    o.max_num_batched_tokens = 16;
    o.ram_cache_bytes = 64u << 20;
    Engine e(runner, o);
    run(e, a);
    run(e, b);
    run(e, c);  // a's blocks are evicted to RAM, and their pool blocks reused (new codes and params)
    const Result again = run(e, a);
    EXPECT_GT(again.usage.cached_tokens, 0);
    EXPECT_EQ(e.stats().ram_cache_hits, 1);
    ASSERT_EQ(again.tokens, want.tokens);
    ASSERT_EQ(again.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < want.logprobs.size(); ++i)
      EXPECT_EQ(std::memcmp(&again.logprobs[i], &want.logprobs[i], sizeof(float)), 0) << "logprob " << i;
    e.shutdown();
  }
}

}  // namespace
}  // namespace bunsen::engine
