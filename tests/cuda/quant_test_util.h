// Shared pieces of the quantized CUDA op tests: a random MLX affine quantized matrix on the host (the CPU
// reference's weights) and on the device - random code words (every code pattern of every bit width),
// scales of +-0.05 / 2^bits and biases of +-0.05 per group, in the scale dtype asked for - and the sweep
// that checks linear_q under every launch plan of one bit width against the CPU. Not a test by itself.
// Invariant: the random stream is consumed in one order (words, scales, biases, then the sweep's x and
// output fills), so a test's data depend only on its seed and the shapes it asks for.
#pragma once
#include <random>

#include "cuda_test_util.h"
#include "kernels/cuda/qmma_plan.h"

namespace bunsen::kernels::test {

struct RandomQuantWeight {
  OwnedTensor packed, scales, biases;
  DeviceTensor d_packed, d_scales, d_biases;
  QuantWeight host, dev;
  RandomQuantWeight(int64_t n, int64_t k, int bits, int group, DType sb, std::mt19937& rng) {
    packed = OwnedTensor::make(DType::kU32, {n, k * bits / 32});
    for (int64_t i = 0; i < packed.tensor.numel(); ++i) packed.tensor.ptr<uint32_t>()[i] = static_cast<uint32_t>(rng());
    const float unit = 0.05f / static_cast<float>(1 << bits);
    scales = random_tensor(sb, {n, k / group}, rng, -unit, unit);
    biases = random_tensor(sb, {n, k / group}, rng, -0.05f, 0.05f);
    d_packed = DeviceTensor::upload(packed.tensor);
    d_scales = DeviceTensor::upload(scales.tensor);
    d_biases = DeviceTensor::upload(biases.tensor);
    host = QuantWeight{packed.tensor, scales.tensor, biases.tensor, bits, group};
    dev = QuantWeight{d_packed.tensor, d_scales.tensor, d_biases.tensor, bits, group};
  }
};

// linear_q on `gpu` against the CPU under every launch plan of `bits` (group 64; the 4-bit hook for 4, the
// 8-bit one for 8): every m 1..8, k of 1, 3 and 8 tiles of 512, odd and tile-sized n, bf16/f16 scales, every
// forced k split, bf16/f32 outputs alternating. Leaves the split hook at 0 and the plan hook of `bits` set
// (the caller's restore resets it).
inline void expect_every_qmma_plan_matches_the_cpu(Context& gpu, int bits, std::mt19937& rng) {
  Context cpu;
  int variant = 0;
  for (int64_t k : {512, 1536, 4096})
    for (int64_t n : {16, 67, 300})
      for (DType sb : {DType::kBF16, DType::kF16}) {
        RandomQuantWeight w(n, k, bits, 64, sb, rng);
        HostPair x = random_pair(DType::kBF16, {8, k}, rng);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
        for (int split : {0, 1, 2, 8}) {
          cuda::set_linear_q_split_for_testing(split);
          for (int64_t m = 1; m <= 8; ++m) {
            const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
            OwnedTensor want = OwnedTensor::make(DType::kF32, {m, n});
            linear_q(cpu, want.tensor, x.f32.tensor.slice(0, 0, m), w.host);
            for (int plan = 0; plan < cuda::qmma_plan_count(bits); ++plan) {
              bits == 8 ? cuda::set_qmma_plan8_for_testing(plan) : cuda::set_qmma_plan_for_testing(plan);
              DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {m, n}, rng).tensor);
              linear_q(gpu, od.tensor, xd.tensor.slice(0, 0, m), w.dev);
              expect_close(od.download().tensor, want.tensor, ot == DType::kBF16 ? 1e-2f : 1e-4f,
                           strfmt("%d-bit linear_q plan %s m %lld n %lld k %lld scales %s split %d out %s", bits,
                                  bits == 8 ? cuda::qmma_plan8_name(plan) : cuda::qmma_plan_name(plan),
                                  (long long)m, (long long)n, (long long)k, dtype_name(sb), split, dtype_name(ot)));
            }
          }
        }
      }
  cuda::set_linear_q_split_for_testing(0);
}

}  // namespace bunsen::kernels::test
