// The launch plans of the tiled 4/8-bit tensor-core GEMV (qmma_plan.h, gemv_qmma.cu) on CUDA: the 8-bit
// ring and f16 plans match the CPU at every m, k split and scale dtype (the 4-bit ones:
// TiledQuantGemvMatchesTheCpu in test_cuda_quant_fused.cpp); every plan is batch invariant (a token's bits at
// m = 8 equal those at m = 1, plain, multi-part and gated launches, at k = 1,536 and 4,096 and k = 14,336
// where the ring plans' x budget splits m = 8 into several launches) and matches the CPU. BUNSEN_BENCH_GEMV=1
// adds QMmaPlanBench.Shapes: every Llama-3.1-8B and Llama-3.2-1B decode launch (4 and 8 bits, group 64, m =
// 1) under every plan and k split, in one run. F16QuantGemv8MatchesTheCpuFarOutsideF16Range: the f16 8-bit
// plans at every group size with x beyond f16's range; QMmaBatchedXStagingIsBitIdentical: the tile kernel's
// BUNSEN_QMMA_XBATCH=8 staging. Skips without a GPU. Invariant: the tests restore the plan / split / tiles /
// lean / x staging hooks whatever happens.
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "graph_bench_util.h"
#include "kernels/cuda/qmma_plan.h"
#include "kernels/cuda/quant_ops.h"
#include "quant_test_util.h"

namespace bunsen::kernels::test {
namespace {

struct RestoreQMma {
  ~RestoreQMma() {
    if (cuda::device_count() == 0) return;
    cuda::set_qmma_plan_for_testing(-1);
    cuda::set_qmma_plan8_for_testing(-1);
    cuda::set_linear_q_split_for_testing(0);
    cuda::set_linear_q_tiles_for_testing(-1);
    cuda::set_qmma_lean_for_testing(-1);
    cuda::set_qmma_xbatch_for_testing(-1);
  }
};

// linear_q (w), linear_q_multi (parts w, wg) and linear_q_swiglu (gate wg, up wu) of x's first m rows on
// `gpu`, each output first filled with random values (an element no lane writes shows): the plain output,
// multi-part part 0 and part 1, and the gated output.
std::array<std::vector<float>, 4> run_launch_kinds(Context& gpu, const Tensor& x, int64_t m,
                                                   const RandomQuantWeight& w, const RandomQuantWeight& wg,
                                                   const RandomQuantWeight& wu, std::mt19937& rng) {
  const int64_t n = w.packed.tensor.shape[0], f = wg.packed.tensor.shape[0];
  const Tensor xm = x.slice(0, 0, m);
  DeviceTensor o = DeviceTensor::upload(random_tensor(DType::kF32, {m, n}, rng).tensor);
  linear_q(gpu, o.tensor, xm, w.dev);
  DeviceTensor p0 = DeviceTensor::upload(random_tensor(DType::kF32, {m, n}, rng).tensor);
  DeviceTensor p1 = DeviceTensor::upload(random_tensor(DType::kF32, {m, f}, rng).tensor);
  const QuantLinearPart parts[] = {{p0.tensor, w.dev, {}}, {p1.tensor, wg.dev, {}}};
  linear_q_multi(gpu, xm, parts);
  DeviceTensor gl = DeviceTensor::upload(random_tensor(DType::kF32, {m, f}, rng).tensor);
  linear_q_swiglu(gpu, gl.tensor, xm, wg.dev, wu.dev);
  return {values(o.download().tensor), values(p0.download().tensor), values(p1.download().tensor),
          values(gl.download().tensor)};
}

// Sets the plan of `bits` (the other width's hook back to its environment default).
void set_plan(int bits, int plan) {
  cuda::set_qmma_plan_for_testing(bits == 4 ? plan : -1);
  cuda::set_qmma_plan8_for_testing(bits == 8 ? plan : -1);
}
const char* plan_name(int bits, int plan) {
  return bits == 4 ? cuda::qmma_plan_name(plan) : cuda::qmma_plan8_name(plan);
}

// Every 8-bit plan (BUNSEN_QMMA_PLAN8: 0 the register kernel, 1..4 the ring, 5 and 6 the f16 kernels)
// against the CPU: every m 1..8, k of 1, 3 and 8 tiles of 512, odd and tile-sized n, bf16/f16 scales, every
// forced k split, bf16/f32 out.
TEST_F(CudaTest, EveryQuantGemv8PlanMatchesTheCpu) {
  RestoreQMma restore;
  std::mt19937 rng(852);
  expect_every_qmma_plan_matches_the_cpu(ctx_, 8, rng);
}

// Row 5 of an m = 8 launch equals the m = 1 launch of that row bit for bit, for every plan of both bit
// widths, and every plan's m = 8 output matches the CPU (linear_q, linear_q_multi, linear_q_swiglu).
TEST_F(CudaTest, QMmaPlansAreBatchInvariant) {
  RestoreQMma restore;
  cuda::set_linear_q_tiles_for_testing(1);
  std::mt19937 rng(851);
  Context cpu;
  for (int bits : {4, 8})
    for (int64_t k : {1536, 4096, 14336}) {
      const int64_t n = 300, f = 77;
      const DType sb = DType::kBF16;
      RandomQuantWeight w(n, k, bits, 64, sb, rng), wg(f, k, bits, 64, sb, rng), wu(f, k, bits, 64, sb, rng);
      HostPair x = random_pair(DType::kBF16, {8, k}, rng);
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      OwnedTensor want = OwnedTensor::make(DType::kF32, {8, n}),
                  want_glu = OwnedTensor::make(DType::kF32, {8, f});
      linear_q(cpu, want.tensor, x.f32.tensor, w.host);
      linear_q_swiglu(cpu, want_glu.tensor, x.f32.tensor, wg.host, wu.host);
      for (int plan = 0; plan < cuda::qmma_plan_count(bits); ++plan) {
        set_plan(bits, plan);
        const std::string what = strfmt("%d-bit plan %s k %lld", bits, plan_name(bits, plan), (long long)k);
        // plain
        DeviceTensor o8 = DeviceTensor::upload(random_tensor(DType::kF32, {8, n}, rng).tensor);
        DeviceTensor o1 = DeviceTensor::upload(random_tensor(DType::kF32, {1, n}, rng).tensor);
        linear_q(ctx_, o8.tensor, xd.tensor, w.dev);
        linear_q(ctx_, o1.tensor, xd.tensor.slice(0, 5, 6), w.dev);
        const std::vector<float> all = values(o8.download().tensor), one = values(o1.download().tensor);
        EXPECT_EQ(std::memcmp(all.data() + 5 * n, one.data(), static_cast<size_t>(n) * 4), 0)
            << "linear_q " << what;
        expect_close(o8.download().tensor, want.tensor, 1e-4f, "linear_q " + what);
        // two parts in one launch (its own split: the tiles of both parts), m = 8 against m = 1
        DeviceTensor p0 = DeviceTensor::upload(random_tensor(DType::kF32, {8, n}, rng).tensor);
        DeviceTensor p1 = DeviceTensor::upload(random_tensor(DType::kF32, {8, f}, rng).tensor);
        DeviceTensor q0 = DeviceTensor::upload(random_tensor(DType::kF32, {1, n}, rng).tensor);
        DeviceTensor q1 = DeviceTensor::upload(random_tensor(DType::kF32, {1, f}, rng).tensor);
        const QuantLinearPart parts8[] = {{p0.tensor, w.dev, {}}, {p1.tensor, wg.dev, {}}};
        const QuantLinearPart parts1[] = {{q0.tensor, w.dev, {}}, {q1.tensor, wg.dev, {}}};
        linear_q_multi(ctx_, xd.tensor, parts8);
        linear_q_multi(ctx_, xd.tensor.slice(0, 5, 6), parts1);
        const std::vector<float> m8 = values(p0.download().tensor), m1 = values(q0.download().tensor);
        EXPECT_EQ(std::memcmp(m8.data() + 5 * n, m1.data(), static_cast<size_t>(n) * 4), 0)
            << "multi " << what;
        expect_close(p0.download().tensor, want.tensor, 1e-4f, "linear_q_multi part 0 " + what);
        // gated
        DeviceTensor g8 = DeviceTensor::upload(random_tensor(DType::kF32, {8, f}, rng).tensor);
        DeviceTensor g1 = DeviceTensor::upload(random_tensor(DType::kF32, {1, f}, rng).tensor);
        linear_q_swiglu(ctx_, g8.tensor, xd.tensor, wg.dev, wu.dev);
        linear_q_swiglu(ctx_, g1.tensor, xd.tensor.slice(0, 5, 6), wg.dev, wu.dev);
        const std::vector<float> gall = values(g8.download().tensor), gone = values(g1.download().tensor);
        EXPECT_EQ(std::memcmp(gall.data() + 5 * f, gone.data(), static_cast<size_t>(f) * 4), 0)
            << "swiglu " << what;
        expect_close(g8.download().tensor, want_glu.tensor, 1e-4f, "linear_q_swiglu " + what);
      }
    }
}

// The lean stage math (compute_tile: vector scale/bias/sum loads per stage, no per-group guards, token 0's x
// in the MMA columns past m) gives the per-group path's bits: the 4-bit tile kernel (plan 0) and ring plan 4,
// every 8-bit ring plan, plain, multi-part and gated launches, m 1..8, k of 1, 3, 8 and 28 tiles, bf16/f16
// scales, every forced split.
TEST_F(CudaTest, QMmaLeanStageMathIsBitIdentical) {
  RestoreQMma restore;
  cuda::set_linear_q_tiles_for_testing(1);
  std::mt19937 rng(853);
  for (int bits : {4, 8})
    for (int64_t k : {512, 1536, 4096, 14336})
      for (DType sb : {DType::kBF16, DType::kF16}) {
        const int64_t n = 67, f = 40;
        RandomQuantWeight w(n, k, bits, 64, sb, rng), wg(f, k, bits, 64, sb, rng), wu(f, k, bits, 64, sb, rng);
        HostPair x = random_pair(DType::kBF16, {8, k}, rng);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
        const std::vector<int> plans = bits == 4 ? std::vector<int>{0, 4} : std::vector<int>{1, 2, 3, 4};
        for (int plan : plans)
          for (int split : {0, 1, 2, 8})
            for (int64_t m = 1; m <= 8; ++m) {
              set_plan(bits, plan);
              cuda::set_linear_q_split_for_testing(split);
              std::vector<float> got[2][3];
              for (int lean = 0; lean < 2; ++lean) {
                cuda::set_qmma_lean_for_testing(lean);
                const std::array<std::vector<float>, 4> r =
                    run_launch_kinds(ctx_, xd.tensor, m, w, wg, wu, rng);
                got[lean][0] = r[0];
                got[lean][1] = r[1];
                got[lean][1].insert(got[lean][1].end(), r[2].begin(), r[2].end());
                got[lean][2] = r[3];
              }
              const char* kinds[3] = {"linear_q", "linear_q_multi", "linear_q_swiglu"};
              for (int kind = 0; kind < 3; ++kind)
                EXPECT_EQ(std::memcmp(got[0][kind].data(), got[1][kind].data(), got[0][kind].size() * 4), 0)
                    << kinds[kind] << " " << bits << "-bit plan " << plan_name(bits, plan) << " split " << split
                    << " m " << m << " k " << k << " scales " << dtype_name(sb);
            }
      }
}

// The tile kernel's batched x staging (BUNSEN_QMMA_XBATCH=8: up to 8 loads in flight per thread after the PDL
// wait) gives the one-chunk-at-a-time staging's bits: plain, multi-part and gated launches, m 1..8, k of 1, 8
// and 28 stages (one to seven chunks per thread at m = 1; several launches at m = 8, k = 14,336), bf16/f16
// scales, forced and modelled splits.
TEST_F(CudaTest, QMmaBatchedXStagingIsBitIdentical) {
  RestoreQMma restore;
  cuda::set_linear_q_tiles_for_testing(1);
  cuda::set_qmma_plan_for_testing(0);
  std::mt19937 rng(855);
  for (int64_t k : {512, 4096, 14336})
    for (DType sb : {DType::kBF16, DType::kF16}) {
      const int64_t n = 67, f = 40;
      RandomQuantWeight w(n, k, 4, 64, sb, rng), wg(f, k, 4, 64, sb, rng), wu(f, k, 4, 64, sb, rng);
      HostPair x = random_pair(DType::kBF16, {8, k}, rng);
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      for (int split : {0, 1, 8})
        for (int64_t m = 1; m <= 8; ++m) {
          cuda::set_linear_q_split_for_testing(split);
          std::array<std::vector<float>, 4> got[2];
          for (int b = 0; b < 2; ++b) {
            cuda::set_qmma_xbatch_for_testing(b == 0 ? 1 : 8);
            got[b] = run_launch_kinds(ctx_, xd.tensor, m, w, wg, wu, rng);
          }
          const char* kinds[] = {"linear_q", "linear_q_multi part 0", "linear_q_multi part 1",
                                 "linear_q_swiglu"};
          for (int kind = 0; kind < 4; ++kind)
            EXPECT_EQ(std::memcmp(got[0][kind].data(), got[1][kind].data(), got[0][kind].size() * 4), 0)
                << kinds[kind] << " m " << m << " k " << k << " split " << split << " scales "
                << dtype_name(sb);
        }
    }
}

// The f16 8-bit plans (BUNSEN_QMMA_PLAN8 5, 6: codes as f16 1024 + q, x staged as f16 scaled by a power of
// two per token and group) against the CPU at groups 32, 64 and 128 and k not a multiple of 512, with x far
// outside f16's range: token rows of one magnitude each (1, 1e6 and 1e12 past f16's 65,504; 1e-9 and 1e-30
// below its normal range; zeros; 3e4) and a row mixing them group by group. Each token's outputs must be
// within 1e-4 of that token's own largest |want| (so the small rows are judged at their own scale): plain,
// multi-part and gated launches, bf16/f16 scales, m 1, 3 and 8, every forced split.
TEST_F(CudaTest, F16QuantGemv8MatchesTheCpuFarOutsideF16Range) {
  RestoreQMma restore;
  std::mt19937 rng(854);
  Context cpu;
  const float regimes[] = {1.0f, 1e6f, 1e-9f, 0.0f, 3e4f, 1e-30f, 1e12f};
  for (int group : {32, 64, 128})
    for (DType sb : {DType::kBF16, DType::kF16}) {
      const int64_t k = group * 14, n = 45, f = 21;  // an even group count: plan 6's ring takes group 64
      RandomQuantWeight w(n, k, 8, group, sb, rng), wg(f, k, 8, group, sb, rng), wu(f, k, 8, group, sb, rng);
      OwnedTensor xb = OwnedTensor::make(DType::kBF16, {8, k});
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const float mul = i < 7 ? regimes[i] : regimes[(j / group) % 7];
          store_f(xb.tensor.ptr<char>() + i * k * 2, DType::kBF16, j, dist(rng) * mul);
        }
      const OwnedTensor xf = to_f32(xb.tensor);
      const DeviceTensor xd = DeviceTensor::upload(xb.tensor);
      for (int64_t m : {1, 3, 8}) {
        OwnedTensor want = OwnedTensor::make(DType::kF32, {m, n}),
                    want_g = OwnedTensor::make(DType::kF32, {m, f});
        OwnedTensor want_glu = OwnedTensor::make(DType::kF32, {m, f});
        linear_q(cpu, want.tensor, xf.tensor.slice(0, 0, m), w.host);
        linear_q(cpu, want_g.tensor, xf.tensor.slice(0, 0, m), wg.host);
        linear_q_swiglu(cpu, want_glu.tensor, xf.tensor.slice(0, 0, m), wg.host, wu.host);
        for (int plan = 5; plan < cuda::kQMmaPlans8; ++plan)
          for (int split : {0, 1, 2, 8}) {
            cuda::set_qmma_plan8_for_testing(plan);
            cuda::set_linear_q_split_for_testing(split);
            const std::string what =
                strfmt("plan %s group %d scales %s m %lld split %d", cuda::qmma_plan8_name(plan), group,
                       dtype_name(sb), (long long)m, split);
            const std::array<std::vector<float>, 4> got =
                run_launch_kinds(ctx_, xd.tensor, m, w, wg, wu, rng);
            const OwnedTensor* wants[] = {&want, &want, &want_g, &want_glu};
            const char* kinds[] = {"linear_q", "linear_q_multi part 0", "linear_q_multi part 1",
                                   "linear_q_swiglu"};
            for (int c = 0; c < 4; ++c) {
              const std::vector<float> ref = values(wants[c]->tensor);
              const size_t cols = ref.size() / static_cast<size_t>(m);
              for (int64_t i = 0; i < m; ++i) {
                const auto row = [&](const std::vector<float>& v) {
                  return std::vector<float>(v.begin() + i * cols, v.begin() + (i + 1) * cols);
                };
                expect_close(
                    row(got[c]), row(ref), 1e-4f,
                    strfmt("%s token %lld (x ~%g) ", kinds[c], (long long)i, i < 7 ? regimes[i] : -1.0) +
                        what);
              }
            }
          }
      }
    }
}

// ---------------------------------------------------------------- bench (BUNSEN_BENCH_GEMV=1)

// One decode launch shape: kind 0 plain linear_q (bf16 out; lm_head f32), 1 q/k/v linear_q_multi,
// 2 gate/up linear_q_swiglu.
struct LaunchShape {
  const char* name;
  int kind;
  int64_t n, k, n2;  // multi: q rows n, k/v rows n2 each; gated: n = d_ff
  bool f32_out;
};

class QMmaPlanBench : public GraphBench {};

// Every 8B / 1B decode launch (m = 1) under every plan (BUNSEN_QMMA_PLAN at 4 bits, BUNSEN_QMMA_PLAN8 at
// 8) and k split (auto, 1, 2, 4, 8): us and TB/s of weights + scales/biases; the best (plan, split) per
// shape closes each block. Weight sets cycle past the 60 MB L2.
TEST_F(QMmaPlanBench, Shapes) {
  RestoreQMma restore;
  const LaunchShape shapes[] = {
      {"8B q/k/v", 1, 4096, 4096, 1024, false}, {"8B o", 0, 4096, 4096, 0, false},
      {"8B gate/up", 2, 14336, 4096, 0, false}, {"8B down", 0, 4096, 14336, 0, false},
      {"8B lm_head", 0, 128256, 4096, 0, true}, {"1B q/k/v", 1, 2048, 2048, 512, false},
      {"1B o", 0, 2048, 2048, 0, false},        {"1B gate/up", 2, 8192, 2048, 0, false},
      {"1B down", 0, 2048, 8192, 0, false},     {"1B lm_head", 0, 128256, 2048, 0, true}};
  for (int bits : {4, 8})
    for (const LaunchShape& s : shapes) {
      double wbytes = 0.0;
      if (s.kind == 1) wbytes = BenchQuant::bytes(s.n, s.k, bits) + 2 * BenchQuant::bytes(s.n2, s.k, bits);
      if (s.kind == 0) wbytes = BenchQuant::bytes(s.n, s.k, bits);
      if (s.kind == 2) wbytes = 2 * BenchQuant::bytes(s.n, s.k, bits);
      const int copies = static_cast<int>(std::max<int64_t>(1, (512ll << 20) / static_cast<int64_t>(wbytes)));
      std::vector<BenchQuant> a, b, c;  // plain: a; multi: q a, k b, v c; gated: gate a, up b
      for (int i = 0; i < copies; ++i) {
        a.push_back(BenchQuant::make(s.n, s.k, bits));
        if (s.kind == 1) {
          b.push_back(BenchQuant::make(s.n2, s.k, bits));
          c.push_back(BenchQuant::make(s.n2, s.k, bits));
        }
        if (s.kind == 2) b.push_back(BenchQuant::make(s.n, s.k, bits));
      }
      BenchTensor x = BenchTensor::make(DType::kBF16, {1, s.k});
      BenchTensor out = BenchTensor::make(s.f32_out ? DType::kF32 : DType::kBF16, {1, s.n});
      BenchTensor o2 = BenchTensor::make(DType::kBF16, {1, std::max<int64_t>(s.n2, 1)}),
                  o3 = BenchTensor::make(DType::kBF16, {1, std::max<int64_t>(s.n2, 1)});
      auto run = [&](int i) {
        const size_t j = static_cast<size_t>(i % copies);
        if (s.kind == 0) linear_q(ctx_, out.t, x.t, a[j].w);
        if (s.kind == 1) {
          const QuantLinearPart parts[] = {{out.t, a[j].w, {}}, {o2.t, b[j].w, {}}, {o3.t, c[j].w, {}}};
          linear_q_multi(ctx_, x.t, parts);
        }
        if (s.kind == 2) linear_q_swiglu(ctx_, out.t, x.t, a[j].w, b[j].w);
      };
      double best_us = 1e30;
      std::string best;
      for (int plan = 0; plan < cuda::qmma_plan_count(bits); ++plan) {
        set_plan(bits, plan);
        for (int split : {0, 1, 2, 4, 8}) {
          cuda::set_linear_q_split_for_testing(split);
          const double us = time_us(run);
          const std::string what =
              strfmt("q%d %-10s plan %d %-9s split %s", bits, s.name, plan, plan_name(bits, plan),
                     split == 0 ? "auto" : std::to_string(split).c_str());
          std::printf("[bench] %-52s %9.2f us %6.2f TB/s\n", what.c_str(), us, wbytes / us / 1e6);
          if (us < best_us) {
            best_us = us;
            best = what;
          }
        }
      }
      cuda::set_linear_q_split_for_testing(0);
      set_plan(bits, -1);
      std::printf("[bench] BEST %-47s %9.2f us %6.2f TB/s (%.1f MB)\n", best.c_str(), best_us,
                  wbytes / best_us / 1e6, wbytes / 1e6);
      OwnedTensor h = OwnedTensor::make(out.t.dtype, std::span<const int64_t>(out.t.shape, out.t.ndim));
      cuda::copy_to_host(h.tensor.data, out.t.data, out.t.nbytes());
      for (float v : values(h.tensor)) ASSERT_TRUE(std::isfinite(v)) << s.name;
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
