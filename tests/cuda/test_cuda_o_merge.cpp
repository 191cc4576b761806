// The split-KV merge inside the o-projection's launch (kernels::paged_attention_linear on a batch-1 CUDA
// decode step: gemv_merge.cuh's cluster prologue instead of the combine kernel) against the same op with the
// merge off (the slice kernel, combine_kernel, then the plain GEMV): the attention row and the projection bit
// for bit, over contexts of one slice (nothing to merge), a few, the default count for 8 kv heads and forced
// counts past one 32-slice load batch, head_dim 64 and 128 (k 896 and 4096, head counts not a multiple of the
// cluster), a sliding window, a bias and f32 / bf16 outputs; the launch counter tells the merging launch from
// the fallback. Model level: every Llama-like fixture decodes to the same logits with the merge on and off
// (split path, 3 slices), eagerly and from CUDA graphs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../golden/golden_file.h"
#include "../kernels/kernel_test_util.h"
#include "attention_test_util.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;
using kernels::test::DeviceTensor;

bool same_bytes(const DeviceTensor& a, const DeviceTensor& b) {
  const OwnedTensor x = a.download(), y = b.download();
  return x.tensor.nbytes() == y.tensor.nbytes() &&
         std::memcmp(x.tensor.data, y.tensor.data, x.tensor.nbytes()) == 0;
}

struct MergeCase {
  int64_t n_heads, n_kv_heads, head_dim, context;
  int forced_splits;  // 0: the launch chooses
  int window = 0;
  bool bias = false;
  DType out_dtype = DType::kBF16;
  int64_t n_out = 0;  // 0: n_heads * head_dim
};

class OMergeTest : public CudaTest {
 protected:
  void TearDown() override {
    if (kernels::cuda::device_count() > 0) {
      kernels::set_o_merge_for_testing(-1);
      kernels::test::reset_decode_switches();
    }
    CudaTest::TearDown();
  }
};

TEST_F(OMergeTest, MergeInTheProjectionEqualsCombineThenLinear) {
  const MergeCase cases[] = {
      {32, 8, 128, 1024, 0},                              // the 8B's attention at 1k: the default slices
      {32, 8, 128, 1, 0},                                 // one key: one slice, read from the row
      {32, 8, 128, 100, 0, 0, true, DType::kF32},         // a few slices, bias, f32 out
      {32, 8, 128, 3000, 40},                             // past one 32-slice load batch
      {14, 2, 64, 777, 0, 0, false, DType::kBF16, 1000},  // k = 896 (14 heads), an odd output width
      {14, 2, 64, 2500, 100, 0, true},                    // many slices
      {16, 4, 128, 900, 0, 256},                          // a sliding window
  };
  int merged_cases = 0;
  for (const MergeCase& c : cases) {
    SCOPED_TRACE(testing::Message() << c.n_heads << "x" << c.head_dim << " over " << c.n_kv_heads
                                    << " kv heads, context " << c.context << ", splits " << c.forced_splits
                                    << ", window " << c.window);
    kernels::test::Scenario s =
        kernels::test::decode_scenario(c.n_heads / c.n_kv_heads, c.head_dim, {c.context});
    s.n_kv_heads = c.n_kv_heads;
    s.n_heads = c.n_heads;
    s.params.sliding_window = c.window;
    kernels::test::set_decode_switches(0, 1, 2, 0);  // tensor cores, split path, combine kernel
    kernels::cuda::set_attention_splits_for_testing(c.forced_splits);
    std::mt19937 rng(static_cast<uint32_t>(977 + c.context));
    const kernels::test::Batch b = kernels::test::make_batch(s, rng);
    const kernels::test::DeviceBatch d = kernels::test::upload(b, DType::kBF16, rng);
    const int64_t k = c.n_heads * c.head_dim, n = c.n_out > 0 ? c.n_out : k;
    const DeviceTensor w =
        DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, {n, k}, rng, -0.05f, 0.05f).tensor);
    const DeviceTensor bias =
        c.bias ? DeviceTensor::upload(kernels::test::random_tensor(DType::kF32, {n}, rng).tensor)
               : DeviceTensor{};
    const OwnedTensor garbage_attn = d.out.download();
    const OwnedTensor garbage_out = kernels::test::random_tensor(c.out_dtype, {1, n}, rng);
    DeviceTensor attn[2], out[2];
    int64_t launches[2];
    for (int way : {0, 1}) {
      attn[way] = DeviceTensor::upload(garbage_attn.tensor);
      out[way] = DeviceTensor::upload(garbage_out.tensor);
      kernels::set_o_merge_for_testing(way);
      const int64_t before = kernels::cuda::o_merge_launches_for_testing();
      kernels::paged_attention_linear(ctx_, attn[way].tensor, d.q.tensor, d.cache(), d.meta(), s.params,
                                      out[way].tensor, w.tensor, c.bias ? bias.tensor : Tensor{});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      launches[way] = kernels::cuda::o_merge_launches_for_testing() - before;
    }
    EXPECT_EQ(launches[0], 0);
    if (c.context > 1) {
      EXPECT_EQ(launches[1], 1) << "the merging launch did not run";
      merged_cases += launches[1] == 1;
    }
    EXPECT_TRUE(same_bytes(attn[0], attn[1])) << "attention rows differ";
    EXPECT_TRUE(same_bytes(out[0], out[1])) << "projections differ";
    // And the row is the attention (not a shared failure of both ways).
    kernels::test::expect_close(attn[1].download().tensor, kernels::test::reference_out(b, s).tensor,
                                kernels::test::tolerance(DType::kBF16, 1e-4f), "attention row");
  }
  EXPECT_GE(merged_cases, 6);
}

TEST_F(OMergeTest, FixturesDecodeBitForBitWithTheMergeOnAndOff) {
  int fixtures = 0;
  int64_t merges = 0;
  const std::vector<std::string> all = fixture_names();
  for (const std::string name :
       {"llama3", "llama_yarn", "mistral", "phi3", "qwen2", "granite", "smollm3", "qwen3", "qwen3_moe"}) {
    if (std::find(all.begin(), all.end(), name) == all.end()) continue;
    SCOPED_TRACE(name);
    ++fixtures;
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda_o_merge"), Device::cuda(0));
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size()), G = static_cast<int64_t>(greedy.size());
    for (bool graphs : {false, true}) {
      std::vector<float> got[2];
      for (int on : {0, 1}) {
        // The split path with 3 slices (tiny fixtures with 1-2 kv heads would take the cluster path).
        kernels::test::set_decode_switches(0, 1, 2, 0);
        kernels::cuda::set_attention_splits_for_testing(3);
        kernels::set_o_merge_for_testing(on);
        engine::RunnerOptions ro = runner_options(T, G + 8);
        ro.cuda_graphs = graphs;
        engine::Runner r(*m, ro);
        const int64_t before = kernels::cuda::o_merge_launches_for_testing();
        got[on] = decode_logits(r, ids, greedy);
        if (on == 1) merges += kernels::cuda::o_merge_launches_for_testing() - before;
      }
      kernels::set_o_merge_for_testing(-1);
      ASSERT_EQ(got[0].size(), got[1].size());
      EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0)
          << (graphs ? "graphs" : "eager") << ": merge on and off differ";
    }
  }
  EXPECT_GE(fixtures, 6);
  EXPECT_GT(merges, 0) << "no decode step merged in the projection";
}

}  // namespace
}  // namespace bunsen::golden
