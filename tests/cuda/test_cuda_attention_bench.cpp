// Decode-attention micro-benchmark on the Llama-3.1-8B shape (32 q heads, 8 kv heads, head_dim 128) and the
// wide-head shapes of Gemma 4 E4B (sliding: 8 / 2 heads at 256, window 512; global: 8 / 2 at 512) and
// Qwen3.5 4B full attention (16 / 4 at 256), bf16 cache in blocks of 16: 32 layers' calls captured in a
// CUDA graph (as the runner replays decode steps), timed with CUDA events; prints us per layer and the
// visible K/V bytes read per second. A measurement tool, not a speed assertion: it runs only with
// BUNSEN_BENCH_ATTENTION=1 and asserts only that outputs are finite. Layers cycle over enough distinct
// caches that a layer's K/V is not still in L2 from the previous call. DecodeAttentionBenchBatch1 compares
// the split path (separate combine kernel, the default; fused combine) with the cluster path (a row's slices
// in one thread-block cluster, BUNSEN_DECODE_ATTN=cluster) at batch 1/8/64, alone and behind a rope_kv_write
// of the newest key per layer (the model's order: what the cluster path's early copies overlap with).
// DecodeAttentionBenchBatched compares, at batch 16/64/256 x 1k/4k keys, the split kernel with the packed
// kernel of batched steps (one kv head per warp, BUNSEN_DECODE_BATCHED), its slice counts, and the choice.
// DecodeAttentionBenchQuantized: batched steps over an int8 / fp8 cache, tensor cores vs SIMT vs bf16.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attention_test_util.h"
#include "kernels/cuda/attention_decode.cuh"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kLayers = 32, kBlock = 16;

struct BenchShape {
  const char* name;
  int64_t n_heads, n_kv_heads, head_dim;
  int window;
};

constexpr BenchShape kLlama{"llama3.1-8b", 32, 8, 128, 0};

struct BenchResult {
  double us_per_layer = 0.0, gb_per_s = 0.0;
};

// path: 0 flash-decoding (default: tensor cores), 1 flash-decoding on SIMT (attention.cu's general kernel
// for shapes SIMT flash-decoding does not take), 2 attention_prefill.cu. combine: as
// set_attention_decode_combine_for_testing (0 default, 1 fused, 2 combine kernel); splits: forced slice
// count (0: chosen); decode_path: as set_attention_decode_path_for_testing (1 split, 2 cluster; 0 env or
// shape); with_write: each layer first writes the newest key and value of every row with rope_kv_write (no
// rotation), as the model does right before attention; the time then covers both. batched: as
// set_attention_decode_batched_for_testing (0: BUNSEN_DECODE_BATCHED, by shape when unset; 1: never;
// 2: the packed kernel, 4 warps per block; 3: 8 warps). bulk: as set_attention_decode_bulk_for_testing (0:
// BUNSEN_DECODE_BULK; 1: cp.async copies; 2: bulk copies). hnd: the caches' blocks laid out [kv head, slot,
// dim] instead of [slot, kv head, dim] (strided views of the same buffers: what a head-major pool would
// give each warp, one contiguous 4 KB run per cache block; not with with_write). depth: as
// set_attention_decode_packed_depth_for_testing. shuffle false: each row's cache blocks in id order (a
// row's keys contiguous in memory) instead of ids shuffled over the pool. kv_bits 8: an int8 cache (kv_fp8:
// e4m3; 4: int4) in groups of 64 dims, codes and params as --kv-quant stores them (bytes counted: codes and
// params).
BenchResult bench_decode(const BenchShape& sh, int64_t batch, int64_t ctx, int path, int combine = 0,
                         int splits = 0, int decode_path = 0, bool with_write = false, int batched = 0,
                         int bulk = 0, bool hnd = false, int depth = 0, bool shuffle = true, int kv_bits = 0,
                         bool kv_fp8 = false) {
  const int64_t n_heads = sh.n_heads, n_kv_heads = sh.n_kv_heads, head_dim = sh.head_dim;
  cuda::set_attention_flash_decode_for_testing(path == 2);
  cuda::set_attention_decode_variant_for_testing(path == 1 ? 1 : 0);
  cuda::set_attention_decode_combine_for_testing(combine);
  cuda::set_attention_splits_for_testing(splits);
  cuda::set_attention_decode_path_for_testing(decode_path);
  cuda::set_attention_decode_batched_for_testing(batched);
  cuda::set_attention_decode_bulk_for_testing(bulk);
  cuda::set_attention_decode_packed_depth_for_testing(depth);
  cuda::set_attention_decode_quant_mma_for_testing(path == 0 ? 2 : 1);  // (quantized caches only)
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context c;
  c.cuda_stream = stream;
  const Device dev = Device::cuda(cuda::current_device());
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock, n_blocks = batch * blocks_per_seq;
  const int64_t width = std::max<int64_t>(blocks_per_seq, 8192 / kBlock);  // a runner's max_context >= 8k
  const bool quant = kv_bits != 0;
  constexpr int kQGroup = 64;
  const int64_t n_rows = n_blocks * kBlock * n_kv_heads, par_per_row = 2 * (head_dim / kQGroup);
  const int64_t row_code_bytes = quant ? head_dim * kv_bits / 8 : 2 * head_dim;
  const size_t cache_bytes = static_cast<size_t>(n_rows * row_code_bytes);
  const size_t par_bytes = quant ? static_cast<size_t>(n_rows * par_per_row) * sizeof(float) : 0;
  const int64_t n_caches =
      std::min<int64_t>(kLayers, (int64_t{256} << 20) / static_cast<int64_t>(cache_bytes + par_bytes) + 1);
  std::vector<cuda::DeviceBuffer> ks, vs, kps, vps;
  // Params (scale 0.01, bias -0.5 per group; e4m3 bias 0), the same for every row.
  std::vector<float> par(quant ? static_cast<size_t>(n_rows * par_per_row) : 0);
  for (size_t i = 0; i < par.size(); ++i) par[i] = i % 2 == 0 ? 0.01f : kv_fp8 ? 0.0f : -0.5f;
  for (int64_t i = 0; i < n_caches; ++i) {
    ks.emplace_back(cache_bytes);
    vs.emplace_back(cache_bytes);
    // bf16 0x3c3c ~ 0.0115 everywhere; int8 code 60; int4 codes 12 and 3; e4m3 0x3c = 1.5
    cudaMemset(ks.back().data(), 0x3c, cache_bytes);
    cudaMemset(vs.back().data(), 0x3c, cache_bytes);
    if (quant) {
      kps.emplace_back(par_bytes);
      vps.emplace_back(par_bytes);
      cudaMemcpy(kps.back().data(), par.data(), par_bytes, cudaMemcpyHostToDevice);
      cudaMemcpy(vps.back().data(), par.data(), par_bytes, cudaMemcpyHostToDevice);
    }
  }
  std::mt19937 rng(501);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  if (shuffle) std::shuffle(ids.begin(), ids.end(), rng);
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
  DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, n_heads, head_dim}, rng).tensor);
  DeviceTensor out =
      DeviceTensor::upload(random_tensor(DType::kBF16, {batch, n_heads, head_dim}, rng).tensor);
  const AttentionMeta meta{dp.tensor, ds.tensor, dt.tensor, {}};
  // The newest rows' slots (position ctx - 1 of every sequence) and the rows rope_kv_write stores there.
  OwnedTensor slots = OwnedTensor::make(DType::kI64, {batch});
  for (int64_t s = 0; s < batch; ++s)
    slots.tensor.ptr<int64_t>()[s] = static_cast<int64_t>(ids[s * blocks_per_seq + (ctx - 1) / kBlock]) * kBlock +
                                     (ctx - 1) % kBlock;
  DeviceTensor dslots = DeviceTensor::upload(slots.tensor);
  DeviceTensor wq = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, n_heads, head_dim}, rng).tensor);
  DeviceTensor wk = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, n_kv_heads, head_dim}, rng).tensor);
  DeviceTensor wv = DeviceTensor::upload(random_tensor(DType::kBF16, {batch, n_kv_heads, head_dim}, rng).tensor);
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(head_dim)), sh.window, 0.0f, {}};
  auto layers = [&] {
    for (int64_t l = 0; l < kLayers; ++l) {
      const auto i = static_cast<size_t>(l % n_caches);
      const std::initializer_list<int64_t> shape = {n_blocks, kBlock, n_kv_heads,
                                                    quant ? row_code_bytes : head_dim};
      const std::initializer_list<int64_t> pshape = {n_blocks, kBlock, n_kv_heads, par_per_row};
      const DType cdt = quant ? DType::kU8 : DType::kBF16;
      PagedKv cache{Tensor::view(ks[i].data(), cdt, shape, dev), Tensor::view(vs[i].data(), cdt, shape, dev)};
      if (quant)
        cache = PagedKv{cache.k,
                        cache.v,
                        Tensor::view(kps[i].data(), DType::kF32, pshape, dev),
                        Tensor::view(vps[i].data(), DType::kF32, pshape, dev),
                        kv_bits,
                        kQGroup,
                        kv_fp8};
      if (hnd)
        for (Tensor* t : {&cache.k, &cache.v}) {
          t->strides[1] = head_dim;           // slot
          t->strides[2] = kBlock * head_dim;  // kv head
        }
      if (with_write) rope_kv_write(c, wq.tensor, wk.tensor, wv.tensor, cache, dp.tensor, dslots.tensor, {});
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
  cuda::stream_destroy(stream);
  cuda::set_attention_flash_decode_for_testing(false);
  cuda::set_attention_decode_variant_for_testing(0);
  cuda::set_attention_decode_combine_for_testing(0);
  cuda::set_attention_splits_for_testing(0);
  cuda::set_attention_decode_path_for_testing(0);
  cuda::set_attention_decode_batched_for_testing(0);
  cuda::set_attention_decode_bulk_for_testing(0);
  cuda::set_attention_decode_packed_depth_for_testing(0);
  cuda::set_attention_decode_quant_mma_for_testing(0);
  BenchResult r;
  r.us_per_layer = 1000.0 * ms / (kReps * kLayers);
  const int64_t visible = sh.window > 0 ? std::min<int64_t>(ctx, sh.window) : ctx;
  const double row_bytes = static_cast<double>(row_code_bytes + (quant ? par_per_row * 4 : 0));
  const double bytes = static_cast<double>(batch * visible * n_kv_heads) * row_bytes * 2;
  r.gb_per_s = bytes / (r.us_per_layer * 1e3);
  return r;
}

void print_result(const BenchShape& sh, int64_t batch, int64_t ctx, const char* path, const BenchResult& r) {
  std::printf(
      "decode attention %-18s batch %4lld ctx %6lld %-22s %9.1f us/layer %7.0f GB/s %8.3f ms/32 layers\n",
      sh.name, (long long)batch, (long long)ctx, path, r.us_per_layer, r.gb_per_s,
      r.us_per_layer * kLayers / 1000.0);
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
      if (path == 2 && k.batch * kLlama.n_kv_heads < 2 * 132)
        continue;  // tensor cores need rows to fill the GPU
      const BenchResult r = bench_decode(kLlama, k.batch, k.ctx, path);
      print_result(kLlama, k.batch, k.ctx,
                   path == 0   ? "split-kv/mma"
                   : path == 1 ? "split-kv/simt"
                               : "tc-prefill-path",
                   r);
    }
}

// Batch 1 on the Llama-3.1-8B shape (the latency case: 8 rows of 8 kv heads cannot fill the GPU, so the
// fixed costs of a slice block and of merging the slices dominate), and batch 8 and 64 (which must not get
// slower): the split path (separate combine kernel = the default, and fused combine) against the cluster
// path (chosen cluster size, then forced 4 / 8 / 16 at batch 1), each alone ("attn") and behind a
// rope_kv_write per layer ("+write": the model's order; the us/layer then covers both kernels).
// BUNSEN_BENCH_ATTENTION=1 test_cuda --gtest_filter='*DecodeAttentionBenchBatch1*'
TEST_F(CudaTest, DecodeAttentionBenchBatch1) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  struct Variant {
    const char* name;
    int combine, splits, decode_path;
  };
  const Variant variants[] = {{"split/combine-krn", 2, 0, 1}, {"split/fused", 1, 0, 1}, {"cluster", 0, 0, 2},
                              {"cluster/c4", 0, 4, 2},        {"cluster/c8", 0, 8, 2},  {"cluster/c16", 0, 16, 2}};
  for (bool with_write : {false, true})
    for (int64_t batch : {1, 8, 64})
      for (int64_t ctx : {256, 1024, 4096})
        for (const Variant& v : variants) {
          if (batch > 1 && v.splits > 0) continue;
          const BenchResult r = bench_decode(kLlama, batch, ctx, 0, v.combine, v.splits, v.decode_path, with_write);
          char name[40];
          std::snprintf(name, sizeof(name), "%s%s", v.name, with_write ? "+write" : "");
          print_result(kLlama, batch, ctx, name, r);
        }
  for (int64_t ctx : {256, 1024, 4096})
    for (int splits : {4, 8, 16, 32}) {  // the split path's slice counts, for reference
      const BenchResult r = bench_decode(kLlama, 1, ctx, 0, 2, splits, 1);
      char name[32];
      std::snprintf(name, sizeof(name), "split/s%d", splits);
      print_result(kLlama, 1, ctx, name, r);
    }
}

// Batched decode steps on the 8B shape (issue 6: serving throughput): the split kernel (one block per (row,
// kv head), 4 warps as key streams merged in shared memory) against the packed kernel (one kv head per warp,
// 4 kv heads per block, slices only to fill one wave, combine kernel) with its chosen slice count and
// forced 1 / 2 / 4, its 8-warp blocks (a row's 8 kv heads = whole 2 KB cache rows per key) chosen and
// forced 1, and the default choice ("chosen": what BUNSEN_DECODE_BATCHED unset runs), alone and
// behind a rope_kv_write per layer. Target: >= 3.5 TB/s at 64 and 256 x 1k (<= 80 us per layer at 64 x 1k).
// BUNSEN_BENCH_ATTENTION=1 test_cuda --gtest_filter='*DecodeAttentionBenchBatched*'
TEST_F(CudaTest, DecodeAttentionBenchBatched) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  struct Variant {
    const char* name;
    int batched, splits, bulk = 1;
    bool hnd = false;
  };
  const Variant variants[] = {{"split", 1, 0},
                              {"packed", 2, 0},
                              {"packed/s1", 2, 1},
                              {"packed/s2", 2, 2},
                              {"packed/s4", 2, 4},
                              {"packed8", 3, 0},
                              {"packed8/s1", 3, 1},
                              {"chosen", 0, 0, 0},
                              {"packed/bulk", 2, 0, 2},
                              {"packed8/bulk", 3, 0, 2},
                              {"packed/hnd", 2, 0, 1, true},
                              {"packed/bulk/hnd", 2, 0, 2, true}};
  for (bool with_write : {false, true})
    for (int64_t batch : {16, 64, 256})
      for (int64_t ctx : {1024, 4096})
        for (const Variant& v : variants) {
          if (with_write && (v.splits > 0 || v.hnd)) continue;
          const BenchResult r =
              bench_decode(kLlama, batch, ctx, 0, 0, v.splits, 1, with_write, v.batched, v.bulk, v.hnd);
          char name[40];
          std::snprintf(name, sizeof(name), "%s%s", v.name, with_write ? "+write" : "");
          print_result(kLlama, batch, ctx, name, r);
        }
  for (int64_t ctx : {256, 1024, 4096})  // batch 1 keeps the split path unless forced
    for (const Variant& v : {variants[0], variants[1], variants[5], variants[7]}) {
      const BenchResult r = bench_decode(kLlama, 1, ctx, 0, 0, v.splits, 1, false, v.batched, v.bulk);
      print_result(kLlama, 1, ctx, v.name, r);
    }
}

// Why the packed kernel streams KV at ~2.9 TB/s at most (H100 and H200 alike; H200 probe 4.29): the 8B shape
// at 16 rows x 4k keys with one slice (one warp per SM: a warp's own rate), 64 / 256 rows x 1k and 256 x 4k,
// with the default ring (3 stages: 2 tiles in flight per warp) or 5 stages (4 in flight), each row's blocks
// contiguous (no shuffle: page locality), cp.async or bulk copies. (The "copies alone" rows of
// docs/PERFORMANCE.md came from a switch that skipped the arithmetic, removed since: it changed the default
// kernel's code, 201 -> 173 registers.) BUNSEN_BENCH_ATTENTION=1 test_cuda
// --gtest_filter='*DecodeAttentionBenchPackedProbe*'
TEST_F(CudaTest, DecodeAttentionBenchPackedProbe) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  struct Probe {
    const char* name;
    int bulk, depth;
    bool shuffle;
  };
  const Probe probes[] = {{"packed", 1, 0, true},
                          {"packed/seq", 1, 0, false},
                          {"packed/bulk", 2, 0, true},
                          {"packed/d5", 1, 5, true},
                          {"packed/bulk/d5", 2, 5, true}};
  struct Case {
    int64_t batch, ctx;
    int splits;
  };
  for (const Case& c : {Case{16, 4096, 1}, Case{64, 1024, 0}, Case{256, 1024, 0}, Case{256, 4096, 0}})
    for (const Probe& p : probes) {
      const BenchResult r = bench_decode(kLlama, c.batch, c.ctx, 0, 0, c.splits, 1, false, 2, p.bulk, false,
                                         p.depth, p.shuffle);
      char name[40];
      std::snprintf(name, sizeof(name), "%s%s", p.name, c.splits == 1 ? "/s1" : "");
      print_result(kLlama, c.batch, c.ctx, name, r);
    }
}

// The wide heads (256/512) of Gemma 4 E4B and Qwen3.5 4B: tensor-core flash-decoding against the SIMT
// flash-decoding kernel (256) or attention.cu's general kernel (512, which SIMT flash-decoding does not
// take). BUNSEN_BENCH_ATTENTION=1 test_cuda --gtest_filter='*DecodeAttentionBenchWideHeads*'
// Batched decode steps over a quantized cache (int8 / e4m3 / int4, groups of 64): the packed tensor-core
// kernel (attention_decode_qmma.cu) against the SIMT kernel (variant 1) and against a bf16 cache on the
// packed bf16 kernel (and the bf16 split kernel), at 1, 16, 64 and 256 rows x 1k keys and 64 x 4k (below 16
// rows x 8 kv heads a step takes the split kernel by default: the rows at 1 and 16 say where the quantized
// cache's crossover lies). GB/s counts the bytes each cache holds per key.
TEST_F(CudaTest, DecodeAttentionBenchQuantized) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  struct Kind {
    const char* name;
    int path, bits;
    bool fp8;
  };
  const Kind kinds[] = {{"bf16 split", 2, 0, false},        {"bf16 packed", 0, 0, false},
                        {"int8 tensor cores", 0, 8, false}, {"int8 SIMT", 1, 8, false},
                        {"fp8 tensor cores", 0, 8, true},   {"fp8 SIMT", 1, 8, true},
                        {"int4 tensor cores", 0, 4, false}, {"int4 SIMT", 1, 4, false}};
  for (auto [batch, ctx] :
       {std::pair<int64_t, int64_t>{1, 1024}, {16, 1024}, {64, 1024}, {256, 1024}, {64, 4096}})
    for (const Kind& k : kinds) {
      // path 2: the bf16 split kernel (the packed kernel switched off)
      const BenchResult r = bench_decode(kLlama, batch, ctx, k.path == 2 ? 0 : k.path, 0, 0, 1, false,
                                         k.path == 0 ? 2 : 1, 0, false, 0, true, k.bits, k.fp8);
      std::printf("[ bench ] quantized %s batch %lld ctx %lld: %.1f us/layer, %.0f GB/s\n", k.name,
                  (long long)batch, (long long)ctx, r.us_per_layer, r.gb_per_s);
    }
}

TEST_F(CudaTest, DecodeAttentionBenchWideHeads) {
  const char* on = std::getenv("BUNSEN_BENCH_ATTENTION");
  if (on == nullptr || on[0] != '1') GTEST_SKIP() << "set BUNSEN_BENCH_ATTENTION=1 to run";
  const BenchShape shapes[] = {{"gemma4-e4b sliding", 8, 2, 256, 512},
                               {"qwen3.5-4b full", 16, 4, 256, 0},
                               {"gemma4-e4b global", 8, 2, 512, 0}};
  struct Case {
    int64_t batch, ctx;
  };
  for (const BenchShape& sh : shapes)
    for (Case k : {Case{1, 1024}, Case{1, 4096}, Case{64, 1024}, Case{64, 4096}})
      for (int path : {0, 1}) {
        const BenchResult r = bench_decode(sh, k.batch, k.ctx, path);
        const char* name = path == 0 ? "split-kv/mma" : sh.head_dim <= 256 ? "split-kv/simt" : "general-simt";
        print_result(sh, k.batch, k.ctx, name, r);
      }
}

}  // namespace
}  // namespace bunsen::kernels::test
