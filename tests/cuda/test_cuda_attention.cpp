// CUDA rope, kv_write and paged_attention through ops.h against kernels/ref: varlen batches of
// several sequences with shuffled block tables, GQA 1/2/8, odd head dims and block sizes, sliding
// windows with released blocks, softcap, bf16 caches, bf16 q/out, long-context decode (4096, split-KV
// auto and forced), prefill tiles that mix sequences, invalid block ids (NaN, no fault), and a CUDA
// graph capture of a decode-like chain whose replays equal the eager results. Flash-decoding itself is
// covered in depth by test_cuda_attention_decode.cpp; the benchmark is test_cuda_attention_bench.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "attention_test_util.h"

namespace bunsen::kernels::test {
namespace {

TEST_F(CudaTest, AttentionVarlenBatchForGqaRatiosAndDtypes) {
  for (int64_t group : {1, 2, 8})
    for (DType q_dt : kActDtypes) {
      Scenario s;
      s.n_kv_heads = 2;
      s.n_heads = 2 * group;
      s.q_dtype = q_dt;
      s.out_dtype = q_dt;
      s.seq_lens = {1, 37, 70, 5};
      s.new_tokens = {1, 6, 1, 5};  // decode, prefill chunk, decode, whole prompt
      s.params.scale = 0.125f;
      check_attention(ctx_, s, strfmt("gqa %lld q %s", (long long)group, dtype_name(q_dt)));
    }
}

TEST_F(CudaTest, AttentionOddHeadDimsAndBlockSizes) {
  for (int64_t head_dim : {1, 40, 72, 128, 130, 256, 512})
    for (int64_t block_size : {1, 3, 16}) {
      Scenario s;
      s.n_heads = 6;
      s.n_kv_heads = 3;
      s.head_dim = head_dim;
      s.block_size = block_size;
      s.cache_dtype = head_dim % 2 == 0 ? DType::kBF16 : DType::kF32;
      s.seq_lens = {33, 2, 90};
      s.new_tokens = {2, 2, 3};
      s.params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      check_attention(ctx_, s,
                      strfmt("head_dim %lld block %lld", (long long)head_dim, (long long)block_size));
    }
}

TEST_F(CudaTest, AttentionSlidingWindowSoftcapAndBf16Cache) {
  for (DType dt : kActDtypes)
    for (int window : {0, 1, 5, 20})
      for (float softcap : {0.0f, 5.0f}) {
        Scenario s;
        s.n_heads = 8;
        s.n_kv_heads = 1;
        s.cache_dtype = dt;
        s.seq_lens = {100, 23, 64};
        s.new_tokens = {1, 23, 4};
        s.params = {0.4f, window, softcap, {}};  // scale large enough for softcap to bite
        s.release_out_of_window = true;
        check_attention(ctx_, s, strfmt("%s window %d softcap %g", dtype_name(dt), window, softcap));
      }
}

// Many decode rows (rows x kv heads fill the GPU): the tensor-core kernel, one sequence per block.
TEST_F(CudaTest, AttentionLargeDecodeBatchOnTensorCores) {
  Scenario s;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.cache_dtype = DType::kBF16;
  s.q_dtype = DType::kBF16;
  for (int i = 0; i < 48; ++i) {
    s.seq_lens.push_back(1 + (i * 97) % 1500);
    s.new_tokens.push_back(1);
  }
  s.params.scale = 0.088f;
  s.out_dtype = DType::kBF16;  // that kernel rounds P to bf16: bf16-level error (measured 1.3e-3 relative)
  cuda::set_attention_flash_decode_for_testing(true);
  check_attention(ctx_, s, "48 decode rows");
  s.params.sliding_window = 300;
  s.release_out_of_window = true;
  check_attention(ctx_, s, "48 decode rows, window 300");
  s.n_heads = 16;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.params.sliding_window = 0;
  s.release_out_of_window = false;
  s.params.softcap = 30.0f;
  check_attention(ctx_, s, "48 decode rows, head_dim 64, softcap");
  cuda::set_attention_flash_decode_for_testing(false);
  s.out_dtype = DType::kF32;
  check_attention(ctx_, s, "48 decode rows, head_dim 64, softcap, flash-decoding");
}

TEST_F(CudaTest, AttentionLongContextDecodeAutoAndForcedSplits) {
  for (int splits : {0, 1, 3, 7, 64}) {
    cuda::set_attention_splits_for_testing(splits);
    Scenario s;
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.head_dim = 128;
    s.block_size = 16;
    s.cache_dtype = DType::kBF16;
    s.q_dtype = DType::kBF16;
    s.seq_lens = {4096, 1000, 4095, 1};
    s.new_tokens = {1, 1, 1, 1};
    s.params.scale = 0.088f;
    check_attention(ctx_, s, strfmt("long context, splits %d", splits));
    s.params.sliding_window = 1024;  // and a window inside the long context
    s.release_out_of_window = true;
    check_attention(ctx_, s, strfmt("long context window 1024, splits %d", splits));
  }
}

TEST_F(CudaTest, AttentionPrefillTilesOfSeveralSequences) {
  for (bool interleave : {false, true})
    for (int64_t group : {1, 4, 7}) {
      Scenario s;
      s.n_kv_heads = 2;
      s.n_heads = 2 * group;
      s.head_dim = 64;
      s.block_size = 16;
      s.cache_dtype = DType::kBF16;
      s.seq_lens = {300, 129, 47, 260};
      s.new_tokens = {300, 129, 12, 1};  // whole prompts, a chunk, a decode
      s.params = {0.125f, group == 4 ? 100 : 0, 0.0f, {}};
      s.interleave = interleave;
      check_attention(ctx_, s, strfmt("prefill group %lld interleave %d", (long long)group, interleave));
      cuda::set_attention_splits_for_testing(3);  // split-KV must also be right for prefill tiles
      check_attention(ctx_, s,
                      strfmt("prefill group %lld interleave %d splits 3", (long long)group, interleave));
      cuda::set_attention_splits_for_testing(0);
    }
}

TEST_F(CudaTest, AttentionInvalidBlockIdPoisonsOnlyItsSequence) {
  for (int splits : {1, 4}) {
    cuda::set_attention_splits_for_testing(splits);
    Scenario s;
    s.seq_lens = {40, 40};
    s.new_tokens = {3, 3};
    s.params.scale = 0.125f;
    std::mt19937 rng(302);
    Batch b = make_batch(s, rng);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {6, 4, 64});
    ref::paged_attention(want.tensor, b.q.f32.tensor, b.cache(), b.meta(), s.params);
    b.block_tables.tensor.ptr<int32_t>()[b.block_tables.tensor.shape[1] + 2] = 1 << 20;  // seq 1, block 2
    DeviceBatch d = upload(b, DType::kF32, rng);
    paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    const std::vector<float> got = values(d.out.download().tensor), ok = values(want.tensor);
    for (size_t i = 0; i < got.size(); ++i) {
      if (i < got.size() / 2)
        EXPECT_NEAR(got[i], ok[i], 1e-4f) << i;
      else
        EXPECT_TRUE(std::isnan(got[i])) << i;
    }
  }
}

TEST_F(CudaTest, KvWriteMatchesReferenceBitwiseAndSkipsBadSlots) {
  std::mt19937 rng(303);
  for (DType cache_dt : kActDtypes)
    for (DType kv_dt : kActDtypes) {
      const int64_t n_tokens = 9, kvh = 2, hd = 33;
      // k and v are column slices of one fused [n_tokens, 8 heads * hd] projection output.
      HostPair fused = random_pair(kv_dt, {n_tokens, 8 * hd}, rng);
      auto kv_view = [&](const Tensor& f, int64_t head0) {
        Tensor t = f.slice(1, head0 * hd, (head0 + kvh) * hd);
        t.ndim = 3;
        t.shape[1] = kvh;
        t.shape[2] = hd;
        t.strides[0] = 8 * hd;
        t.strides[1] = hd;
        t.strides[2] = 1;
        return t;
      };
      OwnedTensor kc = random_tensor(cache_dt, {6, 3, kvh, hd}, rng),
                  vc = random_tensor(cache_dt, {6, 3, kvh, hd}, rng);
      OwnedTensor kc_ref = clone(kc.tensor), vc_ref = clone(vc.tensor);
      OwnedTensor slots = OwnedTensor::make(DType::kI64, {n_tokens});
      const int64_t slot_values[n_tokens] = {17, -1, 0, 5, 16, -1, 2, 9, 12};
      std::memcpy(slots.tensor.data, slot_values, sizeof(slot_values));
      ref::kv_write({kc_ref.tensor, vc_ref.tensor}, kv_view(fused.f32.tensor, 4),
                    kv_view(fused.f32.tensor, 6), slots.tensor);
      slots.tensor.ptr<int64_t>()[1] = 18;  // past the cache (18 slots): skipped on CUDA, never written
      DeviceTensor fd = DeviceTensor::upload(fused.data.tensor), sd = DeviceTensor::upload(slots.tensor);
      DeviceTensor kd = DeviceTensor::upload(kc.tensor), vd = DeviceTensor::upload(vc.tensor);
      kv_write(ctx_, {kd.tensor, vd.tensor}, kv_view(fd.tensor, 4), kv_view(fd.tensor, 6), sd.tensor);
      OwnedTensor kg = kd.download(), vg = vd.download();
      const std::string what = strfmt("cache %s k/v %s", dtype_name(cache_dt), dtype_name(kv_dt));
      EXPECT_EQ(std::memcmp(kg.tensor.data, kc_ref.tensor.data, kg.tensor.nbytes()), 0) << what;
      EXPECT_EQ(std::memcmp(vg.tensor.data, vc_ref.tensor.data, vg.tensor.nbytes()), 0) << what;
    }
}

TEST_F(CudaTest, RopeMatchesReferenceOnFusedQkvAndLeavesTheRest) {
  std::mt19937 rng(304);
  for (DType dt : kActDtypes)
    for (int64_t head_dim : {20, 64, 128}) {
      const int64_t n_tokens = 7, n_heads = 3, rotary_dim = head_dim == 20 ? 12 : head_dim,
                    half = rotary_dim / 2;
      std::vector<float> inv_freq(half);
      for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary_dim);
      const RopeParams p{inv_freq.data(), static_cast<int>(rotary_dim), 1.25f};
      HostPair fused = random_pair(dt, {n_tokens, 5 * head_dim}, rng);  // q of a fused [q | k k] row
      auto q_view = [&](const Tensor& f) {
        Tensor t = f;
        t.ndim = 3;
        t.shape[1] = n_heads;
        t.shape[2] = head_dim;
        t.strides[0] = 5 * head_dim;
        t.strides[1] = head_dim;
        t.strides[2] = 1;
        return t;
      };
      OwnedTensor positions = OwnedTensor::make(DType::kI32, {n_tokens});
      const int32_t pos[n_tokens] = {0, 1, 2, 17, 4095, 100000, 3};
      std::memcpy(positions.tensor.data, pos, sizeof(pos));
      OwnedTensor want = clone(fused.f32.tensor);
      ref::rope(q_view(want.tensor), positions.tensor, p);
      DeviceTensor fd = DeviceTensor::upload(fused.data.tensor), pd = DeviceTensor::upload(positions.tensor);
      rope(ctx_, q_view(fd.tensor), pd.tensor, p);
      OwnedTensor got = fd.download();
      expect_close(got.tensor, want.tensor, tolerance(dt, 1e-5f),
                   strfmt("rope %s head_dim %lld", dtype_name(dt), (long long)head_dim));
      const std::vector<float> g = values(got.tensor), before = values(fused.data.tensor);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t col = 0; col < 5 * head_dim; ++col)
          if (col / head_dim >= n_heads || col % head_dim >= rotary_dim) {
            ASSERT_EQ(g[t * 5 * head_dim + col], before[t * 5 * head_dim + col]) << t << " " << col;
          }
    }
}

// A decode-like chain captured into a CUDA graph on a non-default stream: replays equal eager runs.
TEST_F(CudaTest, GraphCaptureOfDecodeChainReplaysEagerResults) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context ctx;
  ctx.cuda_stream = stream;
  cuda::set_attention_splits_for_testing(5);  // make attention use the scratch arena
  std::mt19937 rng(305);
  Scenario s;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.cache_dtype = DType::kBF16;
  s.q_dtype = DType::kBF16;
  s.seq_lens = {500, 77};
  s.new_tokens = {1, 1};
  s.params.scale = 0.125f;
  Batch b = make_batch(s, rng);
  DeviceBatch d = upload(b, DType::kBF16, rng);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {17, 512}, rng).tensor);
  DeviceTensor w = DeviceTensor::upload(random_tensor(DType::kBF16, {512, 512}, rng).tensor);
  DeviceTensor nw = DeviceTensor::upload(random_tensor(DType::kBF16, {512}, rng).tensor);
  DeviceTensor h = DeviceTensor::upload(random_tensor(DType::kBF16, {17, 512}, rng).tensor);
  DeviceTensor y2 = DeviceTensor::upload(random_tensor(DType::kF32, {2, 512}, rng).tensor);
  DeviceTensor y17 = DeviceTensor::upload(random_tensor(DType::kBF16, {17, 512}, rng).tensor);
  auto step = [&] {
    rms_norm(ctx, h.tensor, x.tensor, nw.tensor, 1e-6f, 1.0f);
    linear(ctx, y2.tensor, h.tensor.slice(0, 0, 2), w.tensor);  // GEMV
    linear(ctx, y17.tensor, h.tensor, w.tensor);                // cuBLASLt
    paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
  };
  step();  // eager: also grows the stream's scratch arena and creates the cuBLASLt plans
  cuda::synchronize(stream);
  const std::vector<float> y2_eager = values(y2.download().tensor), y17_eager = values(y17.download().tensor),
                           attn_eager = values(d.out.download().tensor);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  step();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    cuda::copy_to_device(y2.tensor.data, random_tensor(DType::kF32, {2, 512}, rng).tensor.data,
                         y2.tensor.nbytes(), stream);
    cuda::copy_to_device(d.out.tensor.data, random_tensor(DType::kBF16, {2, 8, 64}, rng).tensor.data,
                         d.out.tensor.nbytes(), stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    cuda::synchronize(stream);
    expect_close(values(y2.download().tensor), y2_eager, 0.0f, "graph gemv");
    expect_close(values(y17.download().tensor), y17_eager, 1e-6f, "graph gemm");
    expect_close(values(d.out.download().tensor), attn_eager, 0.0f, "graph attention");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A fresh stream has no arena yet: an op that needs scratch while capturing must refuse, not allocate.
  cudaStream_t fresh = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking), cudaSuccess);
  Context fctx;
  fctx.cuda_stream = fresh;
  ASSERT_EQ(cudaStreamBeginCapture(fresh, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    paged_attention(fctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    ADD_FAILURE() << "no error while capturing without scratch";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "cuda");
    EXPECT_NE(e.message().find("capturing"), std::string::npos) << e.what();
  }
  cudaGraph_t empty = nullptr;
  cudaStreamEndCapture(fresh, &empty);
  if (empty != nullptr) cudaGraphDestroy(empty);
  cudaGetLastError();
  cuda::stream_destroy(fresh);
  cuda::stream_destroy(stream);
}

}  // namespace
}  // namespace bunsen::kernels::test
