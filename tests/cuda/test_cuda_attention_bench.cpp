// Decode-attention micro-benchmark on the Llama-3.1-8B shape (32 q heads, 8 kv heads, head_dim 128, bf16
// cache in blocks of 16): 32 layers' calls captured in a CUDA graph (as the runner replays decode steps),
// timed with CUDA events; prints us per layer and the K/V bytes read per second. A measurement tool, not a
// speed assertion: it runs only with BUNSEN_BENCH_ATTENTION=1 and asserts only that outputs are finite.
// Layers cycle over enough distinct caches that a layer's K/V is not still in L2 from the previous call.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "attention_test_util.h"
#include "kernels/cuda/attention_decode.cuh"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kLayers = 32, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;

struct BenchResult {
  double us_per_layer = 0.0, gb_per_s = 0.0;
};

// path: 0 flash-decoding (default: tensor cores), 1 flash-decoding on SIMT, 2 attention_prefill.cu.
BenchResult bench_decode(int64_t batch, int64_t ctx, int path) {
  cuda::set_attention_flash_decode_for_testing(path == 2);
  cuda::set_attention_decode_variant_for_testing(path == 1 ? 1 : 0);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context c;
  c.cuda_stream = stream;
  const Device dev = Device::cuda(cuda::current_device());
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock, n_blocks = batch * blocks_per_seq;
  const int64_t width = std::max<int64_t>(blocks_per_seq, 8192 / kBlock);  // a runner's max_context >= 8k
  const size_t cache_bytes = static_cast<size_t>(n_blocks * kBlock * kKvHeads * kHeadDim) * 2;
  const int64_t n_caches =
      std::min<int64_t>(kLayers, (int64_t{256} << 20) / static_cast<int64_t>(cache_bytes) + 1);
  std::vector<cuda::DeviceBuffer> ks, vs;
  for (int64_t i = 0; i < n_caches; ++i) {
    ks.emplace_back(cache_bytes);
    vs.emplace_back(cache_bytes);
    cudaMemset(ks.back().data(), 0x3c, cache_bytes);  // bf16 0x3c3c ~ 0.0115 everywhere
    cudaMemset(vs.back().data(), 0x3c, cache_bytes);
  }
  std::mt19937 rng(501);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  OwnedTensor tables = OwnedTensor::make(DType::kI32, {batch, width});
  OwnedTensor positions = OwnedTensor::make(DType::kI32, {batch}),
              seq_index = OwnedTensor::make(DType::kI32, {batch});
  std::fill_n(tables.tensor.ptr<int32_t>(), batch * width, -1);
  for (int64_t s = 0; s < batch; ++s) {
    std::copy_n(ids.begin() + s * blocks_per_seq, blocks_per_seq, tables.tensor.ptr<int32_t>() + s * width);
    positions.tensor.ptr<int32_t>()[s] = static_cast<int32_t>(ctx - 1);
    seq_index.tensor.ptr<int32_t>()[s] = static_cast<int32_t>(s);
  }
  DeviceTensor dt = DeviceTensor::upload(tables.tensor), dp = DeviceTensor::upload(positions.tensor),
               ds = DeviceTensor::upload(seq_index.tensor);
  DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, kHeads, kHeadDim}, rng).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, kHeads, kHeadDim}, rng).tensor);
  const AttentionMeta meta{dp.tensor, ds.tensor, dt.tensor, {}};
  const AttentionParams params{0.088f, 0, 0.0f};
  auto layers = [&] {
    for (int64_t l = 0; l < kLayers; ++l) {
      const auto i = static_cast<size_t>(l % n_caches);
      const std::initializer_list<int64_t> shape = {n_blocks, kBlock, kKvHeads, kHeadDim};
      const PagedKv cache{Tensor::view(ks[i].data(), DType::kBF16, shape, dev),
                          Tensor::view(vs[i].data(), DType::kBF16, shape, dev)};
      paged_attention(c, out.tensor, q.tensor, cache, meta, params);
    }
  };
  layers();  // sizes the scratch arena
  cuda::synchronize(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  layers();
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  const auto warm_start = std::chrono::steady_clock::now();  // until the clocks have ramped up
  for (int i = 0; i < 3 || std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(150);
       ++i) {
    cudaGraphLaunch(exec, stream);
    cuda::synchronize(stream);
  }
  constexpr int kReps = 10;
  cudaEventRecord(t0, stream);
  for (int i = 0; i < kReps; ++i) cudaGraphLaunch(exec, stream);
  cudaEventRecord(t1, stream);
  cudaEventSynchronize(t1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, t0, t1);
  for (float v : values(out.download().tensor)) EXPECT_TRUE(std::isfinite(v));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cuda::set_attention_flash_decode_for_testing(false);
  cuda::set_attention_decode_variant_for_testing(0);
  BenchResult r;
  r.us_per_layer = 1000.0 * ms / (kReps * kLayers);
  const double bytes = static_cast<double>(batch * ctx * kKvHeads * kHeadDim) * 2 * 2;
  r.gb_per_s = bytes / (r.us_per_layer * 1e3);
  return r;
}

// BUNSEN_BENCH_ATTENTION=1 test_cuda --gtest_filter='*DecodeAttentionBench*'
TEST_F(CudaTest, DecodeAttentionBench) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  struct Case {
    int64_t batch, ctx;
  };
  for (Case k : {Case{1, 1024}, Case{1, 8192}, Case{1, 32768}, Case{16, 1024}, Case{64, 1024}, Case{64, 4096},
                 Case{256, 1024}})
    for (int path : {0, 1, 2}) {
      if (path == 2 && k.batch * kKvHeads < 2 * 132) continue;  // tensor cores need rows to fill the GPU
      const BenchResult r = bench_decode(k.batch, k.ctx, path);
      const char* name = path == 0 ? "split-kv/mma" : path == 1 ? "split-kv/simt" : "tc-prefill-path";
      std::printf(
          "decode attention batch %4lld ctx %6lld %-15s %9.1f us/layer %7.0f GB/s %8.3f ms/32 layers\n",
          (long long)k.batch, (long long)k.ctx, name, r.us_per_layer, r.gb_per_s,
          r.us_per_layer * kLayers / 1000.0);
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
