// ops.h's sample() on the CPU (its plain reference: a full sort per row) against sampling::sample, the host
// sampler (value bands, partial sorts): given the same RNG draw, the same token for every row and setting.
// The CUDA kernel is held to the reference in tests/cuda/test_cuda_sample.cpp.
#include <gtest/gtest.h>

#include "core/status.h"
#include "kernels/ops.h"
#include "sample_cases.h"
#include "sampling/sampler.h"

namespace bunsen::sampling::test {
namespace {

TEST(SampleOp, ReferenceDrawsWhatTheHostSamplerDraws) {
  kernels::Context ctx;
  SamplerScratch scratch;
  int64_t compared = 0;
  for (const SampleRowCase& row : sample_row_cases(/*large=*/true)) {
    const auto n = static_cast<int64_t>(row.logits.size());
    for (const kernels::SampleSpec& base : sample_specs()) {
      for (uint64_t seed : {1ull, 77ull, 123456789ull}) {
        SCOPED_TRACE(row.name + " T=" + std::to_string(base.temperature) +
                     " k=" + std::to_string(base.top_k) + " p=" + std::to_string(base.top_p) +
                     " min_p=" + std::to_string(base.min_p) + " seed=" + std::to_string(seed));
        Rng a(seed), b(seed);
        kernels::SampleSpec spec = base;
        spec.u = a.next_double();
        int32_t got = -2;
        kernels::sample(ctx, Tensor::view(&got, DType::kI32, {1}),
                        Tensor::view(const_cast<float*>(row.logits.data()), DType::kF32, {1, n}), {&spec, 1});
        SamplingParams p;
        p.temperature = base.temperature;
        p.top_k = base.top_k;
        p.top_p = base.top_p;
        p.min_p = base.min_p;
        ASSERT_EQ(got, sample(row.logits.data(), n, p, b, scratch));
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 500);
}

TEST(SampleOp, RowWithoutCandidatesIsMinusOneAndGreedyRowsAreRejected) {
  kernels::Context ctx;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, nan, -inf, 1.0f, 2.0f, 3.0f};
  int32_t out[2] = {5, 5};
  kernels::SampleSpec specs[2] = {{1.0f, 0, 1.0f, 0.0f, 0.5}, {1.0f, 0, 1.0f, 0.0f, 0.5}};
  kernels::sample(ctx, Tensor::view(out, DType::kI32, {2}), Tensor::view(x.data(), DType::kF32, {2, 3}),
                  specs);
  EXPECT_EQ(out[0], -1);
  EXPECT_GE(out[1], 0);
  specs[0].temperature = 0.0f;
  EXPECT_THROW(kernels::sample(ctx, Tensor::view(out, DType::kI32, {2}),
                               Tensor::view(x.data(), DType::kF32, {2, 3}), specs),
               Error);
  specs[0] = {1.0f, 1, 1.0f, 0.0f, 0.5};  // top_k 1 is greedy
  EXPECT_THROW(kernels::sample(ctx, Tensor::view(out, DType::kI32, {2}),
                               Tensor::view(x.data(), DType::kF32, {2, 3}), specs),
               Error);
  specs[0] = {1.0f, 0, 1.0f, 0.0f, 1.0};  // u must be < 1
  EXPECT_THROW(kernels::sample(ctx, Tensor::view(out, DType::kI32, {2}),
                               Tensor::view(x.data(), DType::kF32, {2, 3}), specs),
               Error);
}

}  // namespace
}  // namespace bunsen::sampling::test
