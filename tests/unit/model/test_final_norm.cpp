// model::final_norm: the output head's input on the CPU stays the f32 rows normed in place, for a quantized
// head too (the bf16 path is for CUDA's tensor-core head; its parity is checked by the CUDA golden tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "model/layers.h"

namespace bunsen::model {
namespace {

TEST(FinalNorm, CpuNormsTheF32RowsInPlaceWhateverTheHead) {
  const int64_t n_out = 2, d = 64;
  OwnedTensor xo = OwnedTensor::make(DType::kF32, {n_out, d});
  OwnedTensor w = OwnedTensor::make(DType::kF32, {d});
  OwnedTensor buf = OwnedTensor::make(DType::kBF16, {3, d});
  std::vector<float> x(static_cast<size_t>(n_out * d));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  float* wp = static_cast<float*>(w.tensor.data);
  for (int64_t j = 0; j < d; ++j) wp[j] = 0.5f + 0.01f * static_cast<float>(j);
  std::memset(buf.tensor.data, 0x5a, static_cast<size_t>(3 * d * 2));

  OwnedTensor packed = OwnedTensor::make(DType::kU32, {4, d * 4 / 32});
  OwnedTensor scales = OwnedTensor::make(DType::kBF16, {4, 1}), biases = OwnedTensor::make(DType::kBF16, {4, 1});
  const Linear quantized{{}, {packed.tensor, scales.tensor, biases.tensor, 4, 64}, {}};
  OwnedTensor table = OwnedTensor::make(DType::kF32, {4, d});
  const Linear plain{table.tensor, {}, {}};
  ASSERT_TRUE(quantized.quantized());

  kernels::Context ctx;
  const float eps = 1e-5f;
  for (const Linear* head : {&quantized, &plain}) {
    std::memcpy(xo.tensor.data, x.data(), x.size() * sizeof(float));
    const Tensor ho = final_norm(ctx, *head, xo.tensor, buf.tensor, w.tensor, eps);
    EXPECT_EQ(ho.data, xo.tensor.data);
    EXPECT_EQ(ho.dtype, DType::kF32);
    ASSERT_EQ(ho.dim(0), n_out);
    const float* out = static_cast<const float*>(xo.tensor.data);
    for (int64_t r = 0; r < n_out; ++r) {
      double ss = 0.0;
      for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[r * d + j]) * x[r * d + j];
      const double inv = 1.0 / std::sqrt(ss / d + eps);
      for (int64_t j = 0; j < d; ++j)
        EXPECT_NEAR(out[r * d + j], x[r * d + j] * inv * wp[j], 1e-5) << "row " << r << " col " << j;
    }
    const auto* b = static_cast<const unsigned char*>(buf.tensor.data);
    for (int64_t i = 0; i < 3 * d * 2; ++i) ASSERT_EQ(b[i], 0x5a) << "the bf16 buffer was written on the CPU";
  }
}

}  // namespace
}  // namespace bunsen::model
