// The fixture of the env-gated CUDA micro-benchmarks (test_cuda_fused_bench.cpp,
// test_cuda_elementwise_bench.cpp): a stream, two events, and timers of calls captured in one CUDA graph
// (as the runner replays decode steps) or issued eagerly. Not a speed assertion: a bench only runs when
// its environment variable is "1" (BUNSEN_BENCH_GEMV by default) and prints what it measures.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {

class GraphBench : public CudaTest {
 protected:
  virtual const char* bench_env() const { return "BUNSEN_BENCH_GEMV"; }

  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const char* env = std::getenv(bench_env());
    if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "set " << bench_env() << "=1";
    stream_ = cuda::stream_create();
    ctx_.cuda_stream = stream_;
    ASSERT_EQ(cudaEventCreate(&start_), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&stop_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
      cuda::stream_destroy(stream_);
    }
    CudaTest::TearDown();
  }

  // Mean microseconds of one call of fn(i): `iters` calls captured in one CUDA graph, replayed 5 times
  // after a warm-up replay; kernel boundaries count, host launch costs do not.
  double time_us(const std::function<void(int)>& fn, int iters = 40) {
    for (int i = 0; i < 2; ++i) fn(i);  // eager warm-up (plans, occupancy queries)
    cuda::synchronize(stream_);
    cuda::graph_begin_capture(stream_);
    for (int i = 0; i < iters; ++i) fn(i);
    void* exec = cuda::graph_end_capture(stream_);
    cuda::graph_launch(exec, stream_);
    cudaEventRecord(start_, static_cast<cudaStream_t>(stream_));
    for (int r = 0; r < 5; ++r) cuda::graph_launch(exec, stream_);
    cudaEventRecord(stop_, static_cast<cudaStream_t>(stream_));
    EXPECT_EQ(cudaEventSynchronize(stop_), cudaSuccess);
    cuda::graph_destroy(exec);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return 1000.0 * ms / (5.0 * iters);
  }

  // Mean microseconds of one eager call (for work a graph cannot capture as a kernel sequence).
  double time_eager_us(const std::function<void(int)>& fn, int iters) {
    fn(0);
    cudaEventRecord(start_, static_cast<cudaStream_t>(stream_));
    for (int i = 0; i < iters; ++i) fn(i);
    cudaEventRecord(stop_, static_cast<cudaStream_t>(stream_));
    EXPECT_EQ(cudaEventSynchronize(stop_), cudaSuccess);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return 1000.0 * ms / iters;
  }

  void* stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// One device allocation viewed as a [shape] tensor, every byte set to `byte` (the values do not change the
// timing, and memset is fast for gigabytes); 256 bytes of slack past the end.
struct BenchTensor {
  cuda::DeviceBuffer buf;
  Tensor t;
  static BenchTensor make(DType dt, std::initializer_list<int64_t> shape, int byte = 0x3c) {
    BenchTensor d;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    d.buf = cuda::DeviceBuffer(static_cast<size_t>(n) * dtype_size(dt) + 256);
    EXPECT_EQ(cudaMemset(d.buf.data(), byte, d.buf.size()), cudaSuccess);
    d.t = Tensor::view(d.buf.data(), dt, shape, Device::cuda(cuda::current_device()));
    return d;
  }
};

// A quantized matrix [n, k] (group 64, bf16 scales/biases) in device memory, filled with constant bytes.
struct BenchQuant {
  BenchTensor packed, scales, biases;
  QuantWeight w;
  static BenchQuant make(int64_t n, int64_t k, int bits) {
    BenchQuant q;
    q.packed = BenchTensor::make(DType::kU32, {n, k * bits / 32}, 0x5a);
    q.scales = BenchTensor::make(DType::kBF16, {n, k / 64});
    q.biases = BenchTensor::make(DType::kBF16, {n, k / 64});
    q.w = QuantWeight{q.packed.t, q.scales.t, q.biases.t, bits, 64};
    return q;
  }
  // Bytes one pass reads: codes, scales and biases.
  static double bytes(int64_t n, int64_t k, int bits) { return n * k * bits / 8.0 + 2.0 * n * (k / 64) * 2; }
};

}  // namespace bunsen::kernels::test
