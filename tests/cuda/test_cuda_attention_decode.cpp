// CUDA flash-decoding (attention_decode.cu, the path of decode steps on a bf16 cache) against kernels/ref:
// sequences of very different lengths (1 .. 4097) in one step, GQA 1..16, head_dim 64/128/80/40/256/512,
// block sizes 16 and 5, f32/bf16 q and out, sliding windows, softcap, forced slice counts, a batch large
// enough to fill the GPU, invalid block ids inside one slice of a long row (NaN through the combine), K and
// V sharing one cache (Gemma 4's k_eq_v), and a CUDA graph captured at short contexts and replayed at
// longer ones (the slicing is decided on device). Head dims 256/512 run the tensor-core kernel's
// multi-warp key streams (S summed across warps); variant 1 sends 512 and groups > 8 to attention.cu.
// The fused combine (the last slice block of a row merges) against the reference and, bit for bit,
// against the separate combine kernel; one captured graph replayed many times over growing (and
// shrinking, and repeated) contexts, so the arrival counters must be back at zero after every launch.
// Every scenario also runs on the cluster path (parameter 2: a row's slices in one thread-block cluster,
// merged in distributed shared memory; shapes it does not take fall back to the split path), plus cluster
// sizes 1..16 against the reference, and each path with the newest keys written by rope_kv_write right
// before it (the cluster path copies older keys before its programmatic-dependent-launch wait). Parameters 3
// and 4 run every scenario on the packed tensor-core kernel of batched steps (one kv head per warp, blocks of
// 4 or 8 warps; shapes it does not take keep the split path), plus batches of several shapes and slice
// counts against the reference; parameters 5 and 6 the same with the packed kernel's bulk copies (sm_90),
// which must give the cp.async kernel's bits.
#include <cuda_runtime.h>

#include <cstring>

#include "attention_test_util.h"
#include "kernels/cuda/attention_decode.cuh"

namespace bunsen::kernels::test {
namespace {

// Parameter: the kernel (0: tensor cores (cp.async ring) on the split path, the default for small batches;
// 1: SIMT register loads; 2: tensor cores on the cluster path; 3 / 4: the packed tensor-core kernel, one kv
// head per warp, 4 / 8 warps per block, wherever it applies). 0..2 turn the packed kernel off, so they test
// what they always tested.
class CudaDecodeTest : public CudaTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    // 0 split (tensor cores), 1 SIMT, 2 cluster, 3 / 4 packed 4 / 8 warps, 5 / 6 the same with bulk copies.
    const int p = GetParam();
    set_decode_switches(p == 1 ? 1 : 0, p == 2 ? 2 : 1, 0,
                        p == 3 || p == 5   ? 2
                        : p == 4 || p == 6 ? 3
                                           : 1,
                        p >= 5 ? 2 : 1);
  }
  void TearDown() override {
    reset_decode_switches();
    CudaTest::TearDown();
  }
};

const std::vector<int64_t> kMixedLens = {1, 15, 16, 17, 1000, 4097};

TEST_P(CudaDecodeTest, MixedLengthsGqaAndHeadDims) {
  for (int64_t group : {1, 3, 4, 8})
    for (int64_t head_dim : {64, 128, 80, 40, 256}) {
      Scenario s = decode_scenario(group, head_dim, kMixedLens);
      check_attention(ctx_, s, strfmt("group %lld head_dim %lld", (long long)group, (long long)head_dim));
    }
}

// The wide heads of Gemma 3/4 and Qwen3.5 (256, Gemma 4 global 512) over GQA ratios 1..16 (rows 8..15
// of the MMA in use past 8), odd lengths and batch > 1 with mixed lengths; also groups > 8 at 64/128.
TEST_P(CudaDecodeTest, WideHeadsAndLargeGroups) {
  const std::vector<int64_t> lens = {1, 15, 17, 33, 511, 1000, 2049};
  for (int64_t head_dim : {256, 512})
    for (int64_t group : {1, 2, 4, 5, 8, 12, 16}) {
      Scenario s = decode_scenario(group, head_dim, lens);
      check_attention(ctx_, s, strfmt("group %lld head_dim %lld", (long long)group, (long long)head_dim));
    }
  for (int64_t head_dim : {64, 128})
    for (int64_t group : {9, 16}) {
      Scenario s = decode_scenario(group, head_dim, kMixedLens);
      check_attention(ctx_, s, strfmt("group %lld head_dim %lld", (long long)group, (long long)head_dim));
    }
}

// Gemma 4 shapes with f32 output (tight tolerance): sliding layers 8 q / 2 kv heads at 256 with window 512,
// global layers at 512 (8 / 2), scale 1 as Gemma 4 (q/k norms) and a soft-capped variant.
TEST_P(CudaDecodeTest, Gemma4ShapesF32Out) {
  for (int64_t head_dim : {256, 512})
    for (int window : {0, 512})
      for (float softcap : {0.0f, 30.0f}) {
        Scenario s = decode_scenario(4, head_dim, {1, 513, 777, 4097});
        s.out_dtype = DType::kF32;
        s.params = {head_dim == 512 ? 0.05f : 1.0f / 16.0f, window, softcap, {}};
        s.release_out_of_window = true;
        check_attention(
            ctx_, s, strfmt("head_dim %lld window %d softcap %g", (long long)head_dim, window, softcap), 406);
      }
}

TEST_P(CudaDecodeTest, F32QueriesAndOutputsOddBlockSizeAndKvHeads) {
  for (DType dt : kActDtypes)
    for (int64_t block_size : {5, 16}) {
      Scenario s = decode_scenario(4, 128, kMixedLens);
      s.n_kv_heads = 3;
      s.n_heads = 12;
      s.block_size = block_size;
      s.q_dtype = dt;
      s.out_dtype = dt;
      check_attention(ctx_, s, strfmt("q/out %s block %lld", dtype_name(dt), (long long)block_size));
    }
}

TEST_P(CudaDecodeTest, SlidingWindowAndSoftcap) {
  for (int window : {0, 1, 7, 300, 512})
    for (float softcap : {0.0f, 5.0f})
      for (int64_t head_dim : {64, 128, 256, 512}) {
        Scenario s = decode_scenario(4, head_dim, kMixedLens);
        s.out_dtype = DType::kF32;
        s.params = {0.3f, window, softcap, {}};  // scale large enough for softcap to bite
        s.release_out_of_window = true;
        check_attention(
            ctx_, s, strfmt("window %d softcap %g head_dim %lld", window, softcap, (long long)head_dim), 401);
      }
}

TEST_P(CudaDecodeTest, ForcedSliceCounts) {
  for (int64_t head_dim : {128, 256, 512})
    for (int splits : {1, 2, 5, 31, 128}) {
      cuda::set_attention_splits_for_testing(splits);
      Scenario s = decode_scenario(8, head_dim, kMixedLens);
      s.out_dtype = DType::kF32;
      const std::string what = strfmt("head_dim %lld splits %d", (long long)head_dim, splits);
      check_attention(ctx_, s, what, 402);
      s.params.sliding_window = 100;
      check_attention(ctx_, s, what + " window 100", 402);
    }
}

// 192 rows x 8 kv heads: more blocks than the GPU holds at once, one or two slices per row.
TEST_P(CudaDecodeTest, LargeBatchOfVariedLengths) {
  Scenario s = decode_scenario(4, 128, {});
  s.n_kv_heads = 8;
  s.n_heads = 32;
  for (int i = 0; i < 192; ++i) s.seq_lens.push_back(1 + (i * 211) % 700);
  s.new_tokens.assign(s.seq_lens.size(), 1);
  check_attention(ctx_, s, "192 decode rows", 403);
  s.params.sliding_window = 256;
  s.release_out_of_window = true;
  check_attention(ctx_, s, "192 decode rows, window 256", 403);
}

// 64 rows of varied lengths on the Gemma-4-like wide shapes (8 q / 2 kv heads at 256 and 512) and the
// Qwen3.5 full-attention shape (16 q / 4 kv heads at 256).
TEST_P(CudaDecodeTest, WideHeadBatchOfVariedLengths) {
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  for (Shape sh : {Shape{8, 2, 256}, Shape{16, 4, 256}, Shape{8, 2, 512}}) {
    Scenario s = decode_scenario(1, sh.head_dim, {});
    s.n_heads = sh.n_heads;
    s.n_kv_heads = sh.n_kv_heads;
    for (int i = 0; i < 64; ++i) s.seq_lens.push_back(1 + (i * 211) % 1300);
    s.new_tokens.assign(s.seq_lens.size(), 1);
    const std::string what = strfmt("64 rows %lld/%lld heads head_dim %lld", (long long)sh.n_heads,
                                    (long long)sh.n_kv_heads, (long long)sh.head_dim);
    check_attention(ctx_, s, what, 407);
    s.params.sliding_window = 512;
    s.release_out_of_window = true;
    check_attention(ctx_, s, what + " window 512", 407);
  }
}

// Gemma 4's attention_k_eq_v: one tensor serves as both K and V.
TEST_P(CudaDecodeTest, KeysAndValuesShareOneCache) {
  for (int64_t head_dim : {256, 512}) {
    Scenario s = decode_scenario(4, head_dim, {5, 300, 1025});
    s.out_dtype = DType::kF32;
    std::mt19937 rng(408);
    Batch b = make_batch(s, rng);
    const Tensor& q = b.q.f32.tensor;
    OwnedTensor want = OwnedTensor::make(DType::kF32, {q.shape[0], q.shape[1], q.shape[2]});
    ref::paged_attention(want.tensor, q, {b.k_cache.tensor, b.k_cache.tensor}, b.meta(), s.params);
    DeviceBatch d = upload(b, DType::kF32, rng);
    paged_attention(ctx_, d.out.tensor, d.q.tensor, {d.k.tensor, d.k.tensor}, d.meta(), s.params);
    expect_close(d.out.download().tensor, want.tensor, tolerance(DType::kF32, 1e-4f),
                 strfmt("k_eq_v head_dim %lld", (long long)head_dim));
  }
}

// A bad block id in the middle of a long row: its slice turns NaN and the combine must keep the NaN;
// the other row (and the runner's padding-like row: position 0, no blocks) behave as the reference.
TEST_P(CudaDecodeTest, InvalidBlockIdPoisonsOnlyItsRow) {
  for (int64_t head_dim : {128, 256, 512})
    for (int splits : {0, 1, 4}) {
      cuda::set_attention_splits_for_testing(splits);
      Scenario s = decode_scenario(4, head_dim, {900, 700, 1});
      s.out_dtype = DType::kF32;
      std::mt19937 rng(404);
      Batch b = make_batch(s, rng);
      const Tensor& q = b.q.f32.tensor;
      OwnedTensor want = OwnedTensor::make(DType::kF32, {q.shape[0], q.shape[1], q.shape[2]});
      ref::paged_attention(want.tensor, q, b.cache(), b.meta(), s.params);  // before the ids go bad
      int32_t* tables = b.block_tables.tensor.ptr<int32_t>();
      const int64_t width = b.block_tables.tensor.shape[1];
      tables[width + 20] = 1 << 20;  // seq 1, keys 320..335
      tables[2 * width] = -1;        // seq 2: a padding row
      DeviceBatch d = upload(b, DType::kF32, rng);
      paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
      const std::vector<float> got = values(d.out.download().tensor), ok = values(want.tensor);
      const size_t row = got.size() / 3;
      for (size_t i = 0; i < got.size(); ++i) {
        if (i < row)
          ASSERT_NEAR(got[i], ok[i], 1e-3f) << "head_dim " << head_dim << " splits " << splits << " at " << i;
        else
          ASSERT_TRUE(std::isnan(got[i])) << "head_dim " << head_dim << " splits " << splits << " at " << i;
      }
    }
}

// Captured at short contexts, replayed after the positions grew (same block tables, wider than needed):
// the replay equals the reference at the new positions, as the runner's graph buckets require.
void graph_replay_case(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads, int window) {
  SCOPED_TRACE(strfmt("head_dim %lld heads %lld/%lld window %d", (long long)head_dim, (long long)n_heads,
                      (long long)n_kv_heads, window));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context ctx;
  ctx.cuda_stream = stream;
  Scenario s = decode_scenario(4, head_dim, {3000, 4097, 40, 1500});
  s.n_kv_heads = n_kv_heads;
  s.n_heads = n_heads;
  s.params.sliding_window = window;
  std::mt19937 rng(405);
  Batch b = make_batch(s, rng);
  DeviceBatch d = upload(b, DType::kBF16, rng);
  const OwnedTensor want = reference_out(b, s);
  const std::vector<int32_t> long_pos(b.positions.tensor.ptr<int32_t>(),
                                      b.positions.tensor.ptr<int32_t>() + 4);
  const std::vector<int32_t> short_pos = {20, 0, 5, 33};
  auto set_positions = [&](const std::vector<int32_t>& p) {
    cuda::copy_to_device(d.positions.tensor.data, p.data(), p.size() * sizeof(int32_t), stream);
  };
  set_positions(short_pos);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);  // sizes the scratch
  cuda::synchronize(stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  set_positions(long_pos);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  cuda::synchronize(stream);
  const std::vector<float> replayed = values(d.out.download().tensor);
  expect_close(replayed, values(want.tensor), tolerance(DType::kBF16), "replay at long context");
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);  // eager, same inputs
  cuda::synchronize(stream);
  expect_close(values(d.out.download().tensor), replayed, 0.0f, "eager equals replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::stream_destroy(stream);
}

TEST_P(CudaDecodeTest, GraphCapturedAtShortContextReplaysLongerOnes) {
  graph_replay_case(128, 32, 8, 0);   // Llama 3.1 8B
  graph_replay_case(256, 8, 2, 512);  // Gemma 4 E4B sliding layers
  graph_replay_case(256, 16, 4, 0);   // Qwen3.5 4B full-attention layers
  graph_replay_case(512, 8, 2, 0);    // Gemma 4 E4B global layers
}

// Refills a device tensor with random garbage (stream-ordered, synchronous).
void scramble(DeviceTensor& t, std::mt19937& rng, void* stream) {
  OwnedTensor g = OwnedTensor::make(t.tensor.dtype, std::span<const int64_t>(t.tensor.shape, t.tensor.ndim));
  fill_uniform(g.tensor, rng, -9.0f, 9.0f);
  cuda::copy_to_device(t.tensor.data, g.tensor.data, g.tensor.nbytes(), stream);
}

// Contexts around the tile (16) and slice edges up to several thousand keys, as single rows and as one
// batch of very different lengths, with the slice count forced to 1, 2, 7 and the maximum (128) or
// chosen: the fused combine (mode 1) matches the reference, and the separate combine kernel (mode 2)
// bit for bit. (With the lean instances on, the default, the 8-row shapes of head_dim 64 and 128 at <= 32
// slices take the lean fused combine, merge_if_last_lean; the others merge_if_last.)
TEST_P(CudaDecodeTest, FusedCombineAcrossContextsAndSliceCounts) {
  const std::vector<int64_t> lens = {1, 15, 16, 17, 255, 1000, 5000};
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  for (Shape sh : {Shape{32, 8, 128}, Shape{32, 8, 64}, Shape{16, 4, 256}, Shape{8, 2, 512}})
    for (int splits : {1, 2, 7, 128, 0}) {
      cuda::set_attention_splits_for_testing(splits);
      std::vector<std::vector<int64_t>> batches = {lens};
      if (splits == 128 || splits == 0)
        for (int64_t len : lens) batches.push_back({len});
      for (const auto& bl : batches) {
        Scenario s = decode_scenario(1, sh.head_dim, bl);
        s.n_heads = sh.n_heads;
        s.n_kv_heads = sh.n_kv_heads;
        s.out_dtype = DType::kF32;
        const std::string what =
            strfmt("heads %lld/%lld head_dim %lld splits %d rows %zu (first len %lld)", (long long)sh.n_heads,
                   (long long)sh.n_kv_heads, (long long)sh.head_dim, splits, bl.size(), (long long)bl[0]);
        std::mt19937 rng(409);
        Batch b = make_batch(s, rng);
        const OwnedTensor want = reference_out(b, s);
        DeviceBatch d = upload(b, DType::kF32, rng);
        auto run = [&](int combine) {  // on garbage: a row nobody writes cannot pass as the previous result
          scramble(d.out, rng, nullptr);
          cuda::set_attention_decode_combine_for_testing(combine);
          paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
          return values(d.out.download().tensor);
        };
        const std::vector<float> fused = run(1);
        expect_close(fused, values(want.tensor), tolerance(DType::kF32, 1e-4f), what + " fused");
        expect_close(run(2), fused, 0.0f, what + " combine kernel equals fused");
        expect_close(run(0), fused, 0.0f, what + " fused again");  // the counters were left at zero
      }
    }
}

// One graph captured at position 0 (one key per row), replayed at growing contexts, twice at the same
// ones, then shorter and longer again: each replay equals the reference at its positions (and a repeat
// equals the replay before it bit for bit), which holds only if every launch leaves the arrival
// counters at zero whatever its rows' slice counts.
void growing_replay_case(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads, int splits) {
  SCOPED_TRACE(strfmt("head_dim %lld heads %lld/%lld splits %d", (long long)head_dim, (long long)n_heads,
                      (long long)n_kv_heads, splits));
  cuda::set_attention_splits_for_testing(splits);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context ctx;
  ctx.cuda_stream = stream;
  Scenario s = decode_scenario(1, head_dim, {5000, 1000, 17, 255, 1});
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.out_dtype = DType::kF32;
  std::mt19937 rng(410);
  Batch b = make_batch(s, rng);
  DeviceBatch d = upload(b, DType::kF32, rng);
  int32_t* host_pos = b.positions.tensor.ptr<int32_t>();
  const std::vector<int32_t> last(host_pos, host_pos + s.seq_lens.size());
  auto set_positions = [&](double f) {
    for (size_t i = 0; i < last.size(); ++i) host_pos[i] = static_cast<int32_t>(last[i] * f);
    cuda::copy_to_device(d.positions.tensor.data, host_pos, last.size() * sizeof(int32_t), stream);
  };
  set_positions(0.0);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);  // sizes the scratch
  cuda::synchronize(stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const Tensor& q = b.q.f32.tensor;
  OwnedTensor want = OwnedTensor::make(DType::kF32, {q.shape[0], q.shape[1], q.shape[2]});
  std::vector<float> prev;
  double prev_f = -1.0;
  for (double f : {0.0, 0.003, 0.01, 0.05, 0.05, 0.2, 0.5, 0.5, 0.5, 1.0, 0.1, 1.0, 1.0}) {
    set_positions(f);
    ref::paged_attention(want.tensor, q, b.cache(), b.meta(), s.params);
    scramble(d.out, rng, stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    cuda::synchronize(stream);
    const std::vector<float> got = values(d.out.download().tensor);
    expect_close(got, values(want.tensor), tolerance(DType::kF32, 1e-4f), strfmt("replay at %g", f));
    if (f == prev_f) expect_close(got, prev, 0.0f, strfmt("repeated replay at %g", f));
    prev = got;
    prev_f = f;
  }
  scramble(d.out, rng, stream);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);  // eager, same inputs
  cuda::synchronize(stream);
  expect_close(values(d.out.download().tensor), prev, 0.0f, "eager equals replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::stream_destroy(stream);
}

TEST_P(CudaDecodeTest, FusedCombineGraphReplaysOverGrowingContexts) {
  for (int splits : {0, 2, 7, 128}) {
    growing_replay_case(128, 32, 8, splits);  // Llama 3.1 8B
    growing_replay_case(256, 16, 4, splits);  // Qwen3.5 4B full-attention layers
    growing_replay_case(512, 8, 2, splits);   // Gemma 4 E4B global layers
  }
}

// Cluster sizes 1..16 (forced; 9..16 need the non-portable cluster attribute) and the chosen size, over
// contexts around tile and slice edges in one batch and alone, on the 8B, Qwen3.5 and Gemma 4 shapes and
// head_dim 64 with 16 query heads per kv head; with a window and a softcap too.
TEST_P(CudaDecodeTest, ClusterSizesAgainstReference) {
  if (GetParam() != 2) GTEST_SKIP() << "cluster path only";
  const std::vector<int64_t> lens = {1, 15, 16, 17, 63, 65, 255, 1000, 5000};
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  for (Shape sh : {Shape{32, 8, 128}, Shape{16, 4, 256}, Shape{8, 2, 512}, Shape{32, 2, 64}})
    for (int splits : {0, 1, 2, 3, 5, 8, 11, 16}) {
      cuda::set_attention_splits_for_testing(splits);
      std::vector<std::vector<int64_t>> batches = {lens};
      if (splits == 16 || splits == 0)
        for (int64_t len : {int64_t{17}, int64_t{1000}, int64_t{5000}}) batches.push_back({len});
      for (const auto& bl : batches)
        for (int variant = 0; variant < 2; ++variant) {
          Scenario s = decode_scenario(1, sh.head_dim, bl);
          s.n_heads = sh.n_heads;
          s.n_kv_heads = sh.n_kv_heads;
          s.out_dtype = DType::kF32;
          if (variant == 1) {
            s.params = {0.3f, 700, 5.0f, {}};
            s.release_out_of_window = true;
          }
          check_attention(ctx_,
                          s,
                          strfmt("heads %lld/%lld head_dim %lld splits %d rows %zu (first len %lld) variant %d",
                                 (long long)sh.n_heads, (long long)sh.n_kv_heads, (long long)sh.head_dim, splits,
                                 bl.size(), (long long)bl[0], variant),
                          411);
        }
    }
}

// The newest key and value of every row (position p) are written by rope_kv_write (which lets a dependent
// launch start before it writes) right before paged_attention on one stream, after a write of huge garbage
// to the same slots: a kernel that read p's block before its wait would see the garbage. Repeated, since
// it is a race; positions at a block's first, middle and last offsets.
TEST_P(CudaDecodeTest, NewestKeysWrittenByTheKernelBefore) {
  for (int64_t head_dim : {128, 256}) {
    Scenario s = decode_scenario(4, head_dim, {17, 1000, 4097, 33, 256, 16, 2048});
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.out_dtype = DType::kF32;
    std::mt19937 rng(412);
    Batch b = make_batch(s, rng);
    const Tensor& q = b.q.f32.tensor;
    const OwnedTensor want = reference_out(b, s);
    const int64_t n = q.shape[0], width = b.block_tables.tensor.shape[1], row = s.n_kv_heads * head_dim;
    OwnedTensor k_new = OwnedTensor::make(DType::kBF16, {n, s.n_kv_heads, head_dim});
    OwnedTensor v_new = OwnedTensor::make(DType::kBF16, {n, s.n_kv_heads, head_dim});
    OwnedTensor slots = OwnedTensor::make(DType::kI64, {n});
    for (int64_t t = 0; t < n; ++t) {
      const int32_t seq = b.seq_index.tensor.ptr<int32_t>()[t], pos = b.positions.tensor.ptr<int32_t>()[t];
      const int64_t blk = b.block_tables.tensor.ptr<int32_t>()[seq * width + pos / s.block_size];
      const int64_t slot = blk * s.block_size + pos % s.block_size;
      slots.tensor.ptr<int64_t>()[t] = slot;
      std::memcpy(static_cast<char*>(k_new.tensor.data) + t * row * 2,
                  static_cast<const char*>(b.k_cache.tensor.data) + slot * row * 2, row * 2);
      std::memcpy(static_cast<char*>(v_new.tensor.data) + t * row * 2,
                  static_cast<const char*>(b.v_cache.tensor.data) + slot * row * 2, row * 2);
    }
    DeviceBatch d = upload(b, DType::kF32, rng);
    DeviceTensor dk = DeviceTensor::upload(k_new.tensor), dv = DeviceTensor::upload(v_new.tensor);
    auto junk = [&](float lo, float hi) {
      return DeviceTensor::upload(random_tensor(DType::kBF16, {n, s.n_kv_heads, head_dim}, rng, lo, hi).tensor);
    };
    DeviceTensor junk_k = junk(40.0f, 60.0f), junk_v = junk(900.0f, 1000.0f);
    DeviceTensor dq = DeviceTensor::upload(random_tensor(DType::kBF16, {n, s.n_heads, head_dim}, rng).tensor);
    DeviceTensor dslots = DeviceTensor::upload(slots.tensor);
    const RopeParams no_rope{};  // rotary_dim 0: the write only
    for (int rep = 0; rep < 20; ++rep) {
      rope_kv_write(ctx_, dq.tensor, junk_k.tensor, junk_v.tensor, d.cache(), d.positions.tensor, dslots.tensor,
                    no_rope);
      rope_kv_write(ctx_, dq.tensor, dk.tensor, dv.tensor, d.cache(), d.positions.tensor, dslots.tensor, no_rope);
      paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
      expect_close(d.out.download().tensor, want.tensor, tolerance(DType::kF32, 1e-4f),
                   strfmt("head_dim %lld rep %d", (long long)head_dim, rep));
      if (HasFailure()) return;
    }
  }
}

// The lean instances (the one-stage slice kernel, the cluster kernel and the combine kernel without the code
// of features a launch does not use) against the full ones, bit for bit, and against the reference: batch-1
// and small batches at the 8B and 1B shapes (split path: one-stage rings, slices merged by the combine
// kernel; parameter 2: the cluster path), head_dim 256 and a 30,000-key row (three-stage rings), bf16 and f32
// out, a window (the lean instances keep it) and a softcap and a block size of 5 (the full instances take
// those).
TEST_P(CudaDecodeTest, LeanInstancesGiveTheFullInstancesBits) {
  if (GetParam() != 0 && GetParam() != 2) GTEST_SKIP() << "split and cluster paths only";
  struct Case {
    int64_t head_dim;
    std::vector<int64_t> lens;
    DType out;
    int variant;  // 0 plain, 1 window 300, 2 softcap, 3 block size 5
  };
  const Case cases[] = {{128, {1000}, DType::kBF16, 0},    {64, {1000}, DType::kBF16, 0},
                        {128, {17}, DType::kF32, 0},       {128, {300, 1000, 65}, DType::kF32, 0},
                        {64, {2048, 33}, DType::kBF16, 1}, {128, {1000}, DType::kF32, 2},
                        {128, {999}, DType::kBF16, 3},     {256, {1000, 40}, DType::kBF16, 0},
                        {128, {30000}, DType::kF32, 0}};
  for (const Case& c : cases) {
    Scenario s = decode_scenario(4, c.head_dim, c.lens);
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.out_dtype = c.out;
    if (c.variant == 1) s.params.sliding_window = 300;
    if (c.variant == 2) s.params.softcap = 30.0f;
    if (c.variant == 3) s.block_size = 5;
    std::mt19937 rng(415);
    Batch b = make_batch(s, rng);
    DeviceBatch d = upload(b, c.out, rng);
    auto run = [&](int mode, int combine) {
      cuda::set_attention_decode_lean_for_testing(mode);
      cuda::set_attention_decode_combine_for_testing(combine);
      scramble(d.out, rng, nullptr);
      paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
      return values(d.out.download().tensor);
    };
    // combine 2: the combine kernel; 1: the fused combine (the lean fused instance where lean_kind gives it)
    const std::vector<float> full = run(1, 2), lean = run(2, 2), lean_fused = run(2, 1),
                             full_fused = run(1, 1);
    cuda::set_attention_decode_lean_for_testing(0);
    cuda::set_attention_decode_combine_for_testing(0);
    const std::string what =
        strfmt("head_dim %lld, %zu rows, variant %d", (long long)c.head_dim, c.lens.size(), c.variant);
    expect_close(lean, full, 0.0f, what + ": lean vs full");
    expect_close(lean_fused, full, 0.0f, what + ": lean, fused combine vs full");
    expect_close(full_fused, full, 0.0f, what + ": full, fused combine vs full");
    expect_close(lean, values(reference_out(b, s).tensor), tolerance(c.out, 1e-4f),
                 what + ": lean vs reference");
    if (HasFailure()) return;
  }
}

// The staged combine (the partials copied into shared memory by 16-byte cp.async copies over their 16-byte
// aligned span, merged by rolled loops) against the lean combine kernel, bit for bit, and against the
// reference, on every path of the parameter (split, SIMT with head_dim 80 and 40, packed; the cluster path
// has no combine launch): the 8B and 1B shapes at batch 1, head_dim 64 and 80 (8-byte aligned partials of odd
// heads), rows of 2..32 slices (forced 2, 7, 32 and chosen), bf16 and f32 out, and 40-row batches.
TEST_P(CudaDecodeTest, StagedCombineGivesTheLeanCombinesBits) {
  struct Case {
    int64_t group, head_dim;
    std::vector<int64_t> lens;
    DType out;
  };
  std::vector<int64_t> many;
  for (int i = 0; i < 40; ++i) many.push_back(1 + (i * 379) % 2999);
  const Case cases[] = {{4, 128, {1000}, DType::kBF16},
                        {4, 64, {1000}, DType::kBF16},
                        {4, 64, {300, 1000, 65}, DType::kF32},
                        {3, 80, {1000, 17, 4097}, DType::kF32},
                        {8, 40, {2049, 2}, DType::kBF16},
                        {4, 128, many, DType::kF32},
                        {2, 64, many, DType::kBF16}};
  for (const Case& c : cases)
    for (int splits : {0, 2, 7, 32}) {
      Scenario s = decode_scenario(c.group, c.head_dim, c.lens);
      s.n_kv_heads = c.lens.size() == 1 ? 8 : 2;
      s.n_heads = s.n_kv_heads * c.group;
      s.out_dtype = c.out;
      std::mt19937 rng(416);
      Batch b = make_batch(s, rng);
      DeviceBatch d = upload(b, c.out, rng);
      cuda::set_attention_splits_for_testing(splits);
      cuda::set_attention_decode_lean_for_testing(2);
      auto run = [&](bool staged) {
        cuda::set_attention_combine_staged_for_testing(staged ? 2 : 1);
        scramble(d.out, rng, nullptr);
        paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
        return values(d.out.download().tensor);
      };
      const std::vector<float> lean = run(false), staged = run(true);
      cuda::set_attention_combine_staged_for_testing(0);
      cuda::set_attention_decode_lean_for_testing(0);
      cuda::set_attention_splits_for_testing(0);
      const std::string what = strfmt("group %lld head_dim %lld, %zu rows, splits %d", (long long)c.group,
                                      (long long)c.head_dim, c.lens.size(), splits);
      expect_close(staged, lean, 0.0f, what + ": staged vs lean combine");
      expect_close(staged, values(reference_out(b, s).tensor), tolerance(c.out, 1e-4f),
                   what + ": staged vs reference");
      if (HasFailure()) return;
    }
}

// The packed kernel (the parameter's block size) on batches of 40 rows (lengths 1 .. 2999, so chosen slicing gives rows several
// slices) with the slice count chosen, 1 and 3: the 8B shape, 16 query heads per kv head (MMA rows 8..15),
// head_dim 64 with 2 and 6 kv heads (warps of the block past the last kv head idle), plain and with a
// window and a softcap; and the chosen path (testing switch 0) at 64 rows on the 8B shape, which must
// equal the forced 4-warp packed kernel bit for bit when it picks it.
TEST_P(CudaDecodeTest, PackedKernelBatchesAndSlices) {
  if (GetParam() < 3) GTEST_SKIP() << "packed kernel only";
  const int mine =
      GetParam() == 3 || GetParam() == 5 ? 2 : 3;  // the testing switch's value for this parameter
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  for (Shape sh : {Shape{32, 8, 128}, Shape{64, 4, 128}, Shape{32, 2, 64}, Shape{12, 6, 64}})
    for (int splits : {0, 1, 3})
      for (int variant = 0; variant < 2; ++variant) {
        cuda::set_attention_splits_for_testing(splits);
        Scenario s = decode_scenario(1, sh.head_dim, {});
        s.n_heads = sh.n_heads;
        s.n_kv_heads = sh.n_kv_heads;
        for (int i = 0; i < 40; ++i) s.seq_lens.push_back(1 + (i * 379) % 2999);
        s.new_tokens.assign(s.seq_lens.size(), 1);
        s.out_dtype = DType::kF32;
        if (variant == 1) {
          s.params = {0.3f, 700, 5.0f, {}};
          s.release_out_of_window = true;
        }
        check_attention(ctx_, s,
                        strfmt("heads %lld/%lld head_dim %lld splits %d variant %d", (long long)sh.n_heads,
                               (long long)sh.n_kv_heads, (long long)sh.head_dim, splits, variant),
                        413);
      }
  cuda::set_attention_splits_for_testing(0);
  Scenario s = decode_scenario(4, 128, {});
  s.n_heads = 32;
  s.n_kv_heads = 8;
  for (int i = 0; i < 64; ++i) s.seq_lens.push_back(1 + (i * 211) % 1100);
  s.new_tokens.assign(s.seq_lens.size(), 1);
  std::mt19937 rng(414);
  Batch b = make_batch(s, rng);
  DeviceBatch d = upload(b, DType::kBF16, rng);
  auto run = [&](int mode) {
    cuda::set_attention_decode_batched_for_testing(mode);
    scramble(d.out, rng, nullptr);
    paged_attention(ctx_, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
    return values(d.out.download().tensor);
  };
  const std::vector<float> packed = run(mine), packed4 = run(2), split = run(1), chosen = run(0);
  const std::vector<float> want = values(reference_out(b, s).tensor);
  expect_close(packed, want, tolerance(DType::kBF16), "64 rows packed");
  expect_close(packed4, want, tolerance(DType::kBF16), "64 rows packed, 4 warps");
  expect_close(split, want, tolerance(DType::kBF16), "64 rows split path");
  // 64 rows x 8 kv heads are past the packed kernel's threshold (128 rows x kv heads): the default is packed.
  expect_close(chosen, packed4, 0.0f, "64 rows chosen path is packed");
  if (GetParam() >=
      5) {  // bulk copies: the same tiles and arithmetic as the cp.async copies, so the same bits
    cuda::set_attention_decode_bulk_for_testing(1);
    const std::vector<float> copied = run(mine);
    cuda::set_attention_decode_bulk_for_testing(2);
    expect_close(packed, copied, 0.0f, "64 rows: bulk copies vs cp.async");
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaDecodeTest, ::testing::Values(0, 1, 2, 3, 4, 5, 6));

}  // namespace
}  // namespace bunsen::kernels::test
