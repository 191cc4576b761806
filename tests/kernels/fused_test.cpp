// The fused decode ops on the CPU (linear_multi, linear_swiglu with and without a pre norm, rope_kv_write,
// add_rms_norm from a separate x_in) equal, bit for bit, the unfused op sequences they stand for (the model's
// CPU path and golden tests rely on it), at odd sizes, every weight dtype, with and without biases, f32/bf16
// caches and partial/no rotation; the post-norm form of a pre; plus their argument errors.
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace bunsen::kernels::test {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(FusedCpu, LinearMultiEqualsOneLinearPerPart) {
  Context ctx;
  std::mt19937 rng(501);
  for (DType wt : kWeightDtypes)
    for (int64_t m : {1, 2, 5, 9})
      for (bool bias : {false, true}) {
        const int64_t k = 37, ns[3] = {33, 5, 64};
        OwnedTensor x = random_tensor(DType::kF32, {m, k}, rng);
        std::vector<OwnedTensor> w, b, got, want;
        std::vector<LinearPart> parts;
        for (int64_t n : ns) {
          w.push_back(random_tensor(wt, {n, k}, rng));
          b.push_back(random_tensor(DType::kBF16, {n}, rng));
          got.push_back(OwnedTensor::make(DType::kF32, {m, n}));
          want.push_back(OwnedTensor::make(DType::kF32, {m, n}));
          linear(ctx, want.back().tensor, x.tensor, w.back().tensor, bias ? b.back().tensor : Tensor{});
        }
        for (size_t p = 0; p < 3; ++p) parts.push_back({got[p].tensor, w[p].tensor, bias ? b[p].tensor : Tensor{}});
        linear_multi(ctx, x.tensor, parts);
        for (size_t p = 0; p < 3; ++p)
          EXPECT_TRUE(same_bits(got[p].tensor, want[p].tensor))
              << "part " << p << " w " << dtype_name(wt) << " m " << m << " bias " << bias;
      }
}

TEST(FusedCpu, LinearSwigluEqualsLinearLinearSiluMul) {
  Context ctx;
  std::mt19937 rng(502);
  for (DType wt : kWeightDtypes)
    for (int64_t m : {1, 3, 8, 9})
      for (bool bias : {false, true}) {
        const int64_t k = 45, f = 31;
        OwnedTensor x = random_tensor(DType::kF32, {m, k + 3}, rng);  // a column slice: strided rows
        const Tensor xs = x.tensor.slice(1, 1, 1 + k);
        OwnedTensor wg = random_tensor(wt, {f, k}, rng), wu = random_tensor(wt, {f, k}, rng);
        OwnedTensor bg = random_tensor(DType::kF32, {f}, rng), bu = random_tensor(DType::kF32, {f}, rng);
        OwnedTensor g = OwnedTensor::make(DType::kF32, {m, f}), u = OwnedTensor::make(DType::kF32, {m, f});
        OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f}), got = OwnedTensor::make(DType::kF32, {m, f});
        linear(ctx, g.tensor, xs, wg.tensor, bias ? bg.tensor : Tensor{});
        linear(ctx, u.tensor, xs, wu.tensor, bias ? bu.tensor : Tensor{});
        silu_mul(ctx, want.tensor, g.tensor, u.tensor);
        linear_swiglu(ctx, got.tensor, xs, wg.tensor, wu.tensor, bias ? bg.tensor : Tensor{},
                      bias ? bu.tensor : Tensor{});
        EXPECT_TRUE(same_bits(got.tensor, want.tensor)) << dtype_name(wt) << " m " << m << " bias " << bias;
        // And it is what the formula says, to rounding.
        const float g0 = g.tensor.ptr<float>()[0], u0 = u.tensor.ptr<float>()[0];
        EXPECT_NEAR(got.tensor.ptr<float>()[0], g0 / (1.0f + std::exp(-g0)) * u0, 1e-5f);
      }
}

TEST(FusedCpu, RopeKvWriteEqualsRopeRopeKvWrite) {
  Context ctx;
  std::mt19937 rng(503);
  for (DType cache_dt : {DType::kF32, DType::kBF16})
    for (auto [hd, rotary] : {std::pair<int64_t, int>{16, 16}, {20, 12}, {9, 0}}) {
      const int64_t n = 4, nh = 6, kvh = 2, n_blocks = 3, block = 2;
      std::vector<float> inv_freq(static_cast<size_t>(rotary / 2 + 1));
      for (int i = 0; i < rotary / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary);
      const RopeParams p{inv_freq.data(), rotary, 0.9f};
      OwnedTensor q = random_tensor(DType::kF32, {n, nh, hd}, rng), k = random_tensor(DType::kF32, {n, kvh, hd}, rng);
      OwnedTensor v = random_tensor(DType::kF32, {n, kvh, hd}, rng);
      OwnedTensor kc = random_tensor(cache_dt, {n_blocks, block, kvh, hd}, rng);
      OwnedTensor vc = random_tensor(cache_dt, {n_blocks, block, kvh, hd}, rng);
      OwnedTensor pos = OwnedTensor::make(DType::kI32, {n}), slots = OwnedTensor::make(DType::kI64, {n});
      const int32_t pv[4] = {0, 3, 70, 9999};
      const int64_t sv[4] = {5, -1, 0, 2};
      std::memcpy(pos.tensor.data, pv, sizeof(pv));
      std::memcpy(slots.tensor.data, sv, sizeof(sv));
      OwnedTensor q0 = clone(q.tensor), q2 = clone(q.tensor), k2 = clone(k.tensor), kc2 = clone(kc.tensor), vc2 = clone(vc.tensor);
      if (rotary > 0) {
        rope(ctx, q2.tensor, pos.tensor, p);
        rope(ctx, k2.tensor, pos.tensor, p);
      }
      kv_write(ctx, {kc2.tensor, vc2.tensor}, k2.tensor, v.tensor, slots.tensor);
      rope_kv_write(ctx, q.tensor, k.tensor, v.tensor, {kc.tensor, vc.tensor}, pos.tensor, slots.tensor, p);
      const std::string what = strfmt("cache %s hd %lld rotary %d", dtype_name(cache_dt), (long long)hd, rotary);
      EXPECT_TRUE(same_bits(q.tensor, q2.tensor)) << what;
      EXPECT_TRUE(same_bits(k.tensor, k2.tensor)) << what;
      EXPECT_TRUE(same_bits(kc.tensor, kc2.tensor)) << what;
      EXPECT_TRUE(same_bits(vc.tensor, vc2.tensor)) << what;
      EXPECT_EQ(same_bits(q.tensor, q0.tensor), rotary == 0) << what << ": q rotated only when rotary_dim > 0";
    }
}

// add_rms_norm from a separate x_in (the residual's second buffer) equals the in-place op on a copy of x_in
// and leaves x_in as it was; linear_swiglu and linear_multi with a pre (AddRmsNorm) are add_rms_norm then
// the op.
TEST(FusedCpu, AddRmsNormFromXInAndSwigluPreEqualTheInPlaceOps) {
  Context ctx;
  std::mt19937 rng(505);
  for (int64_t m : {1, 2, 5}) {
    const int64_t d = 40, f = 19;
    OwnedTensor x_in = random_tensor(DType::kF32, {m, d}, rng), y = random_tensor(DType::kF32, {m, d}, rng);
    OwnedTensor w = random_tensor(DType::kBF16, {d}, rng), keep = clone(x_in.tensor);
    OwnedTensor x_want = clone(x_in.tensor), x_got = random_tensor(DType::kF32, {m, d}, rng);
    OwnedTensor h_want = OwnedTensor::make(DType::kF32, {m, d}),
                h_got = OwnedTensor::make(DType::kF32, {m, d});
    add_rms_norm(ctx, h_want.tensor, x_want.tensor, y.tensor, w.tensor, 1e-5f, 0.5f, 1.0f);
    add_rms_norm(ctx, h_got.tensor, x_got.tensor, y.tensor, w.tensor, 1e-5f, 0.5f, 1.0f, x_in.tensor);
    EXPECT_TRUE(same_bits(x_got.tensor, x_want.tensor)) << "x, m " << m;
    EXPECT_TRUE(same_bits(h_got.tensor, h_want.tensor)) << "out, m " << m;
    EXPECT_TRUE(same_bits(x_in.tensor, keep.tensor)) << "x_in changed, m " << m;

    OwnedTensor wg = random_tensor(DType::kBF16, {f, d}, rng), wu = random_tensor(DType::kBF16, {f, d}, rng);
    OwnedTensor a_want = OwnedTensor::make(DType::kF32, {m, f}),
                a_got = OwnedTensor::make(DType::kF32, {m, f});
    OwnedTensor x2 = random_tensor(DType::kF32, {m, d}, rng), h2 = OwnedTensor::make(DType::kF32, {m, d});
    linear_swiglu(ctx, a_want.tensor, h_want.tensor, wg.tensor, wu.tensor);
    const AddRmsNorm pre{x_in.tensor, y.tensor, x2.tensor, w.tensor, 1e-5f, 0.5f, 1.0f};
    linear_swiglu(ctx, a_got.tensor, h2.tensor, wg.tensor, wu.tensor, {}, {}, GluAct::kSilu, &pre);
    EXPECT_TRUE(same_bits(a_got.tensor, a_want.tensor)) << "swiglu with pre, m " << m;
    EXPECT_TRUE(same_bits(x2.tensor, x_want.tensor)) << "pre.x_out, m " << m;

    // linear_multi with a pre: add_rms_norm, then every part.
    OwnedTensor w1 = random_tensor(DType::kBF16, {f, d}, rng), w2 = random_tensor(DType::kF32, {7, d}, rng);
    OwnedTensor b2 = random_tensor(DType::kF32, {7}, rng);
    OwnedTensor o1_want = OwnedTensor::make(DType::kF32, {m, f}),
                o1_got = OwnedTensor::make(DType::kF32, {m, f});
    OwnedTensor o2_want = OwnedTensor::make(DType::kF32, {m, 7}),
                o2_got = OwnedTensor::make(DType::kF32, {m, 7});
    OwnedTensor x3 = random_tensor(DType::kF32, {m, d}, rng), h3 = OwnedTensor::make(DType::kF32, {m, d});
    const LinearPart want[2] = {{o1_want.tensor, w1.tensor, {}}, {o2_want.tensor, w2.tensor, b2.tensor}};
    const LinearPart got[2] = {{o1_got.tensor, w1.tensor, {}}, {o2_got.tensor, w2.tensor, b2.tensor}};
    linear_multi(ctx, h_want.tensor, want);
    const AddRmsNorm pre3{x_in.tensor, y.tensor, x3.tensor, w.tensor, 1e-5f, 0.5f, 1.0f};
    linear_multi(ctx, h3.tensor, got, &pre3);
    EXPECT_TRUE(same_bits(o1_got.tensor, o1_want.tensor)) << "linear_multi with pre, part 0, m " << m;
    EXPECT_TRUE(same_bits(o2_got.tensor, o2_want.tensor)) << "linear_multi with pre, part 1, m " << m;
    EXPECT_TRUE(same_bits(x3.tensor, x_want.tensor)) << "linear_multi pre.x_out, m " << m;
  }
  OwnedTensor a = random_tensor(DType::kF32, {2, 8}, rng), b = random_tensor(DType::kF32, {2, 8}, rng);
  OwnedTensor w = random_tensor(DType::kF32, {8}, rng), o = OwnedTensor::make(DType::kF32, {2, 8});
  OwnedTensor wide = random_tensor(DType::kF32, {2, 12}, rng);
  expect_kernel_error(
      [&] {
        add_rms_norm(ctx, o.tensor, a.tensor, b.tensor, w.tensor, 1e-5f, 1.0f, 0.0f, a.tensor.slice(0, 0, 1));
      },
      {"add_rms_norm", "x_in"});
  expect_kernel_error(
      [&] {
        add_rms_norm(ctx, o.tensor, wide.tensor.slice(1, 0, 8), b.tensor, w.tensor, 1e-5f, 1.0f, 0.0f,
                     wide.tensor.slice(1, 4, 12));
      },
      {"add_rms_norm", "overlaps"});
}

// The post-norm form of a pre (AddRmsNorm::y_w, Gemma's sandwich norms): add_rms_norm(pre) equals
// post_norm_residual in place on a copy of x_in (x_in untouched), and linear_swiglu / linear_multi with it
// are that, then the op; its argument errors.
TEST(FusedCpu, PostNormPreEqualsPostNormResidualOnACopy) {
  Context ctx;
  std::mt19937 rng(506);
  for (int64_t m : {1, 2, 5}) {
    const int64_t d = 40, f = 19;
    OwnedTensor x_in = random_tensor(DType::kF32, {m, d}, rng), y = random_tensor(DType::kF32, {m, d}, rng);
    OwnedTensor w = random_tensor(DType::kBF16, {d}, rng), y_w = random_tensor(DType::kBF16, {d}, rng);
    OwnedTensor keep = clone(x_in.tensor), x_want = clone(x_in.tensor), y_want = clone(y.tensor);
    OwnedTensor h_want = OwnedTensor::make(DType::kF32, {m, d});
    post_norm_residual(ctx,
                       {.x = x_want.tensor,
                        .y = y_want.tensor,
                        .w_post = y_w.tensor,
                        .out = h_want.tensor,
                        .w_next = w.tensor,
                        .x_scale = 0.75f,
                        .w_offset = 1.0f},
                       1e-5f);
    auto pre_into = [&](const OwnedTensor& x_out, const OwnedTensor& y_scratch) {
      return AddRmsNorm{x_in.tensor, y_scratch.tensor, x_out.tensor, w.tensor, 1e-5f, 1.0f,
                        1.0f,        y_w.tensor,       0.75f};
    };
    {
      OwnedTensor x_got = random_tensor(DType::kF32, {m, d}, rng), y_got = clone(y.tensor);
      OwnedTensor h_got = OwnedTensor::make(DType::kF32, {m, d});
      add_rms_norm(ctx, h_got.tensor, pre_into(x_got, y_got));
      EXPECT_TRUE(same_bits(x_got.tensor, x_want.tensor)) << "x_out, m " << m;
      EXPECT_TRUE(same_bits(h_got.tensor, h_want.tensor)) << "out, m " << m;
      EXPECT_TRUE(same_bits(x_in.tensor, keep.tensor)) << "x_in changed, m " << m;
    }
    OwnedTensor wg = random_tensor(DType::kBF16, {f, d}, rng), wu = random_tensor(DType::kBF16, {f, d}, rng);
    OwnedTensor a_want = OwnedTensor::make(DType::kF32, {m, f}),
                a_got = OwnedTensor::make(DType::kF32, {m, f});
    linear_swiglu(ctx, a_want.tensor, h_want.tensor, wg.tensor, wu.tensor, {}, {}, GluAct::kGeluTanh);
    OwnedTensor x2 = random_tensor(DType::kF32, {m, d}, rng), y2 = clone(y.tensor);
    OwnedTensor h2 = OwnedTensor::make(DType::kF32, {m, d});
    const AddRmsNorm pre2 = pre_into(x2, y2);
    linear_swiglu(ctx, a_got.tensor, h2.tensor, wg.tensor, wu.tensor, {}, {}, GluAct::kGeluTanh, &pre2);
    EXPECT_TRUE(same_bits(a_got.tensor, a_want.tensor)) << "geglu with a post-norm pre, m " << m;
    EXPECT_TRUE(same_bits(x2.tensor, x_want.tensor)) << "geglu pre.x_out, m " << m;
    OwnedTensor o_want = OwnedTensor::make(DType::kF32, {m, f}),
                o_got = OwnedTensor::make(DType::kF32, {m, f});
    const LinearPart want[1] = {{o_want.tensor, wg.tensor, {}}}, got[1] = {{o_got.tensor, wg.tensor, {}}};
    linear_multi(ctx, h_want.tensor, want);
    OwnedTensor x3 = random_tensor(DType::kF32, {m, d}, rng), y3 = clone(y.tensor);
    OwnedTensor h3 = OwnedTensor::make(DType::kF32, {m, d});
    const AddRmsNorm pre3 = pre_into(x3, y3);
    linear_multi(ctx, h3.tensor, got, &pre3);
    EXPECT_TRUE(same_bits(o_got.tensor, o_want.tensor)) << "linear_multi with a post-norm pre, m " << m;
    EXPECT_TRUE(same_bits(x3.tensor, x_want.tensor)) << "linear_multi pre.x_out, m " << m;
  }
  OwnedTensor a = random_tensor(DType::kF32, {2, 8}, rng), b = random_tensor(DType::kF32, {2, 8}, rng);
  OwnedTensor c = random_tensor(DType::kF32, {2, 8}, rng), o = OwnedTensor::make(DType::kF32, {2, 8});
  OwnedTensor w = random_tensor(DType::kF32, {8}, rng), w7 = random_tensor(DType::kF32, {7}, rng);
  expect_kernel_error(
      [&] {
        add_rms_norm(ctx, o.tensor,
                     AddRmsNorm{a.tensor, b.tensor, c.tensor, w.tensor, 1e-5f, 0.5f, 0.0f, w.tensor});
      },
      {"add_rms_norm", "y_scale"});
  expect_kernel_error(
      [&] {
        add_rms_norm(ctx, o.tensor,
                     AddRmsNorm{a.tensor, b.tensor, c.tensor, w.tensor, 1e-5f, 1.0f, 0.0f, w7.tensor});
      },
      {"post_norm_residual", "w_post"});
  expect_kernel_error(
      [&] {
        add_rms_norm(ctx, o.tensor,
                     AddRmsNorm{a.tensor, b.tensor, a.tensor, w.tensor, 1e-5f, 1.0f, 0.0f, w.tensor});
      },
      {"add_rms_norm", "x_in"});
}

TEST(FusedCpu, ArgumentErrorsNameTheOp) {
  Context ctx;
  std::mt19937 rng(504);
  OwnedTensor x = random_tensor(DType::kF32, {2, 8}, rng), w = random_tensor(DType::kF32, {4, 8}, rng);
  OwnedTensor w_bad = random_tensor(DType::kF32, {4, 7}, rng), out = OwnedTensor::make(DType::kF32, {2, 4});
  expect_kernel_error([&] { linear_multi(ctx, x.tensor, std::span<const LinearPart>{}); }, {"linear_multi", "0 parts"});
  const LinearPart five[] = {{out.tensor, w.tensor, {}}, {out.tensor, w.tensor, {}}, {out.tensor, w.tensor, {}},
                             {out.tensor, w.tensor, {}}, {out.tensor, w.tensor, {}}};
  expect_kernel_error([&] { linear_multi(ctx, x.tensor, five); }, {"linear_multi", "5 parts"});
  const LinearPart bad[] = {{out.tensor, w_bad.tensor, {}}};
  expect_kernel_error([&] { linear_multi(ctx, x.tensor, bad); }, {"linear", "disagree on k"});
  expect_kernel_error([&] { linear_swiglu(ctx, out.tensor, x.tensor, w.tensor, w_bad.tensor); },
                      {"linear", "disagree on k"});
}

}  // namespace
}  // namespace bunsen::kernels::test
