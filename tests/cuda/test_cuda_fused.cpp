// The fused decode ops on CUDA (linear_multi, linear_swiglu, rope_kv_write) against the unfused reference
// sequence (ref::linear / silu_mul / rope / kv_write), at m = 1..9 (9: two GEMV launches), odd n, k that
// is not a multiple of 256, unaligned views that take the generic GEMV kernel, every weight dtype and
// bf16/f32 activations and caches; the GEMV's batch invariance (a row's bits do not depend on m); and the
// vectorised rms_norm / add_rms_norm widths (d % 8 == 0, up to the 8192 limit, and just past it). The GEMV
// cases run on both GEMV kernel paths (default and small-launch, BUNSEN_GEMV_SMALL).
#include <cstring>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

// GEMV results in f32 from exact inputs: only the summation order differs from the reference. m > 8
// takes cuBLASLt, which rounds x to w's dtype first.
float gemv_tol(DType out) { return out == DType::kBF16 ? 1e-2f : 1e-4f; }
float linear_tol(int64_t m, DType w, DType x, DType out) {
  if (m > cuda::kGemvMaxM && x != w) return gemv_tol(out) + (w == DType::kBF16 ? 1e-2f : w == DType::kF16 ? 2e-3f : 0.0f);
  return gemv_tol(out);
}

// x [m, k] (a column slice at offset `pad` of a wider tensor when pad > 0: rows unaligned for the GEMV).
struct Input {
  HostPair full;
  Tensor host_f32() const { return full.f32.tensor.slice(1, pad, pad + k); }
  int64_t pad = 0, k = 0;
};

Input make_input(DType dt, int64_t m, int64_t k, int64_t pad, std::mt19937& rng) {
  Input in;
  in.full = random_pair(dt, {m, k + pad}, rng);
  in.pad = pad;
  in.k = k;
  return in;
}

TEST_F(CudaTest, LinearMultiMatchesReferencePerPart) {
  std::mt19937 rng(401);
  struct Case {
    int64_t m, k, pad;
  };
  const Case cases[] = {{1, 136, 0}, {2, 200, 0}, {3, 4104, 0}, {5, 72, 0},  {8, 392, 0},
                        {9, 136, 0}, {1, 135, 0}, {4, 64, 1},   {7, 33, 0}, {1, 2048, 0}};
  const int64_t ns[3] = {37, 5, 129};  // q, k, v-like parts of odd sizes
  for_each_gemv_path([&] {
    int variant = 0;
    for (const Case& c : cases)
      for (DType wt : kWeightDtypes)
        for (DType xt : kActDtypes) {
          const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
          const bool bias = variant % 3 != 0;
          Input x = make_input(xt, c.m, c.k, c.pad, rng);
          DeviceTensor xd = DeviceTensor::upload(x.full.data.tensor);
          std::vector<OwnedTensor> w, b, want;
          std::vector<DeviceTensor> wd, bd, od;
          std::vector<LinearPart> parts;
          for (int64_t n : ns) {
            w.push_back(random_tensor(wt, {n, c.k}, rng));
            b.push_back(random_tensor(DType::kBF16, {n}, rng));
            want.push_back(OwnedTensor::make(DType::kF32, {c.m, n}));
            ref::linear(want.back().tensor, x.host_f32(), w.back().tensor, bias ? b.back().tensor : Tensor{});
            wd.push_back(DeviceTensor::upload(w.back().tensor));
            bd.push_back(DeviceTensor::upload(b.back().tensor));
            od.push_back(DeviceTensor::upload(random_tensor(ot, {c.m, n}, rng).tensor));
          }
          for (size_t p = 0; p < 3; ++p) parts.push_back({od[p].tensor, wd[p].tensor, bias ? bd[p].tensor : Tensor{}});
          linear_multi(ctx_, xd.tensor.slice(1, c.pad, c.pad + c.k), parts);
          for (size_t p = 0; p < 3; ++p)
            expect_close(od[p].download().tensor, want[p].tensor, linear_tol(c.m, wt, xt, ot),
                         strfmt("linear_multi part %zu m %lld k %lld pad %lld w %s x %s out %s bias %d", p,
                                (long long)c.m, (long long)c.k, (long long)c.pad, dtype_name(wt), dtype_name(xt),
                                dtype_name(ot), bias));
        }
  });
}

// Parts of different weight dtypes cannot share a launch: one linear per part, same results.
TEST_F(CudaTest, LinearMultiWithMixedDtypesFallsBackPerPart) {
  std::mt19937 rng(402);
  HostPair x = random_pair(DType::kBF16, {2, 96}, rng);
  OwnedTensor w0 = random_tensor(DType::kBF16, {11, 96}, rng), w1 = random_tensor(DType::kF32, {7, 96}, rng);
  OwnedTensor want0 = OwnedTensor::make(DType::kF32, {2, 11}), want1 = OwnedTensor::make(DType::kF32, {2, 7});
  ref::linear(want0.tensor, x.f32.tensor, w0.tensor, Tensor{});
  ref::linear(want1.tensor, x.f32.tensor, w1.tensor, Tensor{});
  DeviceTensor xd = DeviceTensor::upload(x.data.tensor), w0d = DeviceTensor::upload(w0.tensor),
               w1d = DeviceTensor::upload(w1.tensor);
  DeviceTensor o0 = DeviceTensor::upload(random_tensor(DType::kF32, {2, 11}, rng).tensor);
  DeviceTensor o1 = DeviceTensor::upload(random_tensor(DType::kF32, {2, 7}, rng).tensor);
  const LinearPart parts[] = {{o0.tensor, w0d.tensor, {}}, {o1.tensor, w1d.tensor, {}}};
  linear_multi(ctx_, xd.tensor, parts);
  expect_close(o0.download().tensor, want0.tensor, 1e-4f, "part 0");
  expect_close(o1.download().tensor, want1.tensor, 1e-4f, "part 1");
}

TEST_F(CudaTest, LinearSwigluMatchesLinearLinearSiluMul) {
  std::mt19937 rng(403);
  struct Case {
    int64_t m, f, k, pad;
  };
  const Case cases[] = {{1, 37, 136, 0}, {2, 129, 4104, 0}, {3, 1, 64, 0},  {4, 64, 200, 0}, {8, 33, 72, 0},
                        {9, 40, 136, 0}, {1, 31, 135, 0},   {5, 17, 64, 3}, {6, 300, 2048, 0}};
  for_each_gemv_path([&] {
    int variant = 0;
    for (const Case& c : cases)
      for (DType wt : kWeightDtypes)
        for (DType xt : kActDtypes) {
          const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
          const bool bias = variant % 3 == 1;
          Input x = make_input(xt, c.m, c.k, c.pad, rng);
          OwnedTensor wg = random_tensor(wt, {c.f, c.k}, rng), wu = random_tensor(wt, {c.f, c.k}, rng);
          OwnedTensor bg = random_tensor(DType::kF32, {c.f}, rng), bu = random_tensor(DType::kF32, {c.f}, rng);
          OwnedTensor g = OwnedTensor::make(DType::kF32, {c.m, c.f}), u = OwnedTensor::make(DType::kF32, {c.m, c.f});
          OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.f});
          ref::linear(g.tensor, x.host_f32(), wg.tensor, bias ? bg.tensor : Tensor{});
          ref::linear(u.tensor, x.host_f32(), wu.tensor, bias ? bu.tensor : Tensor{});
          ref::silu_mul(want.tensor, g.tensor, u.tensor);
          DeviceTensor xd = DeviceTensor::upload(x.full.data.tensor);
          DeviceTensor wgd = DeviceTensor::upload(wg.tensor), wud = DeviceTensor::upload(wu.tensor);
          DeviceTensor bgd = DeviceTensor::upload(bg.tensor), bud = DeviceTensor::upload(bu.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {c.m, c.f + 2}, rng).tensor);
          OwnedTensor before = od.download();
          linear_swiglu(ctx_, od.tensor.slice(1, 1, 1 + c.f), xd.tensor.slice(1, c.pad, c.pad + c.k), wgd.tensor,
                        wud.tensor, bias ? bgd.tensor : Tensor{}, bias ? bud.tensor : Tensor{});
          OwnedTensor got = od.download();
          const std::string what = strfmt("linear_swiglu m %lld f %lld k %lld pad %lld w %s x %s out %s bias %d",
                                          (long long)c.m, (long long)c.f, (long long)c.k, (long long)c.pad,
                                          dtype_name(wt), dtype_name(xt), dtype_name(ot), bias);
          expect_close(got.tensor.slice(1, 1, 1 + c.f), want.tensor, gemv_tol(ot), what);
          for (int64_t i = 0; i < c.m; ++i)  // the columns beside the out slice are untouched
            for (int64_t j : {int64_t{0}, c.f + 1})
              ASSERT_EQ(load_f(got.tensor.row_ptr(i), ot, j), load_f(before.tensor.row_ptr(i), ot, j)) << what;
        }
  });
}

// A row's result has the same bits whatever m (<= 8) it is computed in: the GEMV's reduction order is
// chosen from (n, k) only, on each path (0: default kernel, 1: small-launch kernel where the shape rule
// takes it, 2: small-launch kernel forced), including the Llama-3.2-1B q/k/v (3072 x 2048) shape.
TEST_F(CudaTest, GemvRowResultsDoNotDependOnM) {
  std::mt19937 rng(404);
  struct Restore {
    ~Restore() { cuda::set_gemv_small_for_testing(-1); }  // also after a failed ASSERT
  } restore;
  for (int mode : {0, 1, 2}) {
    cuda::set_gemv_small_for_testing(mode);
    for (DType xt : kActDtypes)
      for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 4096}, {1024, 1024}, {37, 136}, {5, 8200}, {3072, 2048}}) {
        HostPair x = random_pair(xt, {8, k}, rng);
        OwnedTensor w = random_tensor(DType::kBF16, {n, k}, rng);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor), wd = DeviceTensor::upload(w.tensor);
        DeviceTensor all = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {8, n}).tensor);
        linear(ctx_, all.tensor, xd.tensor, wd.tensor);
        const OwnedTensor got8 = all.download();
        for (int64_t m = 1; m < 8; ++m) {
          DeviceTensor part = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {m, n}).tensor);
          linear(ctx_, part.tensor, xd.tensor.slice(0, 8 - m, 8), wd.tensor);
          const OwnedTensor got = part.download();
          ASSERT_EQ(std::memcmp(got.tensor.data, got8.tensor.row_ptr(8 - m), static_cast<size_t>(m * n) * 4), 0)
              << "n " << n << " k " << k << " m " << m << " x " << dtype_name(xt) << " small mode " << mode;
        }
      }
  }
}

// q [n_tokens, n_heads, hd] and k, v [n_tokens, kvh, hd] as column slices of one fused qkv row (as the
// model lays them out when its projection is fused).
Tensor heads_view(const Tensor& fused, int64_t head0, int64_t heads, int64_t hd) {
  Tensor t = fused.slice(1, head0 * hd, (head0 + heads) * hd);
  t.ndim = 3;
  t.shape[1] = heads;
  t.shape[2] = hd;
  t.strides[0] = fused.strides[0];
  t.strides[1] = hd;
  t.strides[2] = 1;
  return t;
}

void check_rope_kv(Context& ctx, DType act, DType cache_dt, int64_t hd, int rotary_dim, std::mt19937& rng) {
  const int64_t n_tokens = 5, nh = 4, kvh = 2, total = nh + 2 * kvh, n_blocks = 4, block = 3;
  const std::string what =
      strfmt("act %s cache %s hd %lld rotary %d", dtype_name(act), dtype_name(cache_dt), (long long)hd, rotary_dim);
  std::vector<float> inv_freq(static_cast<size_t>(rotary_dim / 2 + 1));
  for (int i = 0; i < rotary_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary_dim);
  const RopeParams p{inv_freq.data(), rotary_dim, 1.1f};
  HostPair qkv = random_pair(act, {n_tokens, total * hd}, rng);
  OwnedTensor kc = random_tensor(cache_dt, {n_blocks, block, kvh, hd}, rng);
  OwnedTensor vc = random_tensor(cache_dt, {n_blocks, block, kvh, hd}, rng);
  OwnedTensor pos = OwnedTensor::make(DType::kI32, {n_tokens}), slots = OwnedTensor::make(DType::kI64, {n_tokens});
  const int32_t pv[n_tokens] = {0, 7, 8, 4095, 100000};
  const int64_t sv[n_tokens] = {11, -1, 0, 5, 12};  // 12 is past the 12-slot cache: skipped
  std::memcpy(pos.tensor.data, pv, sizeof(pv));
  std::memcpy(slots.tensor.data, sv, sizeof(sv));
  // The reference: rope, rope, kv_write on f32 copies (slot 12 left out: ref would reject it).
  OwnedTensor want = clone(qkv.f32.tensor), kc_want = clone(kc.tensor), vc_want = clone(vc.tensor);
  OwnedTensor ref_slots = clone(slots.tensor);
  ref_slots.tensor.ptr<int64_t>()[4] = -1;
  if (rotary_dim > 0) {
    ref::rope(heads_view(want.tensor, 0, nh, hd), pos.tensor, p);
    ref::rope(heads_view(want.tensor, nh, kvh, hd), pos.tensor, p);
  }
  ref::kv_write({kc_want.tensor, vc_want.tensor}, heads_view(want.tensor, nh, kvh, hd),
                heads_view(want.tensor, nh + kvh, kvh, hd), ref_slots.tensor);
  DeviceTensor qd = DeviceTensor::upload(qkv.data.tensor), pd = DeviceTensor::upload(pos.tensor);
  DeviceTensor sd = DeviceTensor::upload(slots.tensor);
  DeviceTensor kd = DeviceTensor::upload(kc.tensor), vd = DeviceTensor::upload(vc.tensor);
  rope_kv_write(ctx, heads_view(qd.tensor, 0, nh, hd), heads_view(qd.tensor, nh, kvh, hd),
                heads_view(qd.tensor, nh + kvh, kvh, hd), {kd.tensor, vd.tensor}, pd.tensor, sd.tensor, p);
  const OwnedTensor got = qd.download(), kg = kd.download(), vg = vd.download();
  expect_close(got.tensor, want.tensor, tolerance(act, 1e-5f), what + " q|k|v");
  expect_close(kg.tensor, kc_want.tensor, tolerance(cache_dt == DType::kBF16 ? cache_dt : act, 1e-5f),
               what + " k cache");
  expect_close(vg.tensor, vc_want.tensor, 0.0f, what + " v cache (a plain copy)");
  // The cache holds exactly the rotated k as stored (converted to the cache dtype), and slots nobody
  // wrote keep their old bits.
  std::vector<bool> written(static_cast<size_t>(n_blocks * block), false);
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (sv[t] < 0 || sv[t] >= n_blocks * block) continue;
    written[static_cast<size_t>(sv[t])] = true;
    for (int64_t j = 0; j < kvh * hd; ++j) {
      const float k = load_f(got.tensor.row_ptr(t), act, nh * hd + j);  // k as stored after the rotation
      const float want_bits = cache_dt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(k)) : k;
      ASSERT_EQ(load_f(kg.tensor.data, cache_dt, sv[t] * kvh * hd + j), want_bits) << what << " t " << t;
    }
  }
  const size_t row_bytes = static_cast<size_t>(kvh * hd) * dtype_size(cache_dt);
  for (int64_t s = 0; s < n_blocks * block; ++s) {
    if (written[static_cast<size_t>(s)]) continue;
    ASSERT_EQ(std::memcmp(static_cast<char*>(kg.tensor.data) + s * row_bytes,
                          static_cast<char*>(kc.tensor.data) + s * row_bytes, row_bytes),
              0)
        << what << " slot " << s;
  }
}

TEST_F(CudaTest, RopeKvWriteMatchesRopeRopeKvWrite) {
  std::mt19937 rng(405);
  for (DType act : kActDtypes)
    for (DType cache_dt : kActDtypes)
      for (auto [hd, rotary] : {std::pair<int64_t, int>{128, 128}, {64, 64}, {20, 12}, {33, 0}, {8, 2}})
        check_rope_kv(ctx_, act, cache_dt, hd, rotary, rng);
}

// The vectorised norms: widths that are multiples of 8 (incl. the 8192 limit), one just past it (scalar
// path), x rows that are column slices (aligned and unaligned), in place and the fused add.
TEST_F(CudaTest, VectorisedNormsMatchReference) {
  std::mt19937 rng(406);
  for (DType w_dt : kWeightDtypes)
    for (DType x_dt : kActDtypes)
      for (int64_t d : {int64_t{8}, int64_t{24}, int64_t{2048}, int64_t{4096}, int64_t{8192}, int64_t{8200}})
        for (int64_t pad : {int64_t{0}, int64_t{8}, int64_t{1}}) {
          const int64_t n = d > 4096 ? 2 : 5;
          const float offset = w_dt == DType::kF16 ? 1.0f : 0.0f;
          const std::string what = strfmt("w %s x %s d %lld pad %lld", dtype_name(w_dt), dtype_name(x_dt),
                                          (long long)d, (long long)pad);
          HostPair x = random_pair(x_dt, {n, d + pad}, rng, -3.0f, 3.0f);
          HostPair y = random_pair(x_dt, {n, d}, rng);
          OwnedTensor w = random_tensor(w_dt, {d}, rng);
          OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
          ref::rms_norm(want.tensor, x.f32.tensor.slice(1, pad, pad + d), w.tensor, 1e-5f, offset);
          DeviceTensor xd = DeviceTensor::upload(x.data.tensor), wd = DeviceTensor::upload(w.tensor);
          DeviceTensor yd = DeviceTensor::upload(y.data.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(x_dt, {n, d}, rng).tensor);
          const Tensor xs = xd.tensor.slice(1, pad, pad + d);
          rms_norm(ctx_, od.tensor, xs, wd.tensor, 1e-5f, offset);
          expect_close(od.download().tensor, want.tensor, tolerance(x_dt), "rms_norm " + what);
          if (d > 8192) continue;  // add_rms_norm stops at 8192 (its scalar kernel keeps the row in registers)
          // add_rms_norm: x += y * 0.5, then the norm of the stored x.
          OwnedTensor want_x = clone(x.f32.tensor.slice(1, pad, pad + d));
          ref::add_scaled(want_x.tensor, y.f32.tensor, 0.5f);
          add_rms_norm(ctx_, od.tensor, xs, yd.tensor, wd.tensor, 1e-5f, 0.5f, offset);
          const OwnedTensor got_x = xd.download();
          expect_close(got_x.tensor.slice(1, pad, pad + d), want_x.tensor, tolerance(x_dt), "add x " + what);
          OwnedTensor want_out = OwnedTensor::make(DType::kF32, {n, d});
          ref::rms_norm(want_out.tensor, to_f32(got_x.tensor.slice(1, pad, pad + d)).tensor, w.tensor, 1e-5f,
                        offset);
          expect_close(od.download().tensor, want_out.tensor, tolerance(x_dt), "add_rms_norm " + what);
          rms_norm(ctx_, xs, xs, wd.tensor, 1e-5f, offset);  // in place
          expect_close(xd.download().tensor.slice(1, pad, pad + d), want_out.tensor, tolerance(x_dt),
                       "in place " + what);
        }
}

TEST_F(CudaTest, FusedOpsRejectBadShapesBeforeLaunching) {
  std::mt19937 rng(407);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {2, 64}, rng).tensor);
  DeviceTensor w = DeviceTensor::upload(random_tensor(DType::kBF16, {16, 64}, rng).tensor);
  DeviceTensor w_bad = DeviceTensor::upload(random_tensor(DType::kBF16, {16, 63}, rng).tensor);
  DeviceTensor o = DeviceTensor::upload(random_tensor(DType::kF32, {2, 16}, rng).tensor);
  const LinearPart bad[] = {{o.tensor, w.tensor, {}}, {o.tensor, w_bad.tensor, {}}};
  expect_kernel_error([&] { linear_multi(ctx_, x.tensor, bad); }, {"linear_multi", "disagree on k"});
  expect_kernel_error([&] { linear_swiglu(ctx_, o.tensor, x.tensor, w.tensor, w_bad.tensor); },
                      {"linear_swiglu", "w [16, 63]"});
  OwnedTensor host_w = random_tensor(DType::kBF16, {16, 64}, rng);
  const LinearPart mixed[] = {{o.tensor, host_w.tensor, {}}};
  expect_kernel_error([&] { linear_multi(ctx_, x.tensor, mixed); }, {"linear_multi", "cpu"});
}

}  // namespace
}  // namespace bunsen::kernels::test
