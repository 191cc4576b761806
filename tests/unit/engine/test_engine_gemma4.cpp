// Engine and Runner with a Gemma 4 model (KV-shared layers, per-layer head_dim, sliding window shorter than
// the prompts, PLE, MoE) on the CPU: the Runner allocates KV only for the layers that own it; batched,
// chunked-prefill runs and prefix-cache hits give the single-sequence greedy tokens and logprobs bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

std::unique_ptr<model::Model> tiny_gemma4() {
  auto cfg = model::parse_config(R"({"model_type":"gemma4_text","vocab_size":301,"hidden_size":32,
    "intermediate_size":48,"num_hidden_layers":5,"num_attention_heads":2,"num_key_value_heads":2,"head_dim":16,
    "global_head_dim":32,"num_global_key_value_heads":1,"attention_k_eq_v":true,"sliding_window":6,
    "layer_types":["sliding_attention","full_attention","sliding_attention","sliding_attention","full_attention"],
    "num_kv_shared_layers":2,"hidden_size_per_layer_input":8,"vocab_size_per_layer_input":301,
    "use_double_wide_mlp":true,"enable_moe_block":true,"num_experts":4,"top_k_experts":2,
    "moe_intermediate_size":16,"final_logit_softcapping":30.0,"tie_word_embeddings":true})", "tiny gemma4");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg))
    ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, 13));
  return model::create_model(cfg, std::move(ws));
}

using test::expect_same_bits;
using test::GreedyResult;
using test::run_greedy_batch;

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> v;
  for (int i = 0; i < n; ++i) v.push_back(make_prompt(i, 5 + (i * 11) % 30));
  return v;
}

// Each prompt alone, whole prompt in one step, no prefix cache.
std::vector<GreedyResult> alone(model::Model& m, const std::vector<std::vector<int32_t>>& ps, int64_t max_tokens) {
  std::vector<GreedyResult> out;
  Runner runner(m, runner_opts(1, 64), cpu_ctx());
  EngineOptions eo{1, 64, {}, {}};
  eo.prefix_cache = false;
  Engine engine(runner, eo);
  for (const auto& p : ps) out.push_back(run_greedy_batch(engine, {p}, max_tokens)[0]);
  return out;
}

TEST(RunnerGemma4, KvSharedLayersOwnNoCache) {
  auto m = tiny_gemma4();
  const auto layout = m->kv_layout();
  ASSERT_EQ(layout.size(), 5u);
  EXPECT_EQ(layout[3].shares_kv_with, 2);  // last sliding layer before the shared ones
  EXPECT_EQ(layout[4].shares_kv_with, 1);  // last full layer before the shared ones
  Runner runner(*m, runner_opts(2, 16), cpu_ctx());
  const auto& views = runner.storage().layers();
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(views[1].k.dim(3), 32);  // the global layer's own head_dim and KV heads
  EXPECT_EQ(views[1].k.dim(2), 1);
  EXPECT_EQ(views[0].k.dim(3), 16);
  EXPECT_EQ(owned_kv_shapes(layout).size(), 3u);
  const std::vector<kv::KvQuantSpec> q = {{8, 64}, {4, 64}, {8, 64}, {4, 64}, {8, 64}};
  const auto oq = owned_kv_quant(layout, q);
  ASSERT_EQ(oq.size(), 3u);
  EXPECT_EQ(oq[1].bits, 4);
  EXPECT_EQ(oq[2].bits, 8);
}

TEST(EngineGemma4, BatchedChunkedPrefillEqualsAlone) {
  auto m = tiny_gemma4();
  const auto ps = prompts(8);
  const auto want = alone(*m, ps, 12);
  Runner runner(*m, runner_opts(4, 16), cpu_ctx(2));  // 16 tokens per step: prompts span several steps
  EngineOptions eo{4, 16, {}, {}};
  eo.prefix_cache = false;
  Engine engine(runner, eo);
  const auto got = run_greedy_batch(engine, ps, 12);
  for (size_t i = 0; i < ps.size(); ++i) expect_same_bits(got[i], want[i], i);
}

TEST(EngineGemma4, PrefixCacheHitEqualsUncached) {
  auto m = tiny_gemma4();
  std::vector<int32_t> base = make_prompt(3, 22), longer = base;
  for (int32_t t : make_prompt(9, 7)) longer.push_back(t);
  const auto want = alone(*m, {longer}, 10);
  Runner runner(*m, runner_opts(2, 64), cpu_ctx());
  Engine engine(runner, EngineOptions{2, 64, {}, {}});
  run_greedy_batch(engine, {base}, 4);
  const GreedyResult hit = run_greedy_batch(engine, {longer}, 10)[0];
  EXPECT_GE(hit.usage.cached_tokens, 16);  // the base prompt's full blocks (block size 4)
  expect_same_bits(hit, want[0], 0);
}

}  // namespace
}  // namespace bunsen::engine::test
