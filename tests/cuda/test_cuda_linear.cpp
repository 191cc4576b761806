// CUDA linear through ops.h against ref::linear: every weight dtype (f32/f16/bf16) x activation dtype
// (f32/bf16) x output dtype, M = 1, 2, 3, 17, 64, 300 and odd n/k, aligned (16-byte GEMV path) and
// strided/misaligned (generic path) views, bias, both paths forced at the sizes the other one takes.
// Every GEMV case runs on both GEMV kernel paths (default and small-launch, BUNSEN_GEMV_SMALL).
// BUNSEN_CUDA_BENCH=1 adds a timing of the GEMV on decode shapes (bandwidth, printed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

struct Case {
  int64_t m, n, k;
};

// GEMM operands share a dtype: bf16 x is converted to w's dtype (exact for these values), f32 x against
// 16-bit w is split into hi + lo halves (gemm.cu), so f32 outputs are as close as the GEMV's at every m
// (rounding f32 x to bf16 instead would miss 1e-4 by an order of magnitude).
float linear_tolerance(DType out) {
  return out == DType::kBF16 ? 1e-2f : 1e-4f;
}

void check_linear(Context& ctx, DType wt, DType xt, DType ot, Case c, bool strided, bool with_bias,
                  std::mt19937& rng) {
  const int64_t pad = strided ? 5 : 0;
  HostPair x_full = random_pair(xt, {c.m, c.k + pad}, rng);
  OwnedTensor w = random_tensor(wt, {c.n, c.k}, rng);
  OwnedTensor bias = random_tensor(wt, {c.n}, rng);
  OwnedTensor out_host = random_tensor(ot, {c.m, c.n + pad}, rng);  // garbage to overwrite
  OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.n});
  ref::linear(want.tensor, x_full.f32.tensor.slice(1, pad / 2, pad / 2 + c.k), w.tensor,
              with_bias ? bias.tensor : Tensor{});
  DeviceTensor xd = DeviceTensor::upload(x_full.data.tensor), wd = DeviceTensor::upload(w.tensor);
  DeviceTensor bd = DeviceTensor::upload(bias.tensor), od = DeviceTensor::upload(out_host.tensor);
  linear(ctx, od.tensor.slice(1, pad, pad + c.n), xd.tensor.slice(1, pad / 2, pad / 2 + c.k), wd.tensor,
         with_bias ? bd.tensor : Tensor{});
  OwnedTensor got = od.download();
  const std::string what = strfmt("linear w %s x %s out %s m=%lld n=%lld k=%lld strided=%d bias=%d",
                                  dtype_name(wt), dtype_name(xt), dtype_name(ot), (long long)c.m,
                                  (long long)c.n, (long long)c.k, strided, with_bias);
  expect_close(got.tensor.slice(1, pad, pad + c.n), want.tensor, linear_tolerance(ot), what);
  for (int64_t i = 0; i < c.m; ++i)  // columns outside the out slice are untouched
    for (int64_t j = 0; j < pad; ++j)
      ASSERT_EQ(load_f(got.tensor.row_ptr(i), ot, j), load_f(out_host.tensor.row_ptr(i), ot, j)) << what;
}

TEST_F(CudaTest, LinearMatchesReferenceForEveryDtypeAndBatchSize) {
  std::mt19937 rng(201);
  const Case cases[] = {{1, 1, 1},
                        {1, 31, 33},
                        {1, 4095, 64},
                        {1, 127, 4095},
                        {2, 33, 31},
                        {2, 896, 896},
                        {3, 127, 4095},
                        {3, 64, 128},
                        {17, 31, 33},
                        {17, 256, 4095},
                        {64, 127, 127},
                        {64, 512, 896},
                        {300, 33, 64},
                        {300, 129, 31},
                        {8, 100, 800},
                        // few rows, long aligned k: the GEMV splits k over 2-8 warps per row group
                        {1, 64, 4096},
                        {3, 100, 8192},
                        {6, 37, 2048},
                        {2, 9, 1024}};
  for_each_gemv_path([&] {
    int i = 0;
    for (const Case& c : cases)
      for (DType wt : kWeightDtypes)
        for (DType xt : kActDtypes)
          for (DType ot : kActDtypes) {
            ++i;
            check_linear(ctx_, wt, xt, ot, c, i % 3 == 1, i % 2 == 0, rng);
          }
  });
}

TEST_F(CudaTest, LinearEachPathForcedAtTheOtherPathsSizes) {
  std::mt19937 rng(202);
  for (cuda::LinearPath path : {cuda::LinearPath::kGemv, cuda::LinearPath::kGemm}) {
    cuda::set_linear_path_for_testing(path);
    const bool gemv = path == cuda::LinearPath::kGemv;
    for (int64_t m : gemv ? std::vector<int64_t>{9, 17, 64} : std::vector<int64_t>{1, 2, 3, 8})
      for (DType wt : kWeightDtypes)
        for (DType xt : kActDtypes) {
          SCOPED_TRACE(gemv ? "forced GEMV" : "forced GEMM");
          const Case c{m, 75, 136};
          HostPair x = random_pair(xt, {c.m, c.k}, rng);
          OwnedTensor w = random_tensor(wt, {c.n, c.k}, rng);
          OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.n});
          ref::linear(want.tensor, x.f32.tensor, w.tensor, Tensor{});
          DeviceTensor xd = DeviceTensor::upload(x.data.tensor), wd = DeviceTensor::upload(w.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(DType::kF32, {c.m, c.n}, rng).tensor);
          linear(ctx_, od.tensor, xd.tensor, wd.tensor);
          expect_close(od.download().tensor, want.tensor, linear_tolerance(DType::kF32),
                       strfmt("m %lld w %s x %s", (long long)m, dtype_name(wt), dtype_name(xt)));
        }
  }
}

TEST_F(CudaTest, LinearWithEmptyKWritesBias) {
  std::mt19937 rng(203);
  OwnedTensor bias = random_tensor(DType::kBF16, {7}, rng);
  DeviceTensor bd = DeviceTensor::upload(bias.tensor);
  DeviceTensor od = DeviceTensor::upload(random_tensor(DType::kF32, {3, 7}, rng).tensor);
  DeviceTensor xd = DeviceTensor::upload(random_tensor(DType::kF32, {3, 1}, rng).tensor);
  Tensor x0 = xd.tensor.slice(1, 0, 0);
  DeviceTensor wd = DeviceTensor::upload(random_tensor(DType::kBF16, {7, 1}, rng).tensor);
  linear(ctx_, od.tensor, x0, wd.tensor.slice(1, 0, 0), bd.tensor);
  OwnedTensor got = od.download();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 7; ++j)
      EXPECT_EQ(got.tensor.ptr<float>()[i * 7 + j], load_f(bias.tensor.data, DType::kBF16, j));
}

// ---- BUNSEN_CUDA_BENCH=1: GEMV bandwidth on decode shapes ----

// bf16 pseudo-random values in [-1, 1) without a per-element RNG call (hundreds of MB).
void fill_fast(const Tensor& t, uint32_t seed) {
  uint16_t* p = t.ptr<uint16_t>();
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = f32_to_bf16(static_cast<float>(static_cast<int32_t>(s)) * (1.0f / 2147483648.0f));
  }
}

TEST_F(CudaTest, GemvBandwidthBench) {
  const char* env = std::getenv("BUNSEN_CUDA_BENCH");
  if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "set BUNSEN_CUDA_BENCH=1";
  struct Shape {
    int64_t n, k, m;
  };
  const Shape shapes[] = {{151936, 896, 1},  {151936, 896, 2}, {151936, 896, 4}, {151936, 896, 8},
                          {4096, 4096, 1},   {1024, 4096, 1},  {14336, 4096, 1}, {4096, 14336, 1},
                          {128256, 4096, 1}, {4096, 4096, 8}};
  cudaEvent_t start, stop;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  {  // the ceiling: a device-to-device copy, counting bytes read plus bytes written
    const size_t bytes = size_t{2} << 30;
    cuda::DeviceBuffer a(bytes), b(bytes);
    ASSERT_EQ(cudaMemset(a.data(), 1, bytes), cudaSuccess);
    cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr);
    cudaEventRecord(start, nullptr);
    for (int i = 0; i < 5; ++i) cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr);
    cudaEventRecord(stop, nullptr);
    ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    std::printf("[bench] d2d copy: %.0f GB/s (read + write)\n", 2.0 * 5 * bytes / (ms * 1e6));
  }
  for (const Shape& s : shapes) {
    // Several weight copies when one would fit in the 60 MB L2, so each call streams from HBM.
    const int64_t bytes = s.n * s.k * 2;
    const int copies = static_cast<int>(std::max<int64_t>(1, (256ll << 20) / bytes));
    OwnedTensor w = OwnedTensor::make(DType::kBF16, {s.n, s.k});
    fill_fast(w.tensor, 7);
    std::vector<DeviceTensor> wd;
    for (int c = 0; c < copies; ++c) wd.push_back(DeviceTensor::upload(w.tensor));
    std::mt19937 rng(9);
    OwnedTensor x = random_tensor(DType::kBF16, {s.m, s.k}, rng);
    DeviceTensor xd = DeviceTensor::upload(x.tensor);
    DeviceTensor od = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {s.m, s.n}).tensor);
    for (int i = 0; i < 3; ++i) linear(ctx_, od.tensor, xd.tensor, wd[i % copies].tensor);
    const int iters = 60;
    cudaEventRecord(start, nullptr);
    for (int i = 0; i < iters; ++i) linear(ctx_, od.tensor, xd.tensor, wd[i % copies].tensor);
    cudaEventRecord(stop, nullptr);
    ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    const double us = 1000.0 * ms / iters;
    const double moved = static_cast<double>(bytes) + s.m * s.k * 2.0 + s.m * s.n * 4.0;
    std::printf("[bench] gemv bf16 n=%lld k=%lld m=%lld: %.2f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
                (long long)s.n, (long long)s.k, (long long)s.m, us, moved / us / 1e3,
                moved / us / 1e3 / 48.0);
    // The timed kernel computed the right thing: spot-check rows against a CPU dot product.
    OwnedTensor got = od.download();
    const std::vector<float> xv = values(x.tensor);
    for (int64_t r = 0; r < s.n; r += s.n / 61 + 1)
      for (int64_t i = 0; i < s.m; ++i) {
        double want = 0.0;
        for (int64_t j = 0; j < s.k; ++j)
          want += double(bf16_to_f32(w.tensor.ptr<uint16_t>()[r * s.k + j])) * xv[i * s.k + j];
        ASSERT_NEAR(got.tensor.ptr<float>()[i * s.n + r], want, 1e-3 * std::sqrt(double(s.k))) << r;
      }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace bunsen::kernels::test
