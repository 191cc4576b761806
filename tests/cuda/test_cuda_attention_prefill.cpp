// CUDA prefill attention on tensor cores (attention_prefill_mma.cu's kernel and its fa2b variant, and
// attention_prefill.cu's WMMA fallback) against kernels/ref: every case runs all three kernels
// (set_attention_prefill_kernel_for_testing), and fa2b once more with its keys split into slices
// on bf16 q and a bf16 paged cache at odd prompt lengths (1, 17, 63, 64, 65, 200, 1000), GQA groups 1/4/8,
// head_dim 64/128, sliding windows (with released blocks), soft-cap, batches of two and three sequences
// with different cached prefixes (chunked prefill), interleaved tokens, block sizes 1/3/16/32, and
// invalid block ids (NaN for their sequence only, also when a whole first tile is invalid). All kernels
// round P to bf16, so results are compared at bf16-level tolerance. The env-gated benchmark
// (BUNSEN_BENCH_ATTENTION=1) times an 8B-shape prefill per layer for each kernel, in us and TFLOP/s.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attention_test_util.h"

namespace bunsen::kernels::test {
namespace {

constexpr int kWmma = 1, kMma = 2, kFa2b = 3;  // set_attention_prefill_kernel_for_testing
constexpr int kKernels[] = {kMma, kFa2b, kWmma};
constexpr float kTol = 1e-2f;  // P is rounded to bf16 before P·V: bf16-level error

const char* kernel_name(int kernel) {
  return kernel == kMma ? "mma.sync" : kernel == kFa2b ? "fa2b" : "wmma";
}

// Restores the default kernel and split choice when a test ends (also on a failed assertion).
struct KernelGuard {
  ~KernelGuard() {
    cuda::set_attention_prefill_kernel_for_testing(0);
    cuda::set_prefill_splits_for_testing(0);
  }
};

// Runs the scenario through every tensor-core kernel, and fa2b with its keys forced into 3 slices (split-KV
// partials + combine), and compares each with the reference.
void check_all(Context& ctx, const Scenario& s, const std::string& what, uint32_t seed = 311) {
  std::mt19937 rng(seed);
  Batch b = make_batch(s, rng);
  const OwnedTensor want = reference_out(b, s);
  KernelGuard guard;
  for (int kernel : kKernels) {
    cuda::set_attention_prefill_kernel_for_testing(kernel);
    DeviceBatch d = upload(b, s.out_dtype, rng);
    paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    expect_close(d.out.download().tensor, want.tensor, kTol, what + " [" + kernel_name(kernel) + "]");
  }
  cuda::set_attention_prefill_kernel_for_testing(kFa2b);
  cuda::set_prefill_splits_for_testing(3);
  DeviceBatch d = upload(b, s.out_dtype, rng);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
  expect_close(d.out.download().tensor, want.tensor, kTol, what + " [fa2b, 3 key slices]");
}

TEST_F(CudaTest, PrefillTensorCoresPromptLengthsGroupsHeadDims) {
  for (int64_t head_dim : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (int64_t len : {1, 17, 63, 64, 65, 200, 1000}) {
        // A whole prompt, and the same prompt beside a 1-token prompt (so a 1-token prompt also reaches
        // the prefill kernel: a batch of only decode-like rows goes to flash-decoding).
        Scenario s = batch_scenario(group, head_dim, {len}, {len});
        const std::string what =
            strfmt("hd %lld group %lld len %lld", (long long)head_dim, (long long)group, (long long)len);
        check_all(ctx_, s, what);
        s.seq_lens = {len, 1};
        s.new_tokens = {len, 1};
        check_all(ctx_, s, what + " + 1-token prompt");
      }
}

// A short chunk appended to a long cached prefix (a new turn of a long conversation) takes fa2b's split-KV
// path on its own (too few query blocks for the GPU, >= 4k keys): the result matches the reference, with a
// window, soft-cap, and a second sequence in the batch.
TEST_F(CudaTest, PrefillShortChunkOverLongPrefixSplitsTheKeys) {
  for (int64_t group : {1, 4})
    for (int window : {0, 700}) {
      Scenario s = batch_scenario(group, 128, {5000, 300}, {40, 300});
      s.params.sliding_window = window;
      s.params.softcap = window > 0 ? 25.0f : 0.0f;
      check_all(ctx_, s, strfmt("group %lld window %d", (long long)group, window));
      s.seq_lens = {6100};
      s.new_tokens = {64};
      check_all(ctx_, s, strfmt("one sequence group %lld window %d", (long long)group, window));
    }
}

TEST_F(CudaTest, PrefillTensorCoresSlidingWindowAndSoftcap) {
  for (int64_t head_dim : {64, 128})
    for (int window : {0, 1, 17, 64, 100})
      for (float softcap : {0.0f, 30.0f})
        for (bool release : {false, true}) {
          if (release && window == 0) continue;
          Scenario s = batch_scenario(4, head_dim, {200, 333, 90}, {200, 70, 90});
          s.params = {0.4f, window, softcap, {}};  // scale large enough for the soft-cap to bite
          s.release_out_of_window = release;
          check_all(ctx_, s,
                    strfmt("hd %lld window %d softcap %g release %d", (long long)head_dim, window, softcap,
                           release));
        }
}

TEST_F(CudaTest, PrefillTensorCoresChunkedVarlenBatches) {
  struct Mix {
    std::vector<int64_t> lens, fresh;
  };
  const Mix mixes[] = {
      {{65, 200}, {65, 200}},             // two whole prompts
      {{300, 129}, {100, 64}},            // two chunks after cached prefixes
      {{1000, 17, 250}, {63, 17, 200}},   // three: a chunk, a prompt, a chunk
      {{129, 64, 47}, {1, 64, 12}},       // a decode row among prefills
  };
  for (const Mix& mx : mixes)
    for (int64_t group : {1, 4, 8})
      for (int64_t head_dim : {64, 128})
        for (int64_t block_size : {16, 32})
          for (bool interleave : {false, true}) {
            Scenario s = batch_scenario(group, head_dim, mx.lens, mx.fresh);
            s.block_size = block_size;
            s.interleave = interleave;
            check_all(ctx_, s,
                      strfmt("lens %lld.. group %lld hd %lld block %lld interleave %d", (long long)mx.lens[0],
                             (long long)group, (long long)head_dim, (long long)block_size, interleave));
          }
}

TEST_F(CudaTest, PrefillTensorCoresOddBlockSizesGroupsAndOutputs) {
  for (int64_t block_size : {1, 3})
    for (int64_t group : {2, 7}) {
      Scenario s = batch_scenario(group, 128, {130, 70}, {130, 30});
      s.block_size = block_size;
      check_all(ctx_, s, strfmt("block %lld group %lld", (long long)block_size, (long long)group));
    }
  Scenario s = batch_scenario(4, 64, {150, 80}, {150, 40});
  s.out_dtype = DType::kF32;  // f32 output, same bf16-level tolerance
  check_all(ctx_, s, "f32 out");
  s.params.sliding_window = 33;
  s.params.softcap = 20.0f;
  check_all(ctx_, s, "f32 out window softcap");
}

TEST_F(CudaTest, PrefillTensorCoresInvalidBlockIdPoisonsOnlyItsSequence) {
  KernelGuard guard;
  for (int kernel : kKernels) {
    cuda::set_attention_prefill_kernel_for_testing(kernel);
    Scenario s = batch_scenario(2, 64, {40, 40}, {20, 20});
    s.block_size = 4;
    s.out_dtype = DType::kF32;
    std::mt19937 rng(302);
    Batch b = make_batch(s, rng);
    const OwnedTensor want = reference_out(b, s);
    b.block_tables.tensor.ptr<int32_t>()[b.block_tables.tensor.shape[1] + 2] = 1 << 20;  // seq 1, block 2
    DeviceBatch d = upload(b, DType::kF32, rng);
    paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    const std::vector<float> got = values(d.out.download().tensor), ok = values(want.tensor);
    for (size_t i = 0; i < got.size(); ++i) {  // seq 0's tokens first; every seq-1 row sees keys 8-11
      if (i < got.size() / 2)
        EXPECT_NEAR(got[i], ok[i], 0.03f) << "kernel " << kernel << " " << i;
      else
        EXPECT_TRUE(std::isnan(got[i])) << "kernel " << kernel << " " << i;
    }
  }
}

// Every key of seq 1's first tile (keys 0-63, blocks 0-15 of 4) is invalid: its rows must still be NaN
// although later tiles are valid (the WMMA kernel drops this poison: p = 0 while the row max is -inf, so
// only the mma.sync kernel and its fa2b variant are held to it).
TEST_F(CudaTest, PrefillTensorCoresWholeInvalidFirstTilePoisonsItsRows) {
  KernelGuard guard;
  for (int kernel : {kMma, kFa2b}) {
    cuda::set_attention_prefill_kernel_for_testing(kernel);
    Scenario s = batch_scenario(2, 64, {100, 90}, {20, 20});
    s.block_size = 4;
    s.out_dtype = DType::kF32;
    std::mt19937 rng(303);
    Batch b = make_batch(s, rng);
    const OwnedTensor want = reference_out(b, s);
    for (int blk = 0; blk < 16; ++blk) b.block_tables.tensor.ptr<int32_t>()[b.block_tables.tensor.shape[1] + blk] = -1;
    DeviceBatch d = upload(b, DType::kF32, rng);
    paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    const std::vector<float> got = values(d.out.download().tensor), ok = values(want.tensor);
    for (size_t i = 0; i < got.size(); ++i) {
      if (i < got.size() / 2)
        EXPECT_NEAR(got[i], ok[i], 0.03f) << kernel_name(kernel) << " " << i;
      else
        EXPECT_TRUE(std::isnan(got[i])) << kernel_name(kernel) << " " << i;
    }
  }
}

// ---- benchmark ----

struct PrefillBench {
  double us_per_layer = 0.0, tflops = 0.0;
};

// One prompt of n tokens (no cached prefix) on the Llama-3.1-8B shape (32 q heads, 8 kv heads, head_dim
// 128), bf16 cache in blocks of 16 (it stays in L2: prefill is compute-bound); kLayers calls timed with CUDA events after a warm-up.
// fresh > 0: only the last `fresh` of the n tokens are queries (a chunk over a cached prefix of n - fresh);
// splits: set_prefill_splits_for_testing (0 = from the shapes, 1 = never).
PrefillBench bench_prefill(int64_t n, int kernel, int64_t fresh = 0, int splits = 0) {
  constexpr int64_t kHeads = 32, kKv = 8, kHd = 128, kBlock = 16, kLayers = 8;
  KernelGuard guard;
  cuda::set_attention_prefill_kernel_for_testing(kernel);
  cuda::set_prefill_splits_for_testing(splits);
  const int64_t nq = fresh > 0 ? fresh : n;
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context c;
  c.cuda_stream = stream;
  const int64_t n_blocks = (n + kBlock - 1) / kBlock;
  std::mt19937 rng(503);
  DeviceTensor k = DeviceTensor::upload(random_tensor(DType::kBF16, {n_blocks, kBlock, kKv, kHd}, rng).tensor);
  DeviceTensor v = DeviceTensor::upload(random_tensor(DType::kBF16, {n_blocks, kBlock, kKv, kHd}, rng).tensor);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  OwnedTensor tables = OwnedTensor::make(DType::kI32, {1, n_blocks});
  OwnedTensor positions = OwnedTensor::make(DType::kI32, {nq}), seq_index = OwnedTensor::make(DType::kI32, {nq});
  std::copy(ids.begin(), ids.end(), tables.tensor.ptr<int32_t>());
  for (int64_t t = 0; t < nq; ++t) {
    positions.tensor.ptr<int32_t>()[t] = static_cast<int32_t>(n - nq + t);
    seq_index.tensor.ptr<int32_t>()[t] = 0;
  }
  DeviceTensor dt = DeviceTensor::upload(tables.tensor), dp = DeviceTensor::upload(positions.tensor),
               ds = DeviceTensor::upload(seq_index.tensor);
  DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {nq, kHeads, kHd}, rng, -1.0f, 1.0f).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {nq, kHeads, kHd}, rng).tensor);
  const AttentionMeta meta{dp.tensor, ds.tensor, dt.tensor, {}};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(kHd)), 0, 0.0f, {}};
  const PagedKv cache{k.tensor, v.tensor};
  auto layers = [&] {
    for (int64_t l = 0; l < kLayers; ++l) paged_attention(c, out.tensor, q.tensor, cache, meta, params);
  };
  const auto warm_start = std::chrono::steady_clock::now();  // until the clocks have ramped up
  for (int i = 0; i < 3 || std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(150); ++i) {
    layers();
    cuda::synchronize(stream);
  }
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  constexpr int kReps = 10;
  cudaEventRecord(t0, stream);
  for (int i = 0; i < kReps; ++i) layers();
  cudaEventRecord(t1, stream);
  cudaEventSynchronize(t1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, t0, t1);
  for (float x : values(out.download().tensor)) EXPECT_TRUE(std::isfinite(x));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cuda::stream_destroy(stream);
  PrefillBench r;
  r.us_per_layer = 1000.0 * ms / (kReps * kLayers);
  const double seen = static_cast<double>(nq) * (n - nq) + static_cast<double>(nq) * nq / 2.0;  // causal
  const double flops = 4.0 * seen * kHd * kHeads;
  r.tflops = flops / (r.us_per_layer * 1e-6) / 1e12;
  return r;
}

// BUNSEN_BENCH_ATTENTION=1 test_cuda --gtest_filter='*PrefillAttentionBench*'
TEST_F(CudaTest, PrefillAttentionBench) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  for (int64_t n : {512, 2048, 8192})
    for (int kernel : kKernels) {
      const PrefillBench r = bench_prefill(n, kernel);
      std::printf("prefill attention llama3.1-8b n %5lld %-10s %9.1f us/layer %7.1f TFLOP/s\n", (long long)n,
                  kernel_name(kernel), r.us_per_layer, r.tflops);
    }
  // A new turn over a long cached conversation (issue 7's re-attach): fa2b with and without split-KV.
  for (int64_t fresh : {64, 256})
    for (int splits : {1, 0}) {
      const PrefillBench r = bench_prefill(13824, kFa2b, fresh, splits);
      std::printf("prefill attention llama3.1-8b %lld new over 13824 fa2b %-9s %9.1f us/layer %7.1f TFLOP/s\n",
                  (long long)fresh, splits == 1 ? "no split" : "split-KV", r.us_per_layer, r.tflops);
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
