// The residual add and RMSNorm folded into the decode projections' GEMV prologue (kernels::AddRmsNorm on
// linear_swiglu, linear_multi and linear_qkv_rope_kv, gemv.cu's norm_prologue; linear_q_multi and
// linear_q_swiglu, the 4-bit tiled and 8-bit f16 GEMVs') against add_rms_norm (out of
// place, x_in to x_out) followed by the unfused projection: outputs, the new residual x_out and (q/k/v) the
// paged cache bit for bit, x_in untouched, over m 1..3 (3 falls back), both GEMV paths, widths whose norm
// block is not a multiple of the GEMV block (2560: 10 warps; 1000: 4 warps with a partial one), f32 and bf16
// y and norm weights, a residual multiplier and a weight offset. The fused launch leaves the projection's
// input buffer untouched (its x lives in shared memory), which tells the fused path from the fallback. The
// post-norm form (Gemma's sandwich norms, AddRmsNorm::y_w) against post_norm_residual on a copy of x_in, the
// same way. Model level: every wired family's fixtures decode to the same logits with the prologue on and
// off, eagerly and from CUDA graphs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../golden/golden_file.h"
#include "../kernels/kernel_test_util.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "kernels/cuda/quant_ops.h"
#include "quant_test_util.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;
using kernels::test::DeviceTensor;

bool same_bytes(const DeviceTensor& a, const DeviceTensor& b) {
  const OwnedTensor x = a.download(), y = b.download();
  return x.tensor.nbytes() == y.tensor.nbytes() &&
         std::memcmp(x.tensor.data, y.tensor.data, x.tensor.nbytes()) == 0;
}

struct NormCase {
  int64_t d;
  DType y_dtype, w_dtype;
  float y_scale, w_offset;
  bool post = false;  // the post-norm form: y_w (w_dtype) and x_scale
  float x_scale = 1.0f;
};

constexpr NormCase kNormCases[] = {{4096, DType::kBF16, DType::kF32, 1.0f, 0.0f},
                                   {2048, DType::kBF16, DType::kBF16, 0.5f, 0.0f},
                                   {2560, DType::kF32, DType::kF32, 1.0f, 1.0f},
                                   {1000, DType::kBF16, DType::kF32, 1.0f, 0.0f}};
// Gemma 4 e4b's width with bf16 weights and a layer scalar, its 26B-A4B's (2816), and odd cases.
constexpr NormCase kPostCases[] = {{2560, DType::kBF16, DType::kBF16, 1.0f, 0.0f, true, 0.75f},
                                   {2816, DType::kBF16, DType::kBF16, 1.0f, 0.0f, true, 1.0f},
                                   {4096, DType::kF32, DType::kF32, 1.0f, 1.0f, true, 1.25f},
                                   {1000, DType::kBF16, DType::kF32, 1.0f, 0.0f, true, 0.5f}};

// The inputs of one AddRmsNorm over [m, d] and two copies of everything it writes ([0] unfused, [1] fused).
struct NormInputs {
  DeviceTensor x_in, y, w, y_w, x_out[2], h[2];
  OwnedTensor x_in_host, h_host;

  NormInputs(const NormCase& c, int64_t m, std::mt19937& rng) {
    auto rnd = [&](DType t, std::initializer_list<int64_t> shape, float lo, float hi) {
      return kernels::test::random_tensor(t, shape, rng, lo, hi);
    };
    x_in_host = rnd(DType::kF32, {m, c.d}, -4.0f, 4.0f);
    x_in = DeviceTensor::upload(x_in_host.tensor);
    y = DeviceTensor::upload(rnd(c.y_dtype, {m, c.d}, -2.0f, 2.0f).tensor);
    w = DeviceTensor::upload(rnd(c.w_dtype, {c.d}, 0.5f, 1.5f).tensor);
    if (c.post) y_w = DeviceTensor::upload(rnd(c.w_dtype, {c.d}, 0.5f, 1.5f).tensor);
    const OwnedTensor xo = rnd(DType::kF32, {m, c.d}, -1.0f, 1.0f);
    h_host = rnd(DType::kBF16, {m, c.d}, -1.0f, 1.0f);
    for (int i = 0; i < 2; ++i) {
      x_out[i] = DeviceTensor::upload(xo.tensor);
      h[i] = DeviceTensor::upload(h_host.tensor);
    }
  }

  kernels::AddRmsNorm pre(const NormCase& c, int way) const {
    if (c.post)
      return {x_in.tensor, y.tensor,   x_out[way].tensor, w.tensor, 1e-5f,
              1.0f,        c.w_offset, y_w.tensor,        c.x_scale};
    return {x_in.tensor, y.tensor, x_out[way].tensor, w.tensor, 1e-5f, c.y_scale, c.w_offset};
  }

  // x_in as uploaded; h[1] untouched exactly when the fused prologue ran.
  void expect_fused(bool want_fused) const {
    const OwnedTensor xi = x_in.download(), h1 = h[1].download();
    EXPECT_EQ(std::memcmp(xi.tensor.data, x_in_host.tensor.data, xi.tensor.nbytes()), 0) << "x_in changed";
    const bool untouched = std::memcmp(h1.tensor.data, h_host.tensor.data, h1.tensor.nbytes()) == 0;
    EXPECT_EQ(untouched, want_fused) << (want_fused ? "fell back to add_rms_norm"
                                                    : "fused where it should not");
  }
};

TEST_F(CudaTest, FusedNormSwigluEqualsAddRmsNormThenSwiglu) {
  std::mt19937 rng(2027);
  kernels::set_fused_norm_for_testing(1);
  for (const NormCase& c : kNormCases) {
    const int64_t f = 1536;
    const DeviceTensor wg =
        DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, {f, c.d}, rng).tensor);
    const DeviceTensor wu =
        DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, {f, c.d}, rng).tensor);
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3}) {
        SCOPED_TRACE(strfmt("d %lld y %s w %s m %lld", (long long)c.d, dtype_name(c.y_dtype),
                            dtype_name(c.w_dtype), (long long)m));
        NormInputs in(c, m, rng);
        const OwnedTensor garbage = kernels::test::random_tensor(DType::kBF16, {m, f}, rng);
        DeviceTensor out[2] = {DeviceTensor::upload(garbage.tensor), DeviceTensor::upload(garbage.tensor)};
        const kernels::AddRmsNorm p0 = in.pre(c, 0), p1 = in.pre(c, 1);
        kernels::add_rms_norm(ctx_, in.h[0].tensor, p0);
        kernels::linear_swiglu(ctx_, out[0].tensor, in.h[0].tensor, wg.tensor, wu.tensor);
        kernels::linear_swiglu(ctx_, out[1].tensor, in.h[1].tensor, wg.tensor, wu.tensor, {}, {},
                               kernels::GluAct::kSilu, &p1);
        EXPECT_TRUE(same_bytes(out[0], out[1])) << "act";
        EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
        in.expect_fused(m <= 2);
        if (HasFailure()) return;
      }
    });
    if (HasFailure()) break;
  }
  kernels::set_fused_norm_for_testing(-1);
}

// The strided norm GEMV (BUNSEN_GEMV_STRIDE): launches with more warp groups than resident warps, so warps
// walk several rounds (the 8B's gate/up at 14,336 + 3 outputs, a partial last group; plain parts of 12,289
// rows), bit for bit against the blocked kernel: outputs and x_out.
TEST_F(CudaTest, StridedNormGemvGivesTheDefaultsBits) {
  std::mt19937 rng(2031);
  kernels::set_fused_norm_for_testing(1);
  for (const NormCase& c : {kNormCases[0], kNormCases[3]}) {
    SCOPED_TRACE(strfmt("d %lld", (long long)c.d));
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const int64_t f = 14336 + 3, n0 = 12289, n1 = 1024;
    const DeviceTensor wg = rnd({f, c.d}), wu = rnd({f, c.d}), wa = rnd({n0, c.d}), wb = rnd({n1, c.d});
    NormInputs in(c, 1, rng);
    const OwnedTensor garbage = kernels::test::random_tensor(DType::kBF16, {1, f}, rng);
    DeviceTensor act[2] = {DeviceTensor::upload(garbage.tensor), DeviceTensor::upload(garbage.tensor)};
    DeviceTensor a[2] = {rnd({1, n0}), rnd({1, n0})}, b[2] = {rnd({1, n1}), rnd({1, n1})};
    for (int way = 0; way < 2; ++way) {
      kernels::cuda::set_gemv_stride_for_testing(way);
      const kernels::AddRmsNorm p = in.pre(c, way);
      kernels::linear_swiglu(ctx_, act[way].tensor, in.h[way].tensor, wg.tensor, wu.tensor, {}, {},
                             kernels::GluAct::kSilu, &p);
      const kernels::LinearPart parts[2] = {{a[way].tensor, wa.tensor, {}}, {b[way].tensor, wb.tensor, {}}};
      kernels::linear_multi(ctx_, in.h[way].tensor, parts, &p);
    }
    kernels::cuda::set_gemv_stride_for_testing(-1);
    EXPECT_TRUE(same_bytes(act[0], act[1])) << "act";
    EXPECT_TRUE(same_bytes(a[0], a[1])) << "a";
    EXPECT_TRUE(same_bytes(b[0], b[1])) << "b";
    EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
    if (HasFailure()) break;
  }
  kernels::set_fused_norm_for_testing(-1);
}

// linear_multi (q/k/v without the rope fold: Qwen3's q/k norms come between) with a pre.
TEST_F(CudaTest, FusedNormLinearMultiEqualsAddRmsNormThenLinearMulti) {
  std::mt19937 rng(2030);
  kernels::set_fused_norm_for_testing(1);
  for (const NormCase& c : kNormCases) {
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const DeviceTensor wq = rnd({1024, c.d}), wk = rnd({256, c.d}), wv = rnd({256, c.d});
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3}) {
        SCOPED_TRACE(strfmt("d %lld y %s w %s m %lld", (long long)c.d, dtype_name(c.y_dtype),
                            dtype_name(c.w_dtype), (long long)m));
        NormInputs in(c, m, rng);
        DeviceTensor q[2] = {rnd({m, 1024}), rnd({m, 1024})}, k[2] = {rnd({m, 256}), rnd({m, 256})},
                     v[2] = {rnd({m, 256}), rnd({m, 256})};
        for (int way = 0; way < 2; ++way) {
          const kernels::LinearPart parts[3] = {
              {q[way].tensor, wq.tensor, {}}, {k[way].tensor, wk.tensor, {}}, {v[way].tensor, wv.tensor, {}}};
          const kernels::AddRmsNorm p = in.pre(c, way);
          if (way == 0) kernels::add_rms_norm(ctx_, in.h[0].tensor, p);
          kernels::linear_multi(ctx_, in.h[way].tensor, parts, way == 1 ? &p : nullptr);
        }
        EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
        EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
        EXPECT_TRUE(same_bytes(v[0], v[1])) << "v";
        EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
        in.expect_fused(m <= 2);
        if (HasFailure()) return;
      }
    });
    if (HasFailure()) break;
  }
  kernels::set_fused_norm_for_testing(-1);
}

// The post-norm form: the GeGLU gate/up (Gemma's feed-forward) and linear_multi (the next layer's q/k/v)
// against post_norm_residual on a copy of x_in then the plain launch; the unfused way runs kernels::
// add_rms_norm(pre), itself checked against post_norm_residual in place on x_out here. y is read only.
TEST_F(CudaTest, FusedNormPostFormEqualsPostNormResidualThenProjection) {
  std::mt19937 rng(2031);
  kernels::set_fused_norm_for_testing(1);
  kernels::cuda::set_qmma_norm_for_testing(1);  // past the default's d <= 2048 too
  for (const NormCase& c : kPostCases) {
    const int64_t f = 1536;
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const DeviceTensor wg = rnd({f, c.d}), wu = rnd({f, c.d}), wq = rnd({1024, c.d}), wk = rnd({256, c.d});
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3}) {
        SCOPED_TRACE(strfmt("d %lld y %s w %s m %lld x_scale %g", (long long)c.d, dtype_name(c.y_dtype),
                            dtype_name(c.w_dtype), (long long)m, c.x_scale));
        {  // gate/up with GeGLU gating
          NormInputs in(c, m, rng);
          const OwnedTensor y_host = in.y.download();
          DeviceTensor out[2] = {rnd({m, f}), rnd({m, f})};
          const kernels::AddRmsNorm p0 = in.pre(c, 0), p1 = in.pre(c, 1);
          kernels::add_rms_norm(ctx_, in.h[0].tensor, p0);
          kernels::linear_swiglu(ctx_, out[0].tensor, in.h[0].tensor, wg.tensor, wu.tensor, {}, {},
                                 kernels::GluAct::kGeluTanh);
          kernels::linear_swiglu(ctx_, out[1].tensor, in.h[1].tensor, wg.tensor, wu.tensor, {}, {},
                                 kernels::GluAct::kGeluTanh, &p1);
          EXPECT_TRUE(same_bytes(out[0], out[1])) << "act";
          EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
          in.expect_fused(m <= 2);
          const OwnedTensor y_after = in.y.download();
          EXPECT_EQ(std::memcmp(y_after.tensor.data, y_host.tensor.data, y_host.tensor.nbytes()), 0) << "y";
          // add_rms_norm(pre) is post_norm_residual on x_out = x_in.
          DeviceTensor x = DeviceTensor::upload(in.x_in_host.tensor), h = rnd({m, c.d});
          kernels::post_norm_residual(ctx_,
                                      {.x = x.tensor,
                                       .y = in.y.tensor,
                                       .w_post = in.y_w.tensor,
                                       .out = h.tensor,
                                       .w_next = in.w.tensor,
                                       .x_scale = c.x_scale,
                                       .w_offset = c.w_offset},
                                      1e-5f);
          EXPECT_TRUE(same_bytes(x, in.x_out[0])) << "add_rms_norm(pre) x_out vs post_norm_residual";
          EXPECT_TRUE(same_bytes(h, in.h[0])) << "add_rms_norm(pre) h vs post_norm_residual";
        }
        {  // q/k
          NormInputs in(c, m, rng);
          DeviceTensor q[2] = {rnd({m, 1024}), rnd({m, 1024})}, k[2] = {rnd({m, 256}), rnd({m, 256})};
          for (int way = 0; way < 2; ++way) {
            const kernels::LinearPart parts[2] = {{q[way].tensor, wq.tensor, {}},
                                                  {k[way].tensor, wk.tensor, {}}};
            const kernels::AddRmsNorm p = in.pre(c, way);
            if (way == 0) kernels::add_rms_norm(ctx_, in.h[0].tensor, p);
            kernels::linear_multi(ctx_, in.h[way].tensor, parts, way == 1 ? &p : nullptr);
          }
          EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
          EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
          EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
          in.expect_fused(m <= 2);
        }
        if (HasFailure()) return;
      }
    });
    if (HasFailure()) break;
  }
  kernels::set_fused_norm_for_testing(-1);
}

TEST_F(CudaTest, FusedNormQkvRopeEqualsAddRmsNormThenFold) {
  std::mt19937 rng(2028);
  kernels::set_fused_norm_for_testing(1);
  kernels::set_qkv_rope_fold_for_testing(1);
  const int64_t n_heads = 8, n_kv_heads = 2, hd = 128, nq = n_heads * hd, nkv = n_kv_heads * hd;
  const int64_t n_blocks = 8, block_size = 16;
  std::vector<float> inv_freq(hd / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
  const kernels::RopeParams rope{inv_freq.data(), static_cast<int>(hd), 1.0f};
  for (const NormCase& c : kNormCases) {
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const DeviceTensor wq = rnd({nq, c.d}), wk = rnd({nkv, c.d}), wv = rnd({nkv, c.d});
    const OwnedTensor cache =
        kernels::test::random_tensor(DType::kBF16, {n_blocks, block_size, n_kv_heads, hd}, rng);
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3}) {
        SCOPED_TRACE(strfmt("d %lld y %s w %s m %lld", (long long)c.d, dtype_name(c.y_dtype),
                            dtype_name(c.w_dtype), (long long)m));
        NormInputs in(c, m, rng);
        OwnedTensor pos = OwnedTensor::make(DType::kI32, {m}), slot = OwnedTensor::make(DType::kI64, {m});
        for (int64_t i = 0; i < m; ++i) {
          pos.tensor.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % 4096);
          slot.tensor.ptr<int64_t>()[i] = 5 + 17 * i;
        }
        const DeviceTensor positions = DeviceTensor::upload(pos.tensor),
                           slots = DeviceTensor::upload(slot.tensor);
        DeviceTensor q[2] = {rnd({m, nq}), rnd({m, nq})}, k[2] = {rnd({m, nkv}), rnd({m, nkv})},
                     v[2] = {rnd({m, nkv}), rnd({m, nkv})};
        DeviceTensor ck[2] = {DeviceTensor::upload(cache.tensor), DeviceTensor::upload(cache.tensor)};
        DeviceTensor cv[2] = {DeviceTensor::upload(cache.tensor), DeviceTensor::upload(cache.tensor)};
        for (int way = 0; way < 2; ++way) {
          const kernels::LinearPart parts[3] = {
              {q[way].tensor, wq.tensor, {}}, {k[way].tensor, wk.tensor, {}}, {v[way].tensor, wv.tensor, {}}};
          const kernels::AddRmsNorm p = in.pre(c, way);
          if (way == 0) kernels::add_rms_norm(ctx_, in.h[0].tensor, p);
          EXPECT_TRUE(kernels::linear_qkv_rope_kv(
              ctx_, in.h[way].tensor, parts, q[way].tensor.reshape({m, n_heads, hd}),
              k[way].tensor.reshape({m, n_kv_heads, hd}), v[way].tensor.reshape({m, n_kv_heads, hd}),
              kernels::PagedKv(ck[way].tensor, cv[way].tensor), positions.tensor, slots.tensor, rope,
              way == 1 ? &p : nullptr))
              << "way " << way << ": the fold fell back to the two ops";
        }
        EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
        EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
        EXPECT_TRUE(same_bytes(v[0], v[1])) << "v";
        EXPECT_TRUE(same_bytes(ck[0], ck[1])) << "cache k";
        EXPECT_TRUE(same_bytes(cv[0], cv[1])) << "cache v";
        EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out";
        in.expect_fused(m <= 2);
        if (HasFailure()) return;
      }
    });
    if (HasFailure()) break;
  }
  kernels::set_qkv_rope_fold_for_testing(-1);
  kernels::set_fused_norm_for_testing(-1);
}

// An x_out that overlaps x_in is refused by name before anything runs.
TEST_F(CudaTest, FusedNormRejectsOverlappingResidualBuffers) {
  std::mt19937 rng(2029);
  const NormCase c{256, DType::kBF16, DType::kF32, 1.0f, 0.0f};
  NormInputs in(c, 1, rng);
  const DeviceTensor wg =
      DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, {64, c.d}, rng).tensor);
  DeviceTensor out = DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, {1, 64}, rng).tensor);
  kernels::AddRmsNorm p = in.pre(c, 1);
  p.x_out = p.x_in;
  try {
    kernels::linear_swiglu(ctx_, out.tensor, in.h[1].tensor, wg.tensor, wg.tensor, {}, {},
                           kernels::GluAct::kSilu, &p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
}

// The quantized projections with a pre (linear_q_multi, linear_q_swiglu): the 4-bit tiled tensor-core GEMV
// (d % 512 == 0) and the 8-bit f16 one (d % 256 == 0) compute the norm in their prologue (group 64, d <=
// 4096, m <= 2), staging the rounded values and their group statistics as they stage a bf16 x; elsewhere
// add_rms_norm runs first (a width past 4096, m 3). Outputs and x_out bit for bit against add_rms_norm
// followed by the plain launch, at the forced k splits too (the prologue's launch takes the plain launch's
// split).
struct QuantNormCase {
  NormCase c;
  int bits;
  DType sb;
};
constexpr QuantNormCase kQuantNormCases[] = {
    {{4096, DType::kBF16, DType::kF32, 1.0f, 0.0f}, 4, DType::kBF16},
    {{2048, DType::kBF16, DType::kBF16, 0.5f, 0.0f}, 4, DType::kF16},
    {{2560, DType::kF32, DType::kF32, 1.0f, 1.0f}, 4, DType::kBF16},
    {{4096, DType::kBF16, DType::kF32, 1.0f, 0.0f}, 8, DType::kBF16},
    {{2560, DType::kF32, DType::kBF16, 0.5f, 1.0f}, 8, DType::kF16},
    // past 4096 (and at 4 bits not whole tiles): add_rms_norm first
    {{4160, DType::kBF16, DType::kF32, 1.0f, 0.0f}, 4, DType::kBF16},
    {{4160, DType::kBF16, DType::kF32, 1.0f, 0.0f}, 8, DType::kBF16}};

TEST_F(CudaTest, FusedNormQuantProjectionsEqualAddRmsNormThenTheLaunch) {
  using kernels::test::RandomQuantWeight;
  std::mt19937 rng(2031);
  kernels::set_fused_norm_for_testing(1);
  kernels::cuda::set_qmma_norm_for_testing(1);  // past the default's d <= 2048 too
  for (const QuantNormCase& qc : kQuantNormCases) {
    const NormCase& c = qc.c;
    const RandomQuantWeight wq(1024, c.d, qc.bits, 64, qc.sb, rng), wk(256, c.d, qc.bits, 64, qc.sb, rng),
        wv(256, c.d, qc.bits, 64, qc.sb, rng), wg(1536, c.d, qc.bits, 64, qc.sb, rng),
        wu(1536, c.d, qc.bits, 64, qc.sb, rng);
    auto garbage = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    for (int split : {0, 1, 8}) {
      kernels::cuda::set_linear_q_split_for_testing(split);
      for (int64_t m : {1, 2, 3}) {
        SCOPED_TRACE(strfmt("d %lld %d-bit scales %s y %s w %s m %lld split %d", (long long)c.d, qc.bits,
                            dtype_name(qc.sb), dtype_name(c.y_dtype), dtype_name(c.w_dtype), (long long)m,
                            split));
        const bool fused = c.d % (qc.bits == 4 ? 512 : 256) == 0 && c.d <= 4096 && m <= 2;
        {
          NormInputs in(c, m, rng);
          DeviceTensor q[2] = {garbage({m, 1024}), garbage({m, 1024})},
                       k[2] = {garbage({m, 256}), garbage({m, 256})},
                       v[2] = {garbage({m, 256}), garbage({m, 256})};
          for (int way = 0; way < 2; ++way) {
            const kernels::QuantLinearPart parts[3] = {
                {q[way].tensor, wq.dev, {}}, {k[way].tensor, wk.dev, {}}, {v[way].tensor, wv.dev, {}}};
            const kernels::AddRmsNorm p = in.pre(c, way);
            if (way == 0) kernels::add_rms_norm(ctx_, in.h[0].tensor, p);
            kernels::linear_q_multi(ctx_, in.h[way].tensor, parts, way == 1 ? &p : nullptr);
          }
          EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
          EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
          EXPECT_TRUE(same_bytes(v[0], v[1])) << "v";
          EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out (q/k/v)";
          in.expect_fused(fused);
        }
        {
          NormInputs in(c, m, rng);
          DeviceTensor out[2] = {garbage({m, 1536}), garbage({m, 1536})};
          const kernels::AddRmsNorm p0 = in.pre(c, 0), p1 = in.pre(c, 1);
          kernels::add_rms_norm(ctx_, in.h[0].tensor, p0);
          kernels::linear_q_swiglu(ctx_, out[0].tensor, in.h[0].tensor, wg.dev, wu.dev);
          kernels::linear_q_swiglu(ctx_, out[1].tensor, in.h[1].tensor, wg.dev, wu.dev, {}, {},
                                   kernels::GluAct::kSilu, &p1);
          EXPECT_TRUE(same_bytes(out[0], out[1])) << "act";
          EXPECT_TRUE(same_bytes(in.x_out[0], in.x_out[1])) << "x_out (gate/up)";
          in.expect_fused(fused);
        }
        if (HasFailure()) break;
      }
      if (HasFailure()) break;
    }
    kernels::cuda::set_linear_q_split_for_testing(0);
    if (HasFailure()) break;
  }
  kernels::cuda::set_qmma_norm_for_testing(-1);
  kernels::set_fused_norm_for_testing(-1);
}

// Every family whose forward passes its norms to the projections (llama-like, Qwen3-MoE with its dense and
// routed layers, the Qwen3.5 / Qwen3-Next hybrids with DeltaNet and gated-attention mixers, Gemma 4 with its
// post-norms, per-layer inputs and MoE) decodes the golden greedy continuation to the same logits with the
// prologue on and off, eagerly and replayed from CUDA graphs.
TEST_F(CudaTest, FusedNormDecodesBitForBitLikeAddRmsNorm) {
  int fixtures = 0;
  const std::vector<std::string> all = fixture_names();
  for (const std::string name :
       {"llama3", "llama_yarn", "mistral", "phi3", "qwen2", "granite", "smollm3", "qwen3", "qwen3_moe",
        "qwen3_moe_raw", "qwen3_5_text", "qwen3_next", "gemma4_text", "gemma4_moe"}) {
    if (std::find(all.begin(), all.end(), name) == all.end()) continue;
    SCOPED_TRACE(name);
    ++fixtures;
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda_fused_norm"), Device::cuda(0));
    expect_switch_decodes_bit_for_bit(*m, to_i32(f.outputs->get("input_ids")),
                                      to_i32(f.outputs->get("greedy")), kernels::set_fused_norm_for_testing);
  }
  EXPECT_GE(fixtures, 9);
}

}  // namespace
}  // namespace bunsen::golden
