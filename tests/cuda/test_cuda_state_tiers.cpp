// Linear-attention state checkpoints through the RAM and SSD tiers on CUDA (qwen3_5_text fixture, bf16 weights
// on the GPU): checkpoint slots round-trip through pinned host memory on the runner's stream; a NEW runner and
// engine on the same --ssd-cache directory (a restart) restores the K/V blocks and the checkpoint through the
// restore pool's staging ring into a reserved device checkpoint slot and answers bit for bit like the first
// run (the same chunk [64, 70) over the same K/V and state); with two checkpoint slots, a replaced checkpoint
// comes back from the pinned RAM tier. Skips without a GPU.
#include <cuda_runtime.h>

#include <cstring>

#include "../golden/golden_file.h"
#include "../support/scratch_dir.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine_cuda_util.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

engine::RunnerOptions runner_options(int32_t checkpoints) {
  engine::RunnerOptions ro;
  ro.max_context = 128;
  ro.max_tokens_per_step = 64;
  ro.max_seqs = 2;
  ro.max_logit_rows = 2;
  ro.block_size = 8;
  ro.state_checkpoints = checkpoints;
  return ro;
}

void expect_same(const AskResult& got, const AskResult& want, const char* what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].token, want.tokens[i].token) << what << " " << i;
    EXPECT_EQ(std::memcmp(&got.tokens[i].logprob, &want.tokens[i].logprob, sizeof(float)), 0) << what << " " << i;
  }
}

std::vector<int32_t> prompt_of(int seed, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 101 + i * 37 + 11) % 1000);
  return p;
}

TEST_F(CudaTest, StateCheckpointRoundTripsThroughHostMemory) {
  auto m = load_cuda("qwen3_5_text");
  engine::Runner runner(*m, runner_options(2));
  kv::BlockTable t(8);
  ASSERT_TRUE(t.acquire_state_slot(runner.pool()));
  std::vector<kv::BlockId> blocks;
  ASSERT_TRUE(runner.pool().allocate_n(t.blocks_needed(12), blocks));
  for (auto b : blocks) t.append(b);
  const std::vector<int32_t> toks = prompt_of(1, 12);
  engine::SeqChunk c{&t, toks.data(), 12, 0, engine::SeqChunk::Logits::kLast};
  runner.step({&c, 1});
  runner.save_state(t.state_slot(), 0);
  const size_t bytes = runner.checkpoint_bytes();
  ASSERT_GT(bytes, 0u);
  kernels::DeviceMemory host = kernels::DeviceMemory::pinned_host(bytes);
  std::memset(host.data(), 0, bytes);
  runner.checkpoint_to_host(0, host.data());
  runner.checkpoint_from_host(host.data(), 1);
  kernels::synchronize(runner.context());
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes; ++i) nonzero += static_cast<const unsigned char*>(host.data())[i] != 0;
  EXPECT_GT(nonzero, bytes / 4) << "the state was copied out";
  for (int32_t slot : {0, 1}) {  // both checkpoint slots now hold the same bytes as the host copy
    size_t at = 0;
    for (const std::span<std::byte> p : runner.checkpoint_parts(slot)) {
      std::vector<std::byte> dev(p.size());
      ASSERT_EQ(cudaMemcpy(dev.data(), p.data(), p.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(dev.data(), static_cast<const std::byte*>(host.data()) + at, p.size()), 0) << slot;
      at += p.size();
    }
    EXPECT_EQ(at, bytes);
  }
  t.release_all(runner.pool());
}

TEST_F(CudaTest, HybridRestartHitsFromSsdBitForBit) {
  auto m = load_cuda("qwen3_5_text");
  const test_support::ScratchDir dir("bunsen-cuda-ssd-state");
  const std::vector<int32_t> prompt = prompt_of(2, 70);
  AskResult first, again;
  engine::EngineStats st;
  for (int run = 0; run < 2; ++run) {  // a fresh runner + engine each time: empty device cache
    engine::Runner runner(*m, runner_options(8));
    engine::EngineOptions eo;
    eo.max_batch = 2;
    eo.max_num_batched_tokens = 64;
    eo.ssd_cache_dir = dir.str();
    engine::Engine e(runner, eo);
    (run == 0 ? first : again) = ask(e, prompt);
    e.shutdown();
    st = e.stats();
  }
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(again.cached, 64);  // floor(69 / 8) * 8, from disk
  EXPECT_EQ(st.ssd_cache_hits, 1);
  EXPECT_EQ(st.ssd_cache_quarantined, 0);
  expect_same(again, first, "restart");
}

TEST_F(CudaTest, HybridReplacedCheckpointComesBackFromPinnedRam) {
  auto m = load_cuda("qwen3_5_text");
  engine::Runner runner(*m, runner_options(2));
  engine::EngineOptions eo;
  eo.max_batch = 2;
  eo.max_num_batched_tokens = 64;
  eo.ram_cache_bytes = 64u << 20;
  engine::Engine e(runner, eo);
  const std::vector<int32_t> a = prompt_of(3, 70);
  const AskResult first = ask(e, a);
  for (int i = 4; i < 7; ++i) ask(e, prompt_of(i, 40 + i));  // three more checkpoints replace A's
  const AskResult again = ask(e, a);
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(again.cached, 64);
  const engine::EngineStats st = e.stats();
  EXPECT_GE(st.state_checkpoint_evictions, 3);
  EXPECT_EQ(st.ram_cache_hits, 1);
  expect_same(again, first, "from RAM");
  EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
}

}  // namespace
}  // namespace bunsen::golden
