// Linear-attention state checkpoints on CUDA (qwen3_5_text fixture, bf16 weights on the GPU): save_state and
// load_state copy every linear layer's conv + recurrent slot device to device on the runner's stream; a
// resent prompt hits the prefix cache at its checkpoint boundary and, resuming from the restored state,
// answers bit for bit like its first run (the same chunk [b, n) over the same K/V and the same state).
// Skips without a GPU.
#include <cuda_runtime.h>

#include <cstring>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "engine_cuda_util.h"
#include "engine/engine.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

std::vector<char> slot_bytes(const kv::StateStorage& st, int32_t slot) {
  std::vector<char> out;
  for (const auto& l : st.layers())
    for (const Tensor* t : {&l.conv, &l.recurrent}) {
      const size_t per = t->nbytes() / static_cast<size_t>(t->dim(0));
      std::vector<char> host(per);
      EXPECT_EQ(cudaMemcpy(host.data(), static_cast<const char*>(t->data) + static_cast<size_t>(slot) * per, per,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      out.insert(out.end(), host.begin(), host.end());
    }
  return out;
}

TEST_F(CudaTest, StateCheckpointSaveAndLoadCopyEveryLinearLayer) {
  auto m = load_cuda("qwen3_5_text");
  engine::RunnerOptions ro;
  ro.max_context = 64;
  ro.max_tokens_per_step = 32;
  ro.max_seqs = 2;
  ro.max_logit_rows = 2;
  ro.block_size = 4;
  ro.state_checkpoints = 2;
  engine::Runner runner(*m, ro);
  ASSERT_EQ(runner.n_state_checkpoints(), 2);
  kv::BlockTable t0(4), t1(4);
  ASSERT_TRUE(t0.acquire_state_slot(runner.pool()));
  ASSERT_TRUE(t1.acquire_state_slot(runner.pool()));
  std::vector<kv::BlockId> blocks;
  ASSERT_TRUE(runner.pool().allocate_n(t0.blocks_needed(12), blocks));
  for (auto b : blocks) t0.append(b);
  std::vector<int32_t> toks;
  for (int i = 0; i < 12; ++i) toks.push_back(3 + i * 7);
  engine::SeqChunk c{&t0, toks.data(), 12, 0, engine::SeqChunk::Logits::kLast};
  runner.step({&c, 1});
  const std::vector<char> state = slot_bytes(runner.state_storage(), t0.state_slot());
  ASSERT_NE(state, slot_bytes(runner.state_storage(), t1.state_slot()));
  runner.save_state(t0.state_slot(), 1);
  runner.load_state(1, t1.state_slot());
  kernels::synchronize(runner.context());
  EXPECT_EQ(slot_bytes(runner.state_storage(), t1.state_slot()), state);
  t0.release_all(runner.pool());
  t1.release_all(runner.pool());
}

TEST_F(CudaTest, ResentPromptResumesFromItsStateCheckpointBitForBit) {
  auto m = load_cuda("qwen3_5_text");
  engine::RunnerOptions ro;
  ro.max_context = 128;
  ro.max_tokens_per_step = 64;
  ro.max_seqs = 2;
  ro.max_logit_rows = 2;
  ro.block_size = 8;
  engine::Runner runner(*m, ro);
  engine::EngineOptions eo;
  eo.max_batch = 2;
  eo.max_num_batched_tokens = 64;
  engine::Engine e(runner, eo);
  ASSERT_TRUE(e.stats().prefix_cache_enabled);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back((i * 37 + 11) % 1000);
  const AskResult first = ask(e, prompt);
  const AskResult again = ask(e, prompt);
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(again.cached, 64);  // floor(69 / 8) * 8
  ASSERT_EQ(first.tokens.size(), 8u);
  ASSERT_EQ(again.tokens.size(), first.tokens.size());
  for (size_t i = 0; i < first.tokens.size(); ++i) {
    EXPECT_EQ(again.tokens[i].token, first.tokens[i].token) << i;
    EXPECT_EQ(std::memcmp(&again.tokens[i].logprob, &first.tokens[i].logprob, sizeof(float)), 0) << i;
  }
  EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
}

}  // namespace
}  // namespace bunsen::golden
