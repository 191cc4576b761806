// The fused row-wise norms (ops.h rms_norm_qkv, post_norm_residual) against the unfused op sequences they
// replace: on the CPU bit for bit (these tests run without a GPU too), on CUDA against the unfused CUDA ops
// on the same inputs (f32 and bf16 activations, every weight dtype, 1..9 token rows, head_dim 256/512/72/33,
// d 2560/647/8, 16-byte aligned rows and misaligned column slices whose pad columns must stay untouched, the
// in-place q/k/v and v-from-raw-k aliasing the Gemma-4 layer uses), plus the argument checks. Also the
// Gemma-4 fixtures on CUDA with BUNSEN_GEMMA4_FUSED_NORMS=0 vs 1 (same logits up to bf16 reduction order) and
// an env-gated micro-benchmark of one e4b layer's row-wise chain (BUNSEN_BENCH_ROWWISE_FUSED=1).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "graph_bench_util.h"
#include "kernels/cuda/rowwise_fused_ops.h"

namespace bunsen::kernels::test {
namespace {

constexpr float kEps = 1e-6f;

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = values(a), vb = values(b);
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// ---- CPU: the fused ops are exactly the unfused sequences ----

struct QkvCase {
  int64_t n, nh, nkv, hd;
  bool v_from_k, shared, weightless_q;
};

TEST(RowwiseFusedCpu, QkvNormIsTheUnfusedSequenceBitForBit) {
  std::mt19937 rng(7001);
  Context ctx;
  for (const QkvCase c :
       {QkvCase{1, 8, 2, 256, false, false, false}, QkvCase{3, 8, 2, 512, true, false, false},
        QkvCase{9, 4, 1, 33, false, false, true}, QkvCase{5, 8, 2, 256, false, true, false},
        QkvCase{2, 6, 3, 72, true, false, true}}) {
    const std::string what =
        strfmt("n %lld hd %lld v_from_k %d shared %d", (long long)c.n, (long long)c.hd, c.v_from_k, c.shared);
    OwnedTensor q = random_tensor(DType::kF32, {c.n * c.nh, c.hd}, rng, -3, 3);
    OwnedTensor k = random_tensor(DType::kF32, {c.n * c.nkv, c.hd}, rng, -3, 3);
    OwnedTensor v = random_tensor(DType::kF32, {c.n * c.nkv, c.hd}, rng, -3, 3);
    OwnedTensor qw = random_tensor(DType::kBF16, {c.hd}, rng), kw = random_tensor(DType::kF16, {c.hd}, rng);
    OwnedTensor ones = OwnedTensor::make(DType::kF32, {c.hd});
    for (int64_t j = 0; j < c.hd; ++j) ones.tensor.ptr<float>()[j] = 1.0f;
    OwnedTensor q2 = clone(q.tensor), k2 = clone(k.tensor), v2 = clone(v.tensor);
    // Unfused, in the model's old order.
    rms_norm(ctx, q2.tensor, q2.tensor, c.weightless_q ? ones.tensor : qw.tensor, kEps);
    if (!c.shared) {
      rms_norm(ctx, v2.tensor, c.v_from_k ? k2.tensor : v2.tensor, ones.tensor, kEps);
      rms_norm(ctx, k2.tensor, k2.tensor, kw.tensor, kEps);
    }
    QkvNorm a;
    a.q = q.tensor;
    a.q_w = c.weightless_q ? Tensor{} : qw.tensor;
    if (!c.shared) {
      a.k = k.tensor;
      a.v = v.tensor;
      a.k_w = kw.tensor;
      a.v_from_k = c.v_from_k;
    }
    rms_norm_qkv(ctx, a, kEps);
    EXPECT_TRUE(same_bits(q.tensor, q2.tensor)) << what;
    EXPECT_TRUE(same_bits(k.tensor, k2.tensor)) << what;
    EXPECT_TRUE(same_bits(v.tensor, v2.tensor)) << what;
  }
}

TEST(RowwiseFusedCpu, PostNormResidualIsTheUnfusedSequenceBitForBit) {
  std::mt19937 rng(7002);
  Context ctx;
  for (int64_t n : {1, 4, 9})
    for (int64_t d : {8, 647, 2560})
      for (bool next : {false, true})
        for (float x_scale : {1.0f, 0.37f})
          for (float off : {0.0f, 1.0f}) {
            const std::string what = strfmt("n %lld d %lld next %d scale %g offset %g", (long long)n,
                                            (long long)d, next, x_scale, off);
            OwnedTensor x = random_tensor(DType::kF32, {n, d}, rng, -4, 4);
            OwnedTensor y = random_tensor(DType::kF32, {n, d}, rng, -2, 2);
            OwnedTensor out = random_tensor(DType::kF32, {n, d}, rng);
            OwnedTensor wp = random_tensor(DType::kBF16, {d}, rng), wn = random_tensor(DType::kF32, {d}, rng);
            OwnedTensor x2 = clone(x.tensor), y2 = clone(y.tensor), out2 = clone(out.tensor);
            rms_norm(ctx, y2.tensor, y2.tensor, wp.tensor, kEps, off);
            if (next && x_scale == 1.0f) {
              add_rms_norm(ctx, out2.tensor, x2.tensor, y2.tensor, wn.tensor, kEps, 1.0f, off);
            } else {
              add_scaled(ctx, x2.tensor, y2.tensor);
              if (x_scale != 1.0f) scale(ctx, x2.tensor, x_scale);
              if (next) rms_norm(ctx, out2.tensor, x2.tensor, wn.tensor, kEps, off);
            }
            PostNormResidual a{
                .x = x.tensor, .y = y.tensor, .w_post = wp.tensor, .x_scale = x_scale, .w_offset = off};
            if (next) {
              a.out = out.tensor;
              a.w_next = wn.tensor;
            }
            post_norm_residual(ctx, a, kEps);
            EXPECT_TRUE(same_bits(x.tensor, x2.tensor)) << what;
            EXPECT_TRUE(same_bits(out.tensor, out2.tensor)) << what << (next ? "" : ": out untouched");
          }
}

TEST(RowwiseFusedCpu, RejectsBadArguments) {
  std::mt19937 rng(7003);
  Context ctx;
  OwnedTensor q = random_tensor(DType::kF32, {8, 64}, rng), k = random_tensor(DType::kF32, {2, 64}, rng);
  OwnedTensor k32 = random_tensor(DType::kF32, {2, 32}, rng), w = random_tensor(DType::kF32, {64}, rng);
  OwnedTensor w32 = random_tensor(DType::kF32, {32}, rng), v3 = random_tensor(DType::kF32, {3, 64}, rng);
  expect_kernel_error([&] { rms_norm_qkv(ctx, {.q = q.tensor, .k = k32.tensor}, kEps); },
                      {"rms_norm_qkv", "head_dim", "[2, 32]"});
  expect_kernel_error([&] { rms_norm_qkv(ctx, {.q = q.tensor, .q_w = w32.tensor}, kEps); },
                      {"rms_norm_qkv", "q_w"});
  expect_kernel_error([&] { rms_norm_qkv(ctx, {.q = q.tensor, .v_from_k = true}, kEps); },
                      {"rms_norm_qkv", "v_from_k"});
  expect_kernel_error([&] { rms_norm_qkv(ctx, {.k = k.tensor, .v = v3.tensor, .v_from_k = true}, kEps); },
                      {"rms_norm_qkv", "v_from_k", "[3, 64]"});
  expect_kernel_error([&] { rms_norm_qkv(ctx, {.q = q.tensor, .k = q.tensor.slice(0, 2, 4)}, kEps); },
                      {"rms_norm_qkv", "overlap"});
  OwnedTensor x = random_tensor(DType::kF32, {3, 64}, rng), y = random_tensor(DType::kF32, {3, 64}, rng);
  OwnedTensor y2 = random_tensor(DType::kF32, {2, 64}, rng);
  expect_kernel_error(
      [&] { post_norm_residual(ctx, {.x = x.tensor, .y = y2.tensor, .w_post = w.tensor}, kEps); },
      {"post_norm_residual", "[3, 64]", "[2, 64]"});
  expect_kernel_error(
      [&] { post_norm_residual(ctx, {.x = x.tensor, .y = y.tensor, .w_post = w32.tensor}, kEps); },
      {"post_norm_residual", "w_post"});
  expect_kernel_error(
      [&] {
        post_norm_residual(ctx, {.x = x.tensor, .y = y.tensor, .w_post = w.tensor, .out = y2.tensor}, kEps);
      },
      {"post_norm_residual", "together"});
  expect_kernel_error(
      [&] {
        post_norm_residual(
            ctx, {.x = x.tensor, .y = y.tensor, .w_post = w.tensor, .out = x.tensor, .w_next = w.tensor},
            kEps);
      },
      {"post_norm_residual", "out", "overlap"});
  expect_kernel_error(
      [&] { post_norm_residual(ctx, {.x = x.tensor, .y = x.tensor, .w_post = w.tensor}, kEps); },
      {"post_norm_residual", "overlap"});
}

// ---- CUDA: the fused kernels against the unfused CUDA ops on the same device inputs ----

// A device [rows, cols] activation, either contiguous (16-byte aligned rows) or a misaligned column slice
// [rows, 1 + cols + 2)[:, 1:1+cols] of a wider buffer (the scalar paths); `host` holds its initial values.
struct DevAct {
  OwnedTensor host;  // [rows, cols + pad] as uploaded
  DeviceTensor dev;
  Tensor view;
  int64_t pad = 0;
  static DevAct make(DType dt, int64_t rows, int64_t cols, bool misaligned, std::mt19937& rng, float lo,
                     float hi) {
    DevAct a;
    a.pad = misaligned ? 3 : 0;
    a.host = random_tensor(dt, {rows, cols + a.pad}, rng, lo, hi);
    a.dev = DeviceTensor::upload(a.host.tensor);
    a.view = misaligned ? a.dev.tensor.slice(1, 1, 1 + cols) : a.dev.tensor;
    return a;
  }
  DevAct twin() const {  // another device copy of the same initial values
    DevAct a;
    a.pad = pad;
    a.host = clone(host.tensor);
    a.dev = DeviceTensor::upload(a.host.tensor);
    a.view = pad ? a.dev.tensor.slice(1, 1, 1 + view.dim(1)) : a.dev.tensor;
    return a;
  }
  // The view's initial values (host).
  Tensor initial() const { return host.tensor.slice(1, pad ? 1 : 0, (pad ? 1 : 0) + view.dim(1)); }
  // The view's values (host) and a check that the pad columns still hold their initial values.
  OwnedTensor result(const std::string& what) const {
    OwnedTensor all = dev.download();
    for (int64_t r = 0; pad && r < all.tensor.dim(0); ++r)
      for (int64_t c : {int64_t{0}, view.dim(1) + 1, view.dim(1) + 2}) {
        EXPECT_EQ(load_f(all.tensor.row_ptr(r), all.tensor.dtype, c),
                  load_f(host.tensor.row_ptr(r), host.tensor.dtype, c))
            << what << ": pad column " << c << " of row " << r << " changed";
      }
    return pad ? clone(all.tensor.slice(1, 1, 1 + view.dim(1))) : clone(all.tensor);
  }
};

TEST_F(CudaTest, RmsNormQkvMatchesTheUnfusedOps) {
  std::mt19937 rng(7101);
  for (DType act : kActDtypes)
    for (DType wdt : kWeightDtypes)
      for (int64_t hd : {256, 512, 72, 33})
        for (int64_t n : {1, 2, 9})
          for (int mode = 0; mode < 3; ++mode)  // 0: own v, 1: v from raw k, 2: KV-shared (q only)
            for (bool misaligned : {false, true}) {
              const int64_t nh = 8, nkv = 2;
              const std::string what =
                  strfmt("act %s w %s hd %lld n %lld mode %d misaligned %d", dtype_name(act), dtype_name(wdt),
                         (long long)hd, (long long)n, mode, misaligned);
              DevAct q = DevAct::make(act, n * nh, hd, misaligned, rng, -3, 3);
              DevAct k = DevAct::make(act, n * nkv, hd, misaligned, rng, -3, 3);
              DevAct v = DevAct::make(act, n * nkv, hd, misaligned, rng, -3, 3);
              DevAct q2 = q.twin(), k2 = k.twin(), v2 = v.twin();
              OwnedTensor qw = random_tensor(wdt, {hd}, rng), kw = random_tensor(wdt, {hd}, rng);
              OwnedTensor ones = OwnedTensor::make(DType::kF32, {hd});
              for (int64_t j = 0; j < hd; ++j) ones.tensor.ptr<float>()[j] = 1.0f;
              DeviceTensor qwd = DeviceTensor::upload(qw.tensor), kwd = DeviceTensor::upload(kw.tensor);
              DeviceTensor onesd = DeviceTensor::upload(ones.tensor);
              rms_norm(ctx_, q2.view, q2.view, qwd.tensor, kEps);
              if (mode != 2) {
                rms_norm(ctx_, v2.view, mode == 1 ? k2.view : v2.view, onesd.tensor, kEps);
                rms_norm(ctx_, k2.view, k2.view, kwd.tensor, kEps);
              }
              QkvNorm a;
              a.q = q.view;
              a.q_w = qwd.tensor;
              if (mode != 2) {
                a.k = k.view;
                a.k_w = kwd.tensor;
                a.v = v.view;  // v_w empty: no weight
                a.v_from_k = mode == 1;
              }
              rms_norm_qkv(ctx_, a, kEps);
              const float tol = tolerance(act);
              expect_close(q.result(what).tensor, q2.result(what).tensor, tol, what + " q");
              expect_close(k.result(what).tensor, k2.result(what).tensor, tol, what + " k");
              expect_close(v.result(what).tensor, v2.result(what).tensor, tol, what + " v");
              if (mode == 2) {
                EXPECT_TRUE(same_bits(v.result(what).tensor, v.initial()))
                    << what << ": a shared layer's v is untouched";
              }
            }
}

TEST_F(CudaTest, PostNormResidualMatchesTheUnfusedOps) {
  std::mt19937 rng(7102);
  struct Dt {
    DType x, y, out;
  };
  for (const Dt dt :
       {Dt{DType::kF32, DType::kBF16, DType::kBF16}, Dt{DType::kF32, DType::kF32, DType::kF32},
        Dt{DType::kBF16, DType::kBF16, DType::kBF16}, Dt{DType::kF32, DType::kF32, DType::kBF16}})
    for (DType wdt : kWeightDtypes)
      for (int64_t d : {2560, 647, 8})
        for (int64_t n : {1, 3, 9})
          for (bool next : {false, true})
            for (bool misaligned : {false, true}) {
              const float x_scale = next ? 0.37f : 1.0f, off = wdt == DType::kF16 ? 1.0f : 0.0f;
              const std::string what = strfmt("x %s y %s out %s w %s d %lld n %lld next %d misaligned %d",
                                              dtype_name(dt.x), dtype_name(dt.y), dtype_name(dt.out),
                                              dtype_name(wdt), (long long)d, (long long)n, next, misaligned);
              DevAct x = DevAct::make(dt.x, n, d, misaligned, rng, -4, 4);
              DevAct y = DevAct::make(dt.y, n, d, misaligned, rng, -2, 2);
              DevAct out = DevAct::make(dt.out, n, d, misaligned, rng, -1, 1);
              DevAct x2 = x.twin(), y2 = y.twin(), out2 = out.twin();
              OwnedTensor wp = random_tensor(wdt, {d}, rng), wn = random_tensor(wdt, {d}, rng);
              DeviceTensor wpd = DeviceTensor::upload(wp.tensor), wnd = DeviceTensor::upload(wn.tensor);
              rms_norm(ctx_, y2.view, y2.view, wpd.tensor, kEps, off);
              add_scaled(ctx_, x2.view, y2.view);
              scale(ctx_, x2.view, x_scale);
              if (next) rms_norm(ctx_, out2.view, x2.view, wnd.tensor, kEps, off);
              PostNormResidual a{
                  .x = x.view, .y = y.view, .w_post = wpd.tensor, .x_scale = x_scale, .w_offset = off};
              if (next) {
                a.out = out.view;
                a.w_next = wnd.tensor;
              }
              post_norm_residual(ctx_, a, kEps);
              // x: the same stored values up to the f32 reduction order of rms_norm(y) (one bf16 ulp of y's
              // norm).
              const bool any_bf16 = dt.x == DType::kBF16 || dt.y == DType::kBF16;
              expect_close(x.result(what).tensor, x2.result(what).tensor, any_bf16 ? 1e-2f : 2e-5f,
                           what + " x");
              OwnedTensor o = out.result(what);
              if (next)
                expect_close(o.tensor, out2.result(what).tensor,
                             any_bf16 || dt.out == DType::kBF16 ? 1e-2f : 2e-5f, what + " out");
              else
                EXPECT_TRUE(same_bits(o.tensor, out.initial()))
                    << what << ": out untouched without a next norm";
            }
}

TEST_F(CudaTest, FusedRowwiseOpsRejectMixedDtypesAndTooLongRows) {
  std::mt19937 rng(7103);
  DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {8, 64}, rng).tensor);
  DeviceTensor k = DeviceTensor::upload(random_tensor(DType::kF32, {2, 64}, rng).tensor);
  expect_kernel_error([&] { rms_norm_qkv(ctx_, {.q = q.tensor, .k = k.tensor}, kEps); },
                      {"rms_norm_qkv", "dtype"});
  const int64_t d = cuda::kPostNormMaxCols + 8;
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kF32, {1, d}, rng).tensor);
  DeviceTensor y = DeviceTensor::upload(random_tensor(DType::kBF16, {1, d}, rng).tensor);
  DeviceTensor w = DeviceTensor::upload(random_tensor(DType::kBF16, {d}, rng).tensor);
  try {
    post_norm_residual(ctx_, {.x = x.tensor, .y = y.tensor, .w_post = w.tensor}, kEps);
    ADD_FAILURE() << "no error for rows of " << d;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("post_norm_residual"), std::string::npos) << e.what();
  }
}

// ---- micro-benchmark: one Gemma-4 e4b layer's row-wise chain at decode (BUNSEN_BENCH_ROWWISE_FUSED=1) ----

class RowwiseFusedBench : public GraphBench {
 protected:
  const char* bench_env() const override { return "BUNSEN_BENCH_ROWWISE_FUSED"; }
};

TEST_F(RowwiseFusedBench, Gemma4LayerNormChain) {
  std::mt19937 rng(7201);
  const int64_t d = 2560, nh = 8, nkv = 2;
  for (int64_t hd : {256, 512})
    for (int64_t n : {1, 4}) {
      DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kF32, {n, d}, rng).tensor);
      DeviceTensor h = DeviceTensor::upload(random_tensor(DType::kBF16, {n, d}, rng).tensor);
      DeviceTensor proj = DeviceTensor::upload(random_tensor(DType::kBF16, {n, d}, rng).tensor);
      DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {n * nh, hd}, rng).tensor);
      DeviceTensor k = DeviceTensor::upload(random_tensor(DType::kBF16, {n * nkv, hd}, rng).tensor);
      DeviceTensor v = DeviceTensor::upload(random_tensor(DType::kBF16, {n * nkv, hd}, rng).tensor);
      DeviceTensor wd = DeviceTensor::upload(random_tensor(DType::kBF16, {d}, rng, 0.5f, 1.5f).tensor);
      DeviceTensor wh = DeviceTensor::upload(random_tensor(DType::kBF16, {hd}, rng, 0.5f, 1.5f).tensor);
      OwnedTensor ones_h = OwnedTensor::make(DType::kF32, {hd});
      for (int64_t j = 0; j < hd; ++j) ones_h.tensor.ptr<float>()[j] = 1.0f;
      DeviceTensor ones = DeviceTensor::upload(ones_h.tensor);
      // Unfused: q, v, k norms; post_attn + add_rms_norm; post_ffw + add; post_ple + add + scale + next
      // in_norm.
      const double unfused = time_us([&](int) {
        rms_norm(ctx_, q.tensor, q.tensor, wh.tensor, kEps);
        rms_norm(ctx_, v.tensor, v.tensor, ones.tensor, kEps);
        rms_norm(ctx_, k.tensor, k.tensor, wh.tensor, kEps);
        rms_norm(ctx_, proj.tensor, proj.tensor, wd.tensor, kEps);
        add_rms_norm(ctx_, h.tensor, x.tensor, proj.tensor, wd.tensor, kEps);
        rms_norm(ctx_, proj.tensor, proj.tensor, wd.tensor, kEps);
        add_scaled(ctx_, x.tensor, proj.tensor);
        rms_norm(ctx_, proj.tensor, proj.tensor, wd.tensor, kEps);
        add_scaled(ctx_, x.tensor, proj.tensor);
        scale(ctx_, x.tensor, 0.999f);
        rms_norm(ctx_, h.tensor, x.tensor, wd.tensor, kEps);
      });
      const double fused = time_us([&](int) {
        rms_norm_qkv(ctx_, {.q = q.tensor, .k = k.tensor, .v = v.tensor, .q_w = wh.tensor, .k_w = wh.tensor},
                     kEps);
        post_norm_residual(
            ctx_,
            {.x = x.tensor, .y = proj.tensor, .w_post = wd.tensor, .out = h.tensor, .w_next = wd.tensor},
            kEps);
        post_norm_residual(ctx_, {.x = x.tensor, .y = proj.tensor, .w_post = wd.tensor}, kEps);
        post_norm_residual(ctx_,
                           {.x = x.tensor,
                            .y = proj.tensor,
                            .w_post = wd.tensor,
                            .out = h.tensor,
                            .w_next = wd.tensor,
                            .x_scale = 0.999f},
                           kEps);
      });
      std::printf(
          "[bench] gemma4 layer norm chain n=%lld hd=%lld: unfused (11 launches) %.2f us, fused (4) %.2f us"
          " -> %.2f us/layer saved, x42 layers = %.1f us/token\n",
          (long long)n, (long long)hd, unfused, fused, unfused - fused, 42.0 * (unfused - fused));
    }
}

}  // namespace
}  // namespace bunsen::kernels::test

// ---- the Gemma-4 fixtures on CUDA with and without the fused norms (BUNSEN_GEMMA4_FUSED_NORMS) ----
namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

// Sets an environment variable for one scope (the model reads BUNSEN_GEMMA4_FUSED_NORMS when it is built).
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had = false;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    setenv(n, value, 1);
  }
  ~ScopedEnv() { had ? setenv(name.c_str(), old.c_str(), 1) : unsetenv(name.c_str()); }
};

TEST_F(CudaTest, Gemma4FusedNormsMatchTheUnfusedPathOnEveryGemma4Fixture) {
  int fixtures = 0;
  for (const std::string& name : fixture_names()) {
    if (name.rfind("gemma4", 0) != 0) continue;
    SCOPED_TRACE(name);
    ++fixtures;
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kBF16, "cuda");
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size());
    std::vector<float> prompt[2], decode[2];
    int64_t vocab = 0;
    for (int fused = 0; fused < 2; ++fused) {
      ScopedEnv env("BUNSEN_GEMMA4_FUSED_NORMS", fused ? "1" : "0");
      auto m = load(dir, Device::cuda(0));
      vocab = m->config().vocab_size;
      engine::Runner runner(*m, runner_options(T, static_cast<int64_t>(greedy.size()) + 8));
      prompt[fused] = engine::score(runner, ids);
      decode[fused] = decode_logits(runner, ids, greedy);
    }
    double worst = 1.0;
    for (const auto* pair : {&prompt, &decode}) {
      const std::vector<float>& a = (*pair)[0];
      const std::vector<float>& b = (*pair)[1];
      ASSERT_EQ(a.size(), b.size());
      for (size_t r = 0; r * vocab < a.size(); ++r) {
        const float* ra = a.data() + r * vocab;
        const float* rb = b.data() + r * vocab;
        const double cs = cosine(ra, rb, static_cast<size_t>(vocab));
        worst = std::min(worst, cs);
        EXPECT_GE(cs, 0.9995) << name << " row " << r;
        if (argmax(ra, vocab) != argmax(rb, vocab)) {
          EXPECT_LT(margin(ra, vocab), kClearMargin)
              << name << " row " << r << ": the fused path flips a clear argmax";
        }
      }
    }
    std::printf("[ cuda     ] %-28s fused vs unfused norms: min logit cosine %.7f\n", name.c_str(), worst);
  }
  EXPECT_GT(fixtures, 0) << "no gemma4 fixture";
}

}  // namespace
}  // namespace bunsen::golden
