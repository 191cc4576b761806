// linear: the fast CPU paths (GEMV for m <= 4, packed GEMM above, scalar baseline) against ref::linear
// for every weight dtype, odd m/n/k, strided x/out and bias, on every ISA level this CPU supports.
#include "kernel_test_util.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

struct Shape {
  int64_t m, n, k;
};

// Runs cpu::linear and ref::linear on the same random data; x and out are column slices of wider
// tensors when `strided`, so their row strides differ from k and n.
void check_linear(ThreadPool& pool, DType wt, Shape s, bool strided, bool with_bias, std::mt19937& rng) {
  const int64_t pad = strided ? 5 : 0;
  OwnedTensor x_full = random_tensor(DType::kF32, {s.m, s.k + pad}, rng);
  OwnedTensor w = random_tensor(wt, {s.n, s.k}, rng);
  OwnedTensor bias = random_tensor(wt, {s.n}, rng);
  OwnedTensor got_full = random_tensor(DType::kF32, {s.m, s.n + pad}, rng);  // garbage to overwrite
  OwnedTensor want = OwnedTensor::make(DType::kF32, {s.m, s.n});
  const Tensor x = x_full.tensor.slice(1, pad / 2, pad / 2 + s.k);
  const Tensor got = got_full.tensor.slice(1, pad, pad + s.n);
  const Tensor b = with_bias ? bias.tensor : Tensor{};
  const std::vector<float> before = values(got_full.tensor);
  cpu::linear(pool, got, x, w.tensor, b);
  ref::linear(want.tensor, x, w.tensor, b);
  expect_close(got, want.tensor, 1e-5f,
               strfmt("linear %s m=%lld n=%lld k=%lld strided=%d bias=%d", dtype_name(wt), (long long)s.m,
                      (long long)s.n, (long long)s.k, strided, with_bias));
  const std::vector<float> after = values(got_full.tensor);
  for (int64_t i = 0; i < s.m; ++i)  // columns outside the out slice are untouched
    for (int64_t j = 0; j < pad; ++j) ASSERT_EQ(after[i * (s.n + pad) + j], before[i * (s.n + pad) + j]);
}

TEST(Linear, MatchesReferenceAtOddSizes) {
  ThreadPool pool(3);
  std::mt19937 rng(1);
  const Shape shapes[] = {{1, 1, 1},    {1, 3, 7},     {2, 31, 33},   {3, 33, 17},   {4, 127, 95},
                          {5, 65, 300}, {17, 40, 513}, {1, 130, 16},  {2, 9, 32},    {9, 70, 31},
                          {8, 32, 256}, {17, 97, 600}, {4, 64, 4095}, {1, 4095, 64}, {33, 33, 33}};
  for_each_isa([&](cpu::Isa) {
    for (DType wt : kWeightDtypes)
      for (size_t i = 0; i < std::size(shapes); ++i)
        check_linear(pool, wt, shapes[i], i % 2 == 1, i % 3 != 0, rng);
  });
}

TEST(Linear, EveryBatchSizeAroundTheGemvGemmSwitch) {
  ThreadPool pool(2);
  std::mt19937 rng(2);
  for_each_isa([&](cpu::Isa) {
    for (DType wt : kWeightDtypes)
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17})
        check_linear(pool, wt, {m, 75, 133}, m % 2 == 0, m % 3 == 0, rng);
  });
}

TEST(Linear, LargeBatchesTakeTheGemmPath) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  for_each_isa([&](cpu::Isa) {
    for (DType wt : kWeightDtypes) {
      check_linear(pool, wt, {70, 45, 100}, true, true, rng);
      check_linear(pool, wt, {66, 129, 31}, false, false, rng);
      check_linear(pool, wt, {19, 37, 2100}, true, false, rng);
      check_linear(pool, wt, {200, 40, 50}, false, true, rng);  // row blocks split over threads
    }
  });
}

// Each ISA kernel directly (independent of which m cpu::linear hands it), over a column range that
// does not start at 0, so offsets and tails inside the kernels are exercised for every m.
TEST(Linear, EveryKernelOnColumnSubranges) {
  struct Kernel {
    const char* name;
    void (*fn)(const cpu::LinearArgs&, int64_t, int64_t);
    cpu::Isa needs;
  };
  const Kernel kernels[] = {{"scalar", cpu::linear_scalar, cpu::Isa::kScalar},
                            {"gemv_avx2", cpu::gemv_avx2, cpu::Isa::kAvx2},
                            {"gemm_avx2", cpu::gemm_avx2, cpu::Isa::kAvx2},
                            {"gemv_avx512", cpu::gemv_avx512, cpu::Isa::kAvx512},
                            {"gemm_avx512", cpu::gemm_avx512, cpu::Isa::kAvx512}};
  std::mt19937 rng(6);
  const int64_t n = 150;
  const std::pair<int64_t, int64_t> ranges[] = {
      {3, 141}, {0, 150}, {7, 60}};  // partial strips of every width
  for (const Kernel& kernel : kernels) {
    if (!cpu::isa_supported(kernel.needs)) continue;
    for (auto [n0, n1] : ranges)
      for (DType wt : kWeightDtypes)
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17})
          for (int64_t k : {1, 15, 16, 33, 64, 257, 530}) {
            if (n0 != 3 && k > 64 && m > 3) continue;  // keep the run short
            OwnedTensor x = random_tensor(DType::kF32, {m, k + 3}, rng);
            OwnedTensor w = random_tensor(wt, {n, k}, rng);
            OwnedTensor got = random_tensor(DType::kF32, {m, n}, rng);
            OwnedTensor want = clone(got.tensor);
            cpu::LinearArgs a;
            a.x = x.tensor.ptr<float>() + 1;
            a.x_stride = k + 3;
            a.w = w.tensor.data;
            a.w_dtype = wt;
            a.w_stride = k;
            a.out = got.tensor.ptr<float>();
            a.out_stride = n;
            a.m = m;
            a.n = n;
            a.k = k;
            kernel.fn(a, n0, n1);
            ref::linear(want.tensor.slice(1, n0, n1), x.tensor.slice(1, 1, k + 1), w.tensor.slice(0, n0, n1),
                        {});
            expect_close(
                got.tensor, want.tensor, 1e-5f,
                strfmt("%s %s m=%lld k=%lld", kernel.name, dtype_name(wt), (long long)m, (long long)k));
            if (testing::Test::HasFailure()) return;
          }
  }
}

TEST(Linear, SingleThreadPoolAndZeroK) {
  ThreadPool pool(1);
  std::mt19937 rng(3);
  check_linear(pool, DType::kBF16, {3, 50, 70}, true, true, rng);
  OwnedTensor x = OwnedTensor::make(DType::kF32, {2, 0});
  OwnedTensor w = OwnedTensor::make(DType::kF32, {3, 0});
  OwnedTensor out = random_tensor(DType::kF32, {2, 3}, rng);
  OwnedTensor bias = random_tensor(DType::kF32, {3}, rng);
  cpu::linear(pool, out.tensor, x.tensor, w.tensor, bias.tensor);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(out.tensor.ptr<float>()[i * 3 + j], bias.tensor.ptr<float>()[j]);
}

TEST(Linear, PublicOpMatchesReferenceAndAcceptsLeadingDims) {
  std::mt19937 rng(4);
  Context ctx;
  OwnedTensor x = random_tensor(DType::kF32, {2, 3, 40}, rng);  // [2, 3] collapse into m = 6
  OwnedTensor w = random_tensor(DType::kBF16, {24, 40}, rng);
  OwnedTensor got = OwnedTensor::make(DType::kF32, {2, 3, 24});
  OwnedTensor want = OwnedTensor::make(DType::kF32, {2, 3, 24});
  linear(ctx, got.tensor, x.tensor, w.tensor);
  ref::linear(want.tensor, x.tensor, w.tensor, {});
  expect_close(got.tensor, want.tensor, 1e-5f, "linear [2, 3, 40]");
}

TEST(Linear, ExactOnSmallIntegers) {
  // Integers with small magnitudes are exact in f32, bf16 and f16, and so are their dot products:
  // every path must agree bit for bit with the value computed here.
  ThreadPool pool(2);
  const int64_t m = 6, n = 37, k = 45;
  for_each_isa([&](cpu::Isa) {
    for (DType wt : kWeightDtypes) {
      OwnedTensor x = OwnedTensor::make(DType::kF32, {m, k});
      OwnedTensor w = OwnedTensor::make(wt, {n, k});
      OwnedTensor out = OwnedTensor::make(DType::kF32, {m, n});
      for (int64_t i = 0; i < m * k; ++i) x.tensor.ptr<float>()[i] = static_cast<float>((i * 7) % 9 - 4);
      for (int64_t i = 0; i < n * k; ++i) store_f(w.tensor.data, wt, i, static_cast<float>((i * 5) % 11 - 5));
      cpu::linear(pool, out.tensor, x.tensor, w.tensor, {});
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float want = 0.0f;
          for (int64_t c = 0; c < k; ++c)
            want +=
                static_cast<float>((i * k + c) * 7 % 9 - 4) * static_cast<float>((j * k + c) * 5 % 11 - 5);
          ASSERT_EQ(out.tensor.ptr<float>()[i * n + j], want) << dtype_name(wt) << " " << i << "," << j;
        }
    }
  });
}

}  // namespace
}  // namespace bunsen::kernels::test
