// The CUDA sample() kernel (sample.cu) against kernels/ref's sample() and sampling::sample: the same token
// for every row of tests/unit/sampling/sample_cases.h under every setting and draw, one row per launch and
// many rows per launch (more than one launch's 64 specs), and the same token again on a second run. Skips
// without a GPU.
#include "../unit/sampling/sample_cases.h"
#include "cuda_test_util.h"
#include "sampling/sampler.h"

namespace bunsen::kernels::test {
namespace {

using sampling::test::sample_row_cases;
using sampling::test::sample_specs;
using sampling::test::SampleRowCase;

class CudaSampleTest : public CudaTest {};

// Under both histogram modes of the kernel (BUNSEN_SAMPLE_HIST): the same tokens.
TEST_F(CudaSampleTest, EveryRowAndSettingDrawsTheReferenceToken) {
  sampling::SamplerScratch scratch;
  int64_t compared = 0;
  for (int hist : {1, 0})
    for (const SampleRowCase& row : sample_row_cases(/*large=*/true)) {
      cuda::set_sample_hist_for_testing(hist);
      SCOPED_TRACE(hist == 1 ? "hist peers" : "hist first");
      const auto n = static_cast<int64_t>(row.logits.size());
      const std::vector<SampleSpec> specs = sample_specs();
      const std::vector<uint64_t> seeds = {1, 77, 123456789, 5, 99};
      // One launch: every (setting, seed) pair is a row of the same logits.
      const auto m = static_cast<int64_t>(specs.size() * seeds.size());
      OwnedTensor x = OwnedTensor::make(DType::kF32, {m, n});
      std::vector<SampleSpec> rows;
      for (const SampleSpec& base : specs)
        for (uint64_t seed : seeds) {
          std::copy(row.logits.begin(), row.logits.end(),
                    x.tensor.ptr<float>() + static_cast<int64_t>(rows.size()) * n);
          SampleSpec s = base;
          s.u = sampling::Rng(seed).next_double();
          rows.push_back(s);
        }
      DeviceTensor dx = DeviceTensor::upload(x.tensor);
      DeviceTensor dout = DeviceTensor::upload(OwnedTensor::make(DType::kI32, {m}).tensor);
      sample(ctx_, dout.tensor, dx.tensor, rows);
      const OwnedTensor got = dout.download();
      sample(ctx_, dout.tensor, dx.tensor, rows);
      const OwnedTensor again = dout.download();
      OwnedTensor want = OwnedTensor::make(DType::kI32, {m});
      ref::sample(want.tensor, x.tensor, rows);
      for (int64_t r = 0; r < m; ++r) {
        const SampleSpec& s = rows[static_cast<size_t>(r)];
        SCOPED_TRACE(row.name + " T=" + std::to_string(s.temperature) + " k=" + std::to_string(s.top_k) +
                     " p=" + std::to_string(s.top_p) + " min_p=" + std::to_string(s.min_p) +
                     " u=" + std::to_string(s.u));
        EXPECT_EQ(got.tensor.ptr<int32_t>()[r], want.tensor.ptr<int32_t>()[r]);
        EXPECT_EQ(again.tensor.ptr<int32_t>()[r], got.tensor.ptr<int32_t>()[r]) << "not deterministic";
        ++compared;
      }
    }
  cuda::set_sample_hist_for_testing(-1);
  EXPECT_GT(compared, 2000);
}

// The host sampler with the same seed draws the same token (the chain CPU test: ref == sampling::sample).
TEST_F(CudaSampleTest, DrawsWhatTheHostSamplerDrawsFromTheSameSeed) {
  sampling::SamplerScratch scratch;
  const SampleRowCase row = sample_row_cases(/*large=*/true).back();  // 128,256 entries
  const auto n = static_cast<int64_t>(row.logits.size());
  OwnedTensor x = OwnedTensor::make(DType::kF32, {1, n});
  std::copy(row.logits.begin(), row.logits.end(), x.tensor.ptr<float>());
  DeviceTensor dx = DeviceTensor::upload(x.tensor);
  DeviceTensor dout = DeviceTensor::upload(OwnedTensor::make(DType::kI32, {1}).tensor);
  for (const SampleSpec& base : sample_specs()) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      sampling::Rng a(seed), b(seed);
      SampleSpec s = base;
      s.u = a.next_double();
      sample(ctx_, dout.tensor, dx.tensor, {&s, 1});
      sampling::SamplingParams p;
      p.temperature = s.temperature;
      p.top_k = s.top_k;
      p.top_p = s.top_p;
      p.min_p = s.min_p;
      EXPECT_EQ(dout.download().tensor.ptr<int32_t>()[0],
                sampling::sample(row.logits.data(), n, p, b, scratch))
          << row.name << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
