// Gated-DeltaNet prefill micro-benchmark on Qwen3.5-4B's linear-attention shape (16 key / 32 value heads
// of 128, bf16 activations, f32 state): one fresh sequence of 2048 tokens (and 4 x 512), timed with CUDA
// events, recurrent kernel vs chunked kernel; prints us per layer call. A measurement tool, not a speed
// assertion: it runs only with BUNSEN_BENCH_DELTANET=1 and asserts only that the two forms agree.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kKeyHeads = 16, kValueHeads = 32, kHeadDim = 128;

struct Bench {
  OwnedTensor host_out;
  double us = 0.0;
};

Bench run_form(DeltaRuleForm form, int n_seqs, int len, std::mt19937 rng) {
  const int64_t n = static_cast<int64_t>(n_seqs) * len;
  const int64_t width = 2 * kKeyHeads * kHeadDim + kValueHeads * kHeadDim;
  DeviceTensor packed = DeviceTensor::upload(random_tensor(DType::kBF16, {n, width}, rng).tensor);
  DeviceTensor a =
      DeviceTensor::upload(random_tensor(DType::kBF16, {n, kValueHeads}, rng, -3.0f, 3.0f).tensor);
  DeviceTensor b =
      DeviceTensor::upload(random_tensor(DType::kBF16, {n, kValueHeads}, rng, -3.0f, 3.0f).tensor);
  DeviceTensor a_log =
      DeviceTensor::upload(random_tensor(DType::kBF16, {kValueHeads}, rng, -2.0f, 1.0f).tensor);
  DeviceTensor dt = DeviceTensor::upload(random_tensor(DType::kF32, {kValueHeads}, rng).tensor);
  DeviceTensor st =
      DeviceTensor::upload(OwnedTensor::make(DType::kF32, {n_seqs, kValueHeads, kHeadDim, kHeadDim}).tensor);
  DeviceTensor out = DeviceTensor::upload(OwnedTensor::make(DType::kBF16, {n, kValueHeads, kHeadDim}).tensor);
  std::vector<int32_t> starts, slots, pos;
  for (int s = 0; s <= n_seqs; ++s) starts.push_back(s * len);
  for (int s = 0; s < n_seqs; ++s) slots.push_back(s);
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < len; ++i) pos.push_back(i);
  auto dev_i32 = [](const std::vector<int32_t>& v) {
    return DeviceTensor::upload(
        Tensor::view(const_cast<int32_t*>(v.data()), DType::kI32, {static_cast<int64_t>(v.size())}));
  };
  DeviceTensor ds = dev_i32(starts), dsl = dev_i32(slots), dp = dev_i32(pos);
  auto heads = [&](int64_t lo, int64_t h) {
    Tensor t = packed.tensor.slice(1, lo, lo + h * kHeadDim);
    t.ndim = 3;
    t.shape[1] = h;
    t.shape[2] = kHeadDim;
    t.strides[1] = kHeadDim;
    t.strides[2] = 1;
    return t;
  };
  const int64_t kd = kKeyHeads * kHeadDim;
  const DeltaRuleInputs in{heads(0, kKeyHeads),
                           heads(kd, kKeyHeads),
                           heads(2 * kd, kValueHeads),
                           a.tensor,
                           b.tensor,
                           a_log.tensor,
                           dt.tensor};
  const StateMeta meta{ds.tensor, dsl.tensor, dp.tensor};
  set_delta_rule_form_for_testing(form);
  Context ctx;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  gated_delta_rule(ctx, out.tensor, in, st.tensor, meta, scale);  // warm-up (and smem attribute)
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  constexpr int kIters = 10;
  cudaEventRecord(e0, nullptr);
  for (int i = 0; i < kIters; ++i) gated_delta_rule(ctx, out.tensor, in, st.tensor, meta, scale);
  cudaEventRecord(e1, nullptr);
  cudaEventSynchronize(e1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  set_delta_rule_form_for_testing(DeltaRuleForm::kAuto);
  return {out.download(), 1000.0 * ms / kIters};
}

TEST_F(CudaTest, DeltaNetPrefillBench) {
  const char* env = std::getenv("BUNSEN_BENCH_DELTANET");
  if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "set BUNSEN_BENCH_DELTANET=1 to run";
  for (auto [n_seqs, len] : {std::pair{1, 2048}, {4, 512}, {1, 64}}) {
    std::mt19937 rng(960);
    const Bench rec = run_form(DeltaRuleForm::kRecurrent, n_seqs, len, rng);
    const Bench chk = run_form(DeltaRuleForm::kChunked, n_seqs, len, rng);
    std::printf("deltanet qwen3.5-4b %d x %d tokens: recurrent %.1f us, chunked %.1f us (%.2fx)\n", n_seqs,
                len, rec.us, chk.us, rec.us / chk.us);
    // Every call starts from position 0, so repeated calls give the same output; bf16 storage tolerance.
    expect_close(chk.host_out.tensor, rec.host_out.tensor, 2e-2f,
                 strfmt("chunked vs recurrent %d x %d", n_seqs, len));
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
