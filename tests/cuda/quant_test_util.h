// A random MLX affine quantized matrix for the quantized CUDA op tests, on the host (the CPU reference's
// weights) and on the device: random code words (every code pattern of every bit width), scales of
// +-0.05 / 2^bits and biases of +-0.05 per group, in the scale dtype asked for. Not a test by itself.
// Invariant: the random stream is consumed in one order (words, scales, biases), so a test's data depend
// only on its seed and the shapes it asks for.
#pragma once
#include <random>

#include "cuda_test_util.h"

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

}  // namespace bunsen::kernels::test
