// CUDA quantized ops (MLX affine) through ops.h against the CPU ops on the same data: linear_q for every m
// from 1 to 9 (GEMV path, f32 tolerance) and m = 33, 300 (dequantize + cuBLASLt path, bf16 tolerance),
// bits 2/3/4/5/6/8 x group 32/64/128 x scales f32/bf16 x activations f32/bf16, odd n, bias on/off, row
// slices, misaligned x (simple kernel), forced paths; dequantize and embedding_q bit for bit; out-of-range
// ids give NaN rows; the GEMV path takes no scratch and can be captured in a graph.
// BUNSEN_CUDA_BENCH=1 adds a timing of the 4/8-bit GEMV on Llama-3.1-8B decode shapes (printed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/cuda/quant_ops.h"

namespace bunsen::kernels::test {
namespace {

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};

class CudaQuantTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!IsSkipped()) cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kAuto);
  }
  void TearDown() override {
    if (cuda::device_count() > 0) cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kAuto);
    CudaTest::TearDown();
  }
};

// A random quantized matrix on the host (codes packed bit by bit, scales of both signs) and on the device.
struct QuantPair {
  OwnedTensor packed, scales, biases;
  DeviceTensor d_packed, d_scales, d_biases;
  QuantWeight host, dev;
};

void pack_bitwise(const std::vector<uint32_t>& codes, int64_t k, int bits, uint32_t* words) {
  for (int64_t c = 0; c < k; ++c)
    for (int b = 0; b < bits; ++b)
      if ((codes[static_cast<size_t>(c)] >> b) & 1u) words[(c * bits + b) / 32] |= 1u << ((c * bits + b) % 32);
}

QuantPair make_quant(int64_t n, int64_t k, int bits, int group, DType sb, std::mt19937& rng) {
  QuantPair p;
  const int64_t words = k * bits / 32, groups = k / group;
  p.packed = OwnedTensor::make(DType::kU32, {n, words});
  std::memset(p.packed.tensor.data, 0, p.packed.tensor.nbytes());
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1u);
  std::vector<uint32_t> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (auto& c : row) c = code(rng);
    pack_bitwise(row, k, bits, p.packed.tensor.ptr<uint32_t>() + r * words);
  }
  // MLX-like: w = scale * (q - mid) + noise; scales of either sign.
  const float unit = 0.05f / static_cast<float>(1 << bits);
  p.scales = random_tensor(sb, {n, groups}, rng, -unit, unit);
  p.biases = random_tensor(sb, {n, groups}, rng, -0.05f, 0.05f);
  p.d_packed = DeviceTensor::upload(p.packed.tensor);
  p.d_scales = DeviceTensor::upload(p.scales.tensor);
  p.d_biases = DeviceTensor::upload(p.biases.tensor);
  p.host = QuantWeight{p.packed.tensor, p.scales.tensor, p.biases.tensor, bits, group};
  p.dev = QuantWeight{p.d_packed.tensor, p.d_scales.tensor, p.d_biases.tensor, bits, group};
  return p;
}

struct QCase {
  int64_t m, n;
  int bits, group, k_groups;
  DType sb, xt, ot;
  bool bias;
};

std::string case_name(const QCase& c) {
  return strfmt("linear_q m=%lld n=%lld k=%lld bits=%d group=%d scales %s x %s out %s bias=%d", (long long)c.m,
                (long long)c.n, (long long)(c.group * c.k_groups), c.bits, c.group, dtype_name(c.sb),
                dtype_name(c.xt), dtype_name(c.ot), c.bias);
}

// CUDA linear_q on a random instance of c against the CPU's linear_q on the same values (x in its storage
// dtype, read back as f32). pad: x and out are column slices of wider tensors (pad odd: misaligned x).
void check_linear_q(Context& ctx, const QCase& c, float tol, std::mt19937& rng, int64_t pad = 0,
                    int64_t row_offset = 0) {
  const int64_t k = static_cast<int64_t>(c.group) * c.k_groups;
  QuantPair q = make_quant(c.n + row_offset, k, c.bits, c.group, c.sb, rng);
  QuantWeight wh = q.host.slice_rows(row_offset, row_offset + c.n), wd = q.dev.slice_rows(row_offset, row_offset + c.n);
  HostPair x = random_pair(c.xt, {c.m, k + pad}, rng);
  OwnedTensor bias = random_tensor(DType::kBF16, {c.n}, rng, -0.5f, 0.5f);
  OwnedTensor out_host = random_tensor(c.ot, {c.m, c.n + pad}, rng);  // garbage to overwrite
  OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.n});
  Context cpu;
  linear_q(cpu, want.tensor, x.f32.tensor.slice(1, pad, pad + k), wh, c.bias ? bias.tensor : Tensor{});
  DeviceTensor xd = DeviceTensor::upload(x.data.tensor), bd = DeviceTensor::upload(bias.tensor);
  DeviceTensor od = DeviceTensor::upload(out_host.tensor);
  linear_q(ctx, od.tensor.slice(1, pad, pad + c.n), xd.tensor.slice(1, pad, pad + k), wd,
           c.bias ? bd.tensor : Tensor{});
  OwnedTensor got = od.download();
  const std::string what = case_name(c) + strfmt(" pad=%lld rows+%lld", (long long)pad, (long long)row_offset);
  expect_close(got.tensor.slice(1, pad, pad + c.n), want.tensor, tol, what);
  for (int64_t i = 0; i < c.m; ++i)  // columns outside the out slice are untouched
    for (int64_t j = 0; j < pad; ++j)
      ASSERT_EQ(load_f(got.tensor.row_ptr(i), c.ot, j), load_f(out_host.tensor.row_ptr(i), c.ot, j)) << what;
}

float gemv_tol(DType out) { return out == DType::kBF16 ? 1e-2f : 1e-4f; }
constexpr float kGemmTol = 1.5e-2f;  // bf16 weights (and x) in the GEMM

TEST_F(CudaQuantTest, GemvMatchesCpuForEveryBitsGroupScaleDtypeAndM) {
  std::mt19937 rng(801);
  int i = 0;
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sb : {DType::kF32, DType::kBF16}) {
        ++i;
        const int kg = group == 128 ? 5 : 3;                 // k = 64*3, 128*5, 32*3
        const int64_t n = i % 2 ? 67 : 1000;                  // odd n, and one that fills the GPU a bit
        const DType xt = kActDtypes[i % 2], ot = kActDtypes[(i / 2) % 2];
        for (int64_t m = 1; m <= 9; ++m) {
          const QCase c{m, n, bits, group, kg, sb, xt, ot, (m + i) % 2 == 0};
          check_linear_q(ctx_, c, m > cuda::kGemvMaxM ? kGemmTol : gemv_tol(ot), rng);
        }
      }
}

TEST_F(CudaQuantTest, GemmPathMatchesCpuToBf16Accuracy) {
  std::mt19937 rng(802);
  int i = 0;
  for (int64_t m : {33, 300})
    for (int bits : {4, 8, 3, 6})
      for (int group : {64, 128}) {
        ++i;
        const QCase c{m,        i % 2 ? 1000 : 67,        bits,
                      group,    group == 128 ? 5 : 3,     i % 2 ? DType::kF32 : DType::kBF16,
                      kActDtypes[(i / 2) % 2], kActDtypes[(i / 4) % 2], i % 3 != 0};
        check_linear_q(ctx_, c, kGemmTol, rng);
      }
}

TEST_F(CudaQuantTest, ForcedPathsAgreeAtEverySize) {
  std::mt19937 rng(803);
  // The GEMV at GEMM sizes (8-row launches), the GEMM at decode sizes, and the simple kernel.
  cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kGemv);
  check_linear_q(ctx_, {33, 67, 4, 64, 3, DType::kBF16, DType::kBF16, DType::kF32, true}, 1e-4f, rng);
  check_linear_q(ctx_, {17, 100, 5, 32, 3, DType::kF32, DType::kF32, DType::kF32, false}, 1e-4f, rng);
  cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kGemm);
  check_linear_q(ctx_, {1, 1000, 4, 64, 3, DType::kBF16, DType::kF32, DType::kF32, true}, kGemmTol, rng);
  check_linear_q(ctx_, {3, 67, 8, 128, 5, DType::kF32, DType::kBF16, DType::kBF16, true}, kGemmTol, rng);
  cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kSimple);
  for (int bits : kBits)
    check_linear_q(ctx_, {5, 67, bits, 64, 3, DType::kBF16, DType::kF32, DType::kF32, true}, 1e-4f, rng);
}

TEST_F(CudaQuantTest, StridedMisalignedAndRowSlicedViews) {
  std::mt19937 rng(804);
  for (int bits : kBits) {
    // Odd pad: x rows start off 16-byte boundaries (the simple kernel); pad 8: aligned strided views.
    check_linear_q(ctx_, {3, 67, bits, 32, 3, DType::kF32, DType::kF32, DType::kF32, true}, 1e-4f, rng, 5);
    check_linear_q(ctx_, {2, 67, bits, 64, 3, DType::kBF16, DType::kBF16, DType::kF32, false}, 1e-4f, rng, 8);
    // A row slice (fused qkv split): the packed rows start mid-allocation.
    check_linear_q(ctx_, {1, 100, bits, 64, 3, DType::kBF16, DType::kBF16, DType::kF32, true}, 1e-4f, rng, 0, 36);
    check_linear_q(ctx_, {40, 100, bits, 64, 3, DType::kBF16, DType::kBF16, DType::kF32, true}, kGemmTol, rng, 0,
                   36);
  }
}

// The tensor-core GEMV (4/8 bits, bf16 x): every group size and scale dtype, m 1..8, tiles that end past n
// (n % 16 != 0), k with partial pipeline stages (k_groups 1, 5, 37), against the CPU and, for f32 output,
// against the CUDA-core kernel forced on the same data.
TEST_F(CudaQuantTest, TensorCoreGemvMatchesCpuForEveryGroupScaleDtypeAndM) {
  std::mt19937 rng(810);
  int i = 0;
  for (int bits : {4, 8})
    for (int group : kGroups)
      for (DType sb : kWeightDtypes) {
        ++i;
        const int64_t n = i % 3 == 0 ? 16 : i % 3 == 1 ? 67 : 300;
        const int kg = i % 3 == 0 ? 37 : i % 3 == 1 ? 5 : 1;
        const DType ot = kActDtypes[i % 2];
        for (int64_t m = 1; m <= cuda::kGemvMaxM; ++m) {
          const QCase c{m, n, bits, group, kg, sb, DType::kBF16, ot, (m + i) % 2 == 0};
          check_linear_q(ctx_, c, gemv_tol(ot), rng);
        }
      }
}

// Every forced k split of the tensor-core kernel gives the CPU's result (within f32 rounding), on a shape
// with several pipeline stages per warp and a split that leaves some warps without work.
TEST_F(CudaQuantTest, TensorCoreGemvEveryKSplit) {
  std::mt19937 rng(811);
  struct Restore {
    ~Restore() {
      if (cuda::device_count() > 0) cuda::set_linear_q_split_for_testing(0);
    }
  } restore;
  for (int split : {1, 2, 4, 8})
    for (int bits : {4, 8}) {
      cuda::set_linear_q_split_for_testing(split);
      SCOPED_TRACE(split);
      check_linear_q(ctx_, {3, 45, bits, 64, 23, DType::kBF16, DType::kBF16, DType::kF32, true}, 1e-4f, rng);
      check_linear_q(ctx_, {8, 33, bits, 32, 3, DType::kF16, DType::kBF16, DType::kF32, false}, 1e-4f, rng);
    }
}

// On the tensor-core kernel a token's output does not depend on the other rows of x (m = 1 and m = 8 agree
// bit for bit); the CUDA-core kernel forced on the same 4/8-bit bf16 launches matches the CPU too.
TEST_F(CudaQuantTest, QuantGemvIsBatchInvariant) {
  std::mt19937 rng(812);
  for (cuda::LinearQPath path : {cuda::LinearQPath::kAuto, cuda::LinearQPath::kGemvSimt})
    for (int bits : {4, 8}) {
      cuda::set_linear_q_path_for_testing(path);
      const int64_t n = 200, k = 64 * 9;
      QuantPair q = make_quant(n, k, bits, 64, DType::kBF16, rng);
      HostPair x = random_pair(DType::kBF16, {8, k}, rng);
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      DeviceTensor o8 = DeviceTensor::upload(random_tensor(DType::kF32, {8, n}, rng).tensor);
      DeviceTensor o1 = DeviceTensor::upload(random_tensor(DType::kF32, {1, n}, rng).tensor);
      linear_q(ctx_, o8.tensor, xd.tensor, q.dev);
      linear_q(ctx_, o1.tensor, xd.tensor.slice(0, 5, 6), q.dev);
      const std::vector<float> all = values(o8.download().tensor), one = values(o1.download().tensor);
      const std::string what = strfmt("bits %d path %d", bits, static_cast<int>(path));
      if (path == cuda::LinearQPath::kAuto) {
        ASSERT_EQ(std::memcmp(all.data() + 5 * n, one.data(), static_cast<size_t>(n) * 4), 0) << what;
      }
      OwnedTensor want = OwnedTensor::make(DType::kF32, {8, n});
      Context cpu;
      linear_q(cpu, want.tensor, x.f32.tensor, q.host);
      expect_close(o8.download().tensor, want.tensor, 1e-4f, what);
    }
}

// The weight streams' L2 policy (l2_hint.cuh) is a hint: evict_first gives the evict_normal bits on the
// default 4-bit (tile) and 8-bit (f16 register) kernels, on a 1B decode shape (2048 x 2048, group 64).
TEST_F(CudaQuantTest, L2EvictFirstGivesTheSameBits) {
  std::mt19937 rng(814);
  struct Restore {
    ~Restore() {
      if (cuda::device_count() > 0) cuda::set_l2_evict_first_for_testing(-1);
    }
  } restore;
  for (int bits : {4, 8}) {
    const int64_t n = 2048, k = 2048;
    QuantPair q = make_quant(n, k, bits, 64, DType::kBF16, rng);
    HostPair x = random_pair(DType::kBF16, {3, k}, rng);
    DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
    for (int64_t m : {1, 3}) {
      std::vector<float> got[2];
      for (int first : {0, 1}) {
        cuda::set_l2_evict_first_for_testing(first);
        DeviceTensor od = DeviceTensor::upload(random_tensor(DType::kF32, {m, n}, rng).tensor);
        linear_q(ctx_, od.tensor, xd.tensor.slice(0, 0, m), q.dev);
        got[first] = values(od.download().tensor);
      }
      ASSERT_EQ(got[0].size(), got[1].size());
      EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4), 0)
          << "bits " << bits << " m " << m;
    }
  }
}

// x too wide for one launch's shared memory at m = 8 (k = 14,720: 8 rows of bf16 x need 236 KB at 4 bits)
// runs as several launches of the shared-memory kernel: every token still matches the CPU, and a token's
// bits are the same at m = 8 and m = 1; f32 x (hi + lo parts) stays at f32 accuracy. 8 bits take the other
// kernels by default (BUNSEN_QMMA=2 runs them through the shared-memory kernel, 471 KB at m = 8).
TEST_F(CudaQuantTest, WideXSplitsRowsAcrossLaunchesAndStaysBatchInvariant) {
  std::mt19937 rng(813);
  for (int bits : {4, 8})
    for (DType xt : {DType::kBF16, DType::kF32}) {
      const int64_t n = 40, k = 128 * 115;
      QuantPair q = make_quant(n, k, bits, 64, DType::kBF16, rng);
      HostPair x = random_pair(xt, {8, k}, rng);
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      DeviceTensor o8 = DeviceTensor::upload(random_tensor(DType::kF32, {8, n}, rng).tensor);
      DeviceTensor o1 = DeviceTensor::upload(random_tensor(DType::kF32, {1, n}, rng).tensor);
      linear_q(ctx_, o8.tensor, xd.tensor, q.dev);
      linear_q(ctx_, o1.tensor, xd.tensor.slice(0, 6, 7), q.dev);
      const std::vector<float> all = values(o8.download().tensor), one = values(o1.download().tensor);
      const std::string what = strfmt("bits %d x %s", bits, dtype_name(xt));
      ASSERT_EQ(std::memcmp(all.data() + 6 * n, one.data(), static_cast<size_t>(n) * 4), 0) << what;
      OwnedTensor want = OwnedTensor::make(DType::kF32, {8, n});
      Context cpu;
      linear_q(cpu, want.tensor, x.f32.tensor, q.host);
      expect_close(o8.download().tensor, want.tensor, 1e-4f, what);
    }
}

void expect_bits_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<float> g = values(got), w = values(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_EQ(std::memcmp(&g[i], &w[i], 4), 0) << what << " at " << i << ": " << g[i] << " vs " << w[i];
}

// bf16 output: the CPU's f32 values rounded to bf16.
OwnedTensor round_to(const Tensor& f32, DType t) {
  OwnedTensor r = OwnedTensor::make(t, std::span<const int64_t>(f32.shape, f32.ndim));
  const std::vector<float> v = values(f32);
  for (size_t i = 0; i < v.size(); ++i) store_f(r.tensor.data, t, static_cast<int64_t>(i), v[i]);
  return to_f32(r.tensor);
}

TEST_F(CudaQuantTest, DequantizeAndEmbeddingAreBitExact) {
  std::mt19937 rng(805);
  int i = 0;
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sb : kWeightDtypes) {
        ++i;
        const int64_t n = 37, k = group * (group == 128 ? 5 : 3);
        QuantPair q = make_quant(n, k, bits, group, sb, rng);
        const std::string what = strfmt("bits=%d group=%d %s", bits, group, dtype_name(sb));
        Context cpu;
        OwnedTensor want = OwnedTensor::make(DType::kF32, {n, k});
        dequantize(cpu, want.tensor, q.host);
        for (DType ot : kActDtypes) {
          DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {n, k}, rng).tensor);
          dequantize(ctx_, od.tensor, q.dev);
          OwnedTensor got = od.download();
          expect_bits_equal(got.tensor, ot == DType::kF32 ? want.tensor : round_to(want.tensor, ot).tensor,
                            "dequantize " + what);
        }
        OwnedTensor ids = OwnedTensor::make(DType::kI32, {9});
        for (int j = 0; j < 9; ++j) ids.tensor.ptr<int32_t>()[j] = (j * 7 + i) % static_cast<int32_t>(n);
        ids.tensor.ptr<int32_t>()[3] = ids.tensor.ptr<int32_t>()[1];  // a repeated id
        const float scale = i % 2 ? 1.0f : 0.37f;
        OwnedTensor emb = OwnedTensor::make(DType::kF32, {9, k});
        embedding_q(cpu, emb.tensor, q.host, ids.tensor, scale);
        DeviceTensor idd = DeviceTensor::upload(ids.tensor);
        const DType ot = kActDtypes[i % 2];
        DeviceTensor ed = DeviceTensor::upload(random_tensor(ot, {9, k}, rng).tensor);
        embedding_q(ctx_, ed.tensor, q.dev, idd.tensor, scale);
        expect_bits_equal(ed.download().tensor, ot == DType::kF32 ? emb.tensor : round_to(emb.tensor, ot).tensor,
                          "embedding_q " + what);
      }
}

TEST_F(CudaQuantTest, OutOfRangeIdsGiveNanRows) {
  std::mt19937 rng(806);
  QuantPair q = make_quant(10, 64, 4, 64, DType::kBF16, rng);
  OwnedTensor ids = OwnedTensor::make(DType::kI32, {3});
  ids.tensor.ptr<int32_t>()[0] = 2;
  ids.tensor.ptr<int32_t>()[1] = 10;
  ids.tensor.ptr<int32_t>()[2] = -1;
  DeviceTensor idd = DeviceTensor::upload(ids.tensor);
  DeviceTensor ed = DeviceTensor::upload(random_tensor(DType::kF32, {3, 64}, rng).tensor);
  embedding_q(ctx_, ed.tensor, q.dev, idd.tensor);
  const std::vector<float> v = values(ed.download().tensor);
  for (int j = 0; j < 64; ++j) {
    EXPECT_FALSE(std::isnan(v[static_cast<size_t>(j)]));
    EXPECT_TRUE(std::isnan(v[static_cast<size_t>(64 + j)]));
    EXPECT_TRUE(std::isnan(v[static_cast<size_t>(128 + j)]));
  }
}

TEST_F(CudaQuantTest, CudaViewsAreValidatedLikeCpu) {
  std::mt19937 rng(807);
  QuantPair q = make_quant(8, 64, 4, 32, DType::kBF16, rng);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kF32, {2, 64}, rng).tensor);
  DeviceTensor xi = DeviceTensor::upload(OwnedTensor::make(DType::kI32, {2, 64}).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kF32, {2, 8}, rng).tensor);
  QuantWeight bad = q.dev;
  bad.bits = 7;
  expect_kernel_error([&] { linear_q(ctx_, out.tensor, x.tensor, bad); }, {"linear_q", "bits=7"});
  expect_kernel_error([&] { linear_q(ctx_, out.tensor, xi.tensor, q.dev); }, {"linear_q", "must be f32 or bf16"});
  OwnedTensor host_x = random_tensor(DType::kF32, {2, 64}, rng);
  expect_kernel_error([&] { linear_q(ctx_, out.tensor, host_x.tensor, q.dev); }, {"different devices"});
}

// The GEMV path allocates nothing (no scratch), so decode steps can be captured in a CUDA graph; replaying
// the graph gives the eager result bit for bit.
TEST_F(CudaQuantTest, GemvTakesNoScratchAndReplaysFromAGraph) {
  std::mt19937 rng(808);
  void* stream = cuda::stream_create();
  Context ctx;
  ctx.cuda_stream = stream;
  QuantPair q = make_quant(300, 256, 4, 64, DType::kBF16, rng);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {4, 256}, rng).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {4, 300}, rng).tensor);
  linear_q(ctx, out.tensor, x.tensor, q.dev);
  cuda::synchronize(stream);
  EXPECT_EQ(cuda::scratch_capacity(stream), 0u);
  const std::vector<float> eager = values(out.download().tensor);
  DeviceTensor out2 = DeviceTensor::upload(random_tensor(DType::kBF16, {4, 300}, rng).tensor);
  cuda::graph_begin_capture(stream);
  linear_q(ctx, out2.tensor, x.tensor, q.dev);
  void* exec = cuda::graph_end_capture(stream);
  cuda::graph_launch(exec, stream);
  cuda::synchronize(stream);
  const std::vector<float> replay = values(out2.download().tensor);
  EXPECT_EQ(std::memcmp(eager.data(), replay.data(), eager.size() * 4), 0);
  cuda::graph_destroy(exec);
  cuda::stream_destroy(stream);
}

// BUNSEN_CUDA_BENCH=1: GB/s of the GEMV on the Llama-3.1-8B decode matrices (packed + scales + biases),
// rotating over enough copies of each matrix that the L2 cache cannot hold them.
TEST_F(CudaQuantTest, BenchGemvOnDecodeShapes) {
  const char* on = std::getenv("BUNSEN_CUDA_BENCH");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "set BUNSEN_CUDA_BENCH=1";
  std::mt19937 rng(809);
  struct Shape {
    int64_t n, k;
  };
  for (int bits : {4, 8})
    for (Shape s : {Shape{6144, 4096}, Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336},
                    Shape{128256, 4096}}) {
      const int64_t words = s.k * bits / 32, groups = s.k / 64;
      OwnedTensor packed = OwnedTensor::make(DType::kU32, {s.n, words});
      for (int64_t i = 0; i < s.n * words; ++i) packed.tensor.ptr<uint32_t>()[i] = static_cast<uint32_t>(rng());
      OwnedTensor sc = random_tensor(DType::kBF16, {s.n, groups}, rng, -0.002f, 0.002f);
      const double bytes = static_cast<double>(packed.tensor.nbytes() + 2 * sc.tensor.nbytes());
      const int copies = static_cast<int>(std::max(1.0, 512e6 / bytes));
      std::vector<DeviceTensor> dp, ds;
      for (int c = 0; c < copies; ++c) {
        dp.push_back(DeviceTensor::upload(packed.tensor));
        ds.push_back(DeviceTensor::upload(sc.tensor));
      }
      for (int64_t m : {1, 2, 4, 8}) {
        DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {m, s.k}, rng).tensor);
        DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {m, s.n}, rng).tensor);
        auto run = [&](int c) {
          linear_q(ctx_, out.tensor, x.tensor, QuantWeight{dp[c].tensor, ds[c].tensor, ds[c].tensor, bits, 64});
        };
        for (int c = 0; c < copies; ++c) run(c);
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        const int reps = std::max(50, copies * 2);
        cudaEventRecord(a);
        for (int r = 0; r < reps; ++r) run(r % copies);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        const double us = 1000.0 * ms / reps;
        std::printf("[ bench    ] q%d m=%lld %6lld x %5lld  %8.2f us  %7.1f GB/s\n", bits, (long long)m,
                    (long long)s.n, (long long)s.k, us, bytes / (us * 1e3));
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      }
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
