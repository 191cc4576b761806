// Engine and Runner with a sliding-window block space (RunnerOptions::sliding_kv) on tiny Gemma 3 and Gemma 4
// models (window 6-8, block size 4) on the CPU: sliding layers get their own smaller storage, KV-shared
// layers follow their source, and sequences decoded far past the window, batched with chunked prefill, with
// prefix-cache hits and with a sliding pool small enough to force waiting/preemption, give the greedy tokens
// and logprobs of the same requests run alone with release off, bit for bit; nothing leaks.
#include <gtest/gtest.h>

#include <cstring>

#include "core/status.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

std::unique_ptr<model::Model> build(const std::string& json, uint64_t seed) {
  auto cfg = model::parse_config(json, "tiny sliding");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg))
    ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, seed));
  return model::create_model(cfg, std::move(ws));
}

std::unique_ptr<model::Model> tiny_gemma3() {
  return build(R"({"model_type":"gemma3_text","vocab_size":301,"hidden_size":32,"intermediate_size":48,
    "num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,
    "query_pre_attn_scalar":16,"rms_norm_eps":1e-6,"sliding_window":8,"max_position_embeddings":256,
    "layer_types":["sliding_attention","sliding_attention","full_attention","sliding_attention"],
    "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"tie_word_embeddings":true})", 21);
}

std::unique_ptr<model::Model> tiny_gemma4() {
  return build(R"({"model_type":"gemma4_text","vocab_size":301,"hidden_size":32,
    "intermediate_size":48,"num_hidden_layers":5,"num_attention_heads":2,"num_key_value_heads":2,"head_dim":16,
    "global_head_dim":32,"num_global_key_value_heads":1,"attention_k_eq_v":true,"sliding_window":6,
    "layer_types":["sliding_attention","full_attention","sliding_attention","sliding_attention","full_attention"],
    "num_kv_shared_layers":2,"hidden_size_per_layer_input":8,"vocab_size_per_layer_input":301,
    "final_logit_softcapping":30.0,"tie_word_embeddings":true})", 13);
}

using test::expect_same_bits;
using test::GreedyResult;
using test::run_greedy_batch;

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> v;
  for (int i = 0; i < n; ++i) v.push_back(make_prompt(i, 3 + (i * 13) % 34));
  return v;
}

constexpr int64_t kGen = 40;  // far past every window

// Each prompt alone, whole prompt in one step, no prefix cache, no sliding space (full-length KV).
std::vector<GreedyResult> alone(model::Model& m, const std::vector<std::vector<int32_t>>& ps) {
  std::vector<GreedyResult> out;
  Runner runner(m, runner_opts(1, 64), cpu_ctx());
  EXPECT_FALSE(runner.has_sliding_space());
  EngineOptions eo{1, 64, {}, {}};
  eo.prefix_cache = false;
  Engine engine(runner, eo);
  for (const auto& p : ps) out.push_back(run_greedy_batch(engine, {p}, kGen)[0]);
  return out;
}

RunnerOptions sliding_opts(int64_t batch, int64_t step, int32_t n_sliding = 0) {
  RunnerOptions o = runner_opts(batch, step);
  o.sliding_kv = true;
  o.n_sliding_blocks = n_sliding;
  return o;
}

TEST(RunnerSliding, SlidingLayersGetTheirOwnSpace) {
  auto m = tiny_gemma3();
  Runner runner(*m, sliding_opts(4, 16), cpu_ctx());
  ASSERT_TRUE(runner.has_sliding_space());
  EXPECT_EQ(runner.sliding_window(), 8);
  ASSERT_NE(runner.sliding_storage(), nullptr);
  EXPECT_EQ(runner.storage().layers().size(), 1u);             // the full-attention layer
  EXPECT_EQ(runner.sliding_storage()->layers().size(), 3u);     // the sliding ones
  EXPECT_EQ(runner.sliding_pool().n_blocks(), sliding_pool_blocks(8, 4, 4, 16));
  EXPECT_LT(runner.sliding_pool().n_blocks(), runner.pool().n_blocks());
  EXPECT_EQ(owned_kv_shapes(m->kv_layout(), KvSpace::kSliding).size(), 3u);
  EXPECT_EQ(owned_kv_shapes(m->kv_layout(), KvSpace::kFull).size(), 1u);
  EXPECT_THROW(Runner(*m, sliding_opts(4, 16, /*n_sliding=*/3), cpu_ctx()), bunsen::Error);  // < ceil(8/4) + 2

  auto g4 = tiny_gemma4();  // KV-shared layers read their source's space; the shared ones own nothing
  Runner r4(*g4, sliding_opts(2, 16), cpu_ctx());
  ASSERT_TRUE(r4.has_sliding_space());
  EXPECT_EQ(r4.storage().layers().size(), 1u);
  EXPECT_EQ(r4.sliding_storage()->layers().size(), 2u);
  EXPECT_EQ(r4.sliding_window(), 6);

  Runner off(*m, runner_opts(4, 16), cpu_ctx());  // sliding_kv off: one space, as before
  EXPECT_FALSE(off.has_sliding_space());
  EXPECT_EQ(off.storage().layers().size(), 4u);
  EXPECT_EQ(off.sliding_pool().n_blocks(), 0);
}

TEST(RunnerSliding, ChunkWithoutSlidingTableIsAnError) {
  auto m = tiny_gemma3();
  Runner runner(*m, sliding_opts(1, 16), cpu_ctx());
  kv::BlockTable table(runner.block_size());
  table.append(*runner.pool().allocate());
  const std::vector<int32_t> ids = {1, 2, 3};
  SeqChunk c{&table, ids.data(), 3, 0, SeqChunk::Logits::kLast};
  EXPECT_THROW(runner.step({&c, 1}), bunsen::Error);
}

void batched_equals_alone(model::Model& m, int32_t n_sliding) {
  const auto ps = prompts(8);
  const auto want = alone(m, ps);
  Runner runner(m, sliding_opts(4, 16, n_sliding), cpu_ctx(2));  // prompts span several steps
  ASSERT_TRUE(runner.has_sliding_space());
  Engine engine(runner, EngineOptions{4, 16, {}, {}});
  const auto first = run_greedy_batch(engine, ps, kGen);
  for (size_t i = 0; i < ps.size(); ++i) ASSERT_NO_FATAL_FAILURE(expect_same_bits(first[i], want[i], i));
  // Each prompt twice more, short: the second run hits the prefix cache where the window blocks survived
  // (a long decode in between would have cycled them out of the sliding pool).
  int64_t cached = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      GreedyResult got = run_greedy_batch(engine, {ps[i]}, 4)[0];
      GreedyResult prefix = want[i];
      prefix.tokens.resize(4);
      prefix.logprobs.resize(4);
      ASSERT_NO_FATAL_FAILURE(expect_same_bits(got, prefix, i));
      if (k == 1) cached += got.usage.cached_tokens;
    }
  }
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.kv_sliding_blocks_total, runner.sliding_pool().n_blocks());
  EXPECT_EQ(st.kv_sliding_window, runner.sliding_window());
  EXPECT_EQ(st.kv_sliding_blocks_free, st.kv_sliding_blocks_total) << "every sliding block free or evictable";
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
  // A sliding pool smaller than 4 decoding sequences need (3 blocks each between steps) must preempt.
  if (n_sliding > 0) {
    EXPECT_GT(st.preemptions, 0);
  }
  engine.shutdown();
}

TEST(EngineSliding, Gemma3DecodesPastTheWindowLikeFullLengthKv) {
  auto m = tiny_gemma3();
  batched_equals_alone(*m, 0);
}

TEST(EngineSliding, Gemma3TightSlidingPool) {
  auto m = tiny_gemma3();  // 8 blocks: two sequences past the window at once, or one with a 16-token chunk
  batched_equals_alone(*m, 8);
}

TEST(EngineSliding, Gemma4SharedLayersDecodePastTheWindow) {
  auto m = tiny_gemma4();
  batched_equals_alone(*m, 0);
}

}  // namespace
}  // namespace bunsen::engine::test
