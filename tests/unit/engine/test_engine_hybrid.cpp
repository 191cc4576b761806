// Engine and Runner with a hybrid (gated DeltaNet + attention) model on the CPU: batched, chunked-prefill and
// preempted runs give the single-sequence greedy tokens and logprobs bit for bit (the state slots carry each
// sequence's recurrence across steps and are reset by recompute, or restored from a state checkpoint by a
// prefix-cache hit: test_engine_hybrid_cache.cpp);
// every state slot comes back; a chunk without a state slot is refused.
#include <gtest/gtest.h>

#include "core/status.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

std::unique_ptr<model::Model> tiny_hybrid() {
  auto cfg = model::parse_config(R"({"model_type":"qwen3_5_text","vocab_size":301,"hidden_size":32,
    "intermediate_size":48,"num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,
    "layer_types":["linear_attention","full_attention","linear_attention"],"linear_conv_kernel_dim":4,
    "linear_key_head_dim":8,"linear_value_head_dim":8,"linear_num_key_heads":1,"linear_num_value_heads":2,
    "rope_parameters":{"rope_type":"default","rope_theta":10000.0,"partial_rotary_factor":0.5}})", "tiny hybrid");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg))
    ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, 11));
  return model::create_model(cfg, std::move(ws));
}

struct Req {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
};

EngineRequest greedy_request(const Req& r) {
  EngineRequest e;
  e.prompt = r.prompt;
  e.max_tokens = r.max_tokens;
  e.sampling.temperature = 0.0f;
  e.top_logprobs = 0;
  return e;
}

std::vector<std::unique_ptr<Collector>> run_all(Backend& b, const std::vector<Req>& reqs) {
  std::vector<std::unique_ptr<Collector>> cs;
  for (const auto& r : reqs) {
    cs.push_back(std::make_unique<Collector>());
    b.submit(greedy_request(r), cs.back()->sink());
  }
  for (auto& c : cs) {
    EXPECT_TRUE(c->wait());
    c->expect_one_terminal();
  }
  return cs;
}

// The reference: each request alone through generate() (one sequence, whole prompt in one step).
std::vector<std::vector<TokenOut>> run_alone(model::Model& m, const std::vector<Req>& reqs) {
  std::vector<std::vector<TokenOut>> out;
  Runner runner(m, runner_opts(1, 64), cpu_ctx());
  Engine engine(runner, EngineOptions{1, 64, {}, {}});
  for (const Req& r : reqs) {
    Collector c;
    engine.submit(greedy_request(r), c.sink());
    EXPECT_TRUE(c.wait());
    out.push_back(c.token_outs());
  }
  return out;
}

std::vector<Req> requests(int n) {
  std::vector<Req> v;
  for (int i = 0; i < n; ++i) v.push_back({make_prompt(i, 3 + (i * 11) % 40), 4 + (i * 5) % 17});
  return v;
}

void expect_same(const std::vector<std::unique_ptr<Collector>>& got, const std::vector<std::vector<TokenOut>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto a = got[i]->token_outs();
    ASSERT_EQ(a.size(), want[i].size()) << "request " << i;
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_EQ(a[t].token, want[i][t].token) << "request " << i << " token " << t;
      EXPECT_EQ(a[t].logprob, want[i][t].logprob) << "request " << i << " token " << t;
    }
  }
}

TEST(EngineHybrid, BatchedChunkedPrefillEqualsAlone) {
  auto m = tiny_hybrid();
  const std::vector<Req> reqs = requests(12);
  const auto alone = run_alone(*m, reqs);
  // 16 tokens per step: long prompts are prefilled over several steps, mixed with other sequences' decode rows.
  Runner runner(*m, runner_opts(8, 16), cpu_ctx(2));
  ASSERT_TRUE(runner.has_linear_state());
  EXPECT_EQ(runner.pool().n_state_slots(), 8);
  EXPECT_EQ(runner.storage().layers().size(), 1u);  // paged KV for the one attention layer only
  size_t per_seq = 0;
  for (const auto& l : m->kv_layout()) per_seq += l.state_bytes();
  EXPECT_EQ(per_seq, 2 * ((2 * 8 + 2 * 8) * 3 + 2 * 8 * 8) * sizeof(float));  // 2 DeltaNet layers
  EXPECT_GE(runner.state_storage().bytes(), 8 * per_seq);
  Engine engine(runner, EngineOptions{8, 16, {}, {}});
  EXPECT_TRUE(engine.stats().prefix_cache_enabled);  // hybrids: on, through linear-attention state checkpoints
  expect_same(run_all(engine, reqs), alone);
  EXPECT_TRUE(eventually([&] { return engine.stats().requests_finished == 12; }));
  EXPECT_EQ(runner.pool().n_free_state_slots(), 8);
  EXPECT_EQ(engine.stats().prefix_cache_hits, 0);
}

TEST(EngineHybrid, PreemptionRecomputesFromAZeroState) {
  auto m = tiny_hybrid();
  std::vector<Req> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back({make_prompt(50 + i, 20 + (i * 3) % 20), 20 + (i * 7) % 11});
  const auto alone = run_alone(*m, reqs);
  Runner runner(*m, runner_opts(6, 64, /*n_blocks=*/24, /*block=*/4), cpu_ctx());
  Engine engine(runner, EngineOptions{6, 64, {}, {}});
  expect_same(run_all(engine, reqs), alone);
  EXPECT_TRUE(eventually([&] { return engine.stats().requests_finished == 10; }));
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(runner.pool().n_free_state_slots(), 6);
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == 24; }));
}

TEST(RunnerHybrid, ChunkWithoutStateSlotIsRefusedAndSlotsAreBounded) {
  auto m = tiny_hybrid();
  Runner runner(*m, runner_opts(2, 16), cpu_ctx());
  kv::BlockTable table(runner.block_size());
  std::vector<kv::BlockId> blocks;
  ASSERT_TRUE(runner.pool().allocate_n(table.blocks_needed(4), blocks));
  for (auto b : blocks) table.append(b);
  const int32_t toks[4] = {1, 2, 3, 4};
  SeqChunk c{&table, toks, 4, 0, SeqChunk::Logits::kLast};
  EXPECT_THROW(runner.step({&c, 1}), Error);
  kv::BlockTable t2(runner.block_size()), t3(runner.block_size());
  EXPECT_TRUE(table.acquire_state_slot(runner.pool()));
  EXPECT_TRUE(t2.acquire_state_slot(runner.pool()));
  EXPECT_FALSE(t3.acquire_state_slot(runner.pool()));  // max_seqs slots only
  EXPECT_NO_THROW(runner.step({&c, 1}));
  table.release_all(runner.pool());
  EXPECT_EQ(table.state_slot(), -1);
  EXPECT_TRUE(t3.acquire_state_slot(runner.pool()));
  EXPECT_THROW(runner.pool().release_state_slot(7), Error);
  t2.release_all(runner.pool());
  t3.release_all(runner.pool());
  EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
}

}  // namespace
}  // namespace bunsen::engine::test
