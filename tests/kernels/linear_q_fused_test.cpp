// The fused quantized decode ops on the CPU (linear_q_multi, linear_q_swiglu) equal, bit for bit, the
// unfused linear_q (+ silu_mul) sequences they stand for (the models' CPU path relies on it), at odd sizes,
// several bit widths and group sizes, with and without biases; plus their argument errors.
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace bunsen::kernels::test {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

// A random MLX-affine matrix [n, k]: random words (every bit pattern is a valid code stream), scales and
// biases of both signs.
struct RandomQuant {
  OwnedTensor packed, scales, biases;
  QuantWeight w;
  RandomQuant(int64_t n, int64_t k, int bits, int group, std::mt19937& rng) {
    packed = OwnedTensor::make(DType::kU32, {n, k * bits / 32});
    for (int64_t i = 0; i < packed.tensor.numel(); ++i) packed.tensor.ptr<uint32_t>()[i] = static_cast<uint32_t>(rng());
    scales = random_tensor(DType::kBF16, {n, k / group}, rng, -0.01f, 0.01f);
    biases = random_tensor(DType::kBF16, {n, k / group}, rng, -0.1f, 0.1f);
    w = QuantWeight{packed.tensor, scales.tensor, biases.tensor, bits, group};
  }
};

TEST(FusedQuantCpu, LinearQMultiEqualsOneLinearQPerPart) {
  Context ctx;
  std::mt19937 rng(521);
  for (int bits : {4, 5, 8})
    for (int64_t m : {1, 3, 9})
      for (bool bias : {false, true}) {
        const int64_t k = 192, ns[3] = {33, 16, 70};
        OwnedTensor x = random_tensor(DType::kF32, {m, k}, rng);
        std::vector<RandomQuant> w;
        w.reserve(3);
        std::vector<OwnedTensor> b, got, want;
        for (int64_t n : ns) {
          w.emplace_back(n, k, bits, 64, rng);
          b.push_back(random_tensor(DType::kBF16, {n}, rng));
          got.push_back(OwnedTensor::make(DType::kF32, {m, n}));
          want.push_back(OwnedTensor::make(DType::kF32, {m, n}));
          linear_q(ctx, want.back().tensor, x.tensor, w.back().w, bias ? b.back().tensor : Tensor{});
        }
        std::vector<QuantLinearPart> parts;
        for (size_t p = 0; p < 3; ++p) parts.push_back({got[p].tensor, w[p].w, bias ? b[p].tensor : Tensor{}});
        linear_q_multi(ctx, x.tensor, parts);
        for (size_t p = 0; p < 3; ++p)
          EXPECT_TRUE(same_bits(got[p].tensor, want[p].tensor))
              << "part " << p << " bits " << bits << " m " << m << " bias " << bias;
      }
}

TEST(FusedQuantCpu, LinearQSwigluEqualsLinearQLinearQSiluMul) {
  Context ctx;
  std::mt19937 rng(522);
  for (int bits : {3, 4, 8})
    for (int64_t m : {1, 8, 9})
      for (bool bias : {false, true}) {
        const int64_t k = 256, f = 37;
        OwnedTensor x = random_tensor(DType::kF32, {m, k + 3}, rng);  // a column slice: strided rows
        const Tensor xs = x.tensor.slice(1, 1, 1 + k);
        RandomQuant wg(f, k, bits, 32, rng), wu(f, k, bits, 32, rng);
        OwnedTensor bg = random_tensor(DType::kF32, {f}, rng), bu = random_tensor(DType::kF32, {f}, rng);
        OwnedTensor g = OwnedTensor::make(DType::kF32, {m, f}), u = OwnedTensor::make(DType::kF32, {m, f});
        OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f}), got = OwnedTensor::make(DType::kF32, {m, f});
        linear_q(ctx, g.tensor, xs, wg.w, bias ? bg.tensor : Tensor{});
        linear_q(ctx, u.tensor, xs, wu.w, bias ? bu.tensor : Tensor{});
        silu_mul(ctx, want.tensor, g.tensor, u.tensor);
        linear_q_swiglu(ctx, got.tensor, xs, wg.w, wu.w, bias ? bg.tensor : Tensor{}, bias ? bu.tensor : Tensor{});
        EXPECT_TRUE(same_bits(got.tensor, want.tensor)) << "bits " << bits << " m " << m << " bias " << bias;
      }
}

TEST(FusedQuantCpu, ArgumentErrorsNameTheOp) {
  Context ctx;
  std::mt19937 rng(523);
  OwnedTensor x = random_tensor(DType::kF32, {2, 64}, rng), out = OwnedTensor::make(DType::kF32, {2, 4});
  RandomQuant w(4, 64, 4, 32, rng), w8(4, 64, 8, 32, rng), w_wide(4, 128, 4, 32, rng);
  expect_kernel_error([&] { linear_q_multi(ctx, x.tensor, std::span<const QuantLinearPart>{}); },
                      {"linear_q_multi", "0 parts"});
  const QuantLinearPart bad[] = {{out.tensor, w_wide.w, {}}};
  expect_kernel_error([&] { linear_q_multi(ctx, x.tensor, bad); }, {"linear_q", "disagree on k"});
  expect_kernel_error([&] { linear_q_swiglu(ctx, out.tensor, x.tensor, w.w, w_wide.w); },
                      {"linear_q_swiglu", "disagree on k"});
  expect_kernel_error([&] { linear_q_swiglu(ctx, out.tensor, x.tensor, w.w, w8.w); },
                      {"linear_q_swiglu", "bits (4 vs 8)"});
}

}  // namespace
}  // namespace bunsen::kernels::test
