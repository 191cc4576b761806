// The fused GeGLU launches (linear_swiglu / linear_q_swiglu with GluAct::kGeluTanh: gate/up GEMV and
// gelu_tanh(gate) * up in one launch, as Gemma 2/3/4 decode steps run their MLP) against the CPU's unfused
// gate, up, gelu_tanh_mul on the same data: f32/f16/bf16 weights, MLX 4/8-bit weights at groups 32/64/128
// with bf16/f16 scales on every tensor-core kernel (tiled, shared-memory x, plain) and the fallbacks,
// m = 1..9, odd n, with and without biases; batch invariance and graph replay of the gated launches; the
// CPU's fused op equal bit for bit to the unfused sequence (runs without a GPU). Plus an env-gated bench
// (BUNSEN_BENCH_GEMV=1) of the Gemma gate/up shapes: fused GeGLU against the multi-part GEMV + gelu_tanh_mul.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "graph_bench_util.h"
#include "kernels/cuda/quant_ops.h"
#include "quant_test_util.h"

namespace bunsen::kernels::test {
namespace {

constexpr GluAct kGelu = GluAct::kGeluTanh;

float tol(DType out) {
  return out == DType::kBF16 ? 1e-2f : 1e-4f;
}

// Restores the process-wide quantized GEMV hooks at scope exit.
struct RestoreQuantHooks {
  ~RestoreQuantHooks() {
    if (cuda::device_count() == 0) return;
    cuda::set_linear_q_tiles_for_testing(-1);
    cuda::set_linear_q_split_for_testing(0);
  }
};

// ---------------------------------------------------------------- CPU: the fused op is the unfused sequence

// Runs without a GPU: the CPU's gated ops with kGeluTanh equal linear, linear, gelu_tanh_mul bit for bit (the
// f32 golden tests rely on it), and differ from the SiLU gating (the activation is not ignored).
TEST(GegluCpu, FusedOpsEqualTheUnfusedSequenceBitForBit) {
  std::mt19937 rng(901);
  Context cpu;
  const int64_t m = 3, k = 128, f = 37;
  HostPair x = random_pair(DType::kF32, {m, k}, rng);
  OwnedTensor wg = random_tensor(DType::kBF16, {f, k}, rng), wu = random_tensor(DType::kBF16, {f, k}, rng);
  OwnedTensor bg = random_tensor(DType::kF32, {f}, rng), bu = random_tensor(DType::kF32, {f}, rng);
  OwnedTensor g = OwnedTensor::make(DType::kF32, {m, f}), u = OwnedTensor::make(DType::kF32, {m, f});
  OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f}), got = OwnedTensor::make(DType::kF32, {m, f});
  OwnedTensor silu = OwnedTensor::make(DType::kF32, {m, f});
  linear(cpu, g.tensor, x.f32.tensor, wg.tensor, bg.tensor);
  linear(cpu, u.tensor, x.f32.tensor, wu.tensor, bu.tensor);
  gelu_tanh_mul(cpu, want.tensor, g.tensor, u.tensor);
  linear_swiglu(cpu, got.tensor, x.f32.tensor, wg.tensor, wu.tensor, bg.tensor, bu.tensor, kGelu);
  EXPECT_EQ(std::memcmp(got.tensor.data, want.tensor.data, want.tensor.nbytes()), 0)
      << "linear_swiglu gelu_tanh";
  linear_swiglu(cpu, silu.tensor, x.f32.tensor, wg.tensor, wu.tensor, bg.tensor, bu.tensor);
  EXPECT_NE(std::memcmp(silu.tensor.data, want.tensor.data, want.tensor.nbytes()), 0) << "silu == gelu_tanh?";

  for (int bits : {4, 8}) {
    OwnedTensor packed[2], scales[2], biases[2];
    QuantWeight w[2];
    for (int p = 0; p < 2; ++p) {
      packed[p] = OwnedTensor::make(DType::kU32, {f, k * bits / 32});
      for (int64_t i = 0; i < packed[p].tensor.numel(); ++i)
        packed[p].tensor.ptr<uint32_t>()[i] = static_cast<uint32_t>(rng());
      scales[p] = random_tensor(DType::kBF16, {f, k / 64}, rng, -0.01f, 0.01f);
      biases[p] = random_tensor(DType::kBF16, {f, k / 64}, rng, -0.05f, 0.05f);
      w[p] = QuantWeight{packed[p].tensor, scales[p].tensor, biases[p].tensor, bits, 64};
    }
    linear_q(cpu, g.tensor, x.f32.tensor, w[0], bg.tensor);
    linear_q(cpu, u.tensor, x.f32.tensor, w[1], bu.tensor);
    gelu_tanh_mul(cpu, want.tensor, g.tensor, u.tensor);
    linear_q_swiglu(cpu, got.tensor, x.f32.tensor, w[0], w[1], bg.tensor, bu.tensor, kGelu);
    EXPECT_EQ(std::memcmp(got.tensor.data, want.tensor.data, want.tensor.nbytes()), 0)
        << "linear_q_swiglu gelu_tanh bits " << bits;
    linear_q_swiglu(cpu, silu.tensor, x.f32.tensor, w[0], w[1], bg.tensor, bu.tensor);
    EXPECT_NE(std::memcmp(silu.tensor.data, want.tensor.data, want.tensor.nbytes()), 0) << "bits " << bits;
  }
}

// ---------------------------------------------------------------- float weights (gemv.cu's glu launches)

// linear_swiglu(kGeluTanh) on CUDA against the CPU's linear, linear, gelu_tanh_mul: m = 1..9 (9: two
// launches), odd f, every weight dtype, f32/bf16 x and out, biases on and off, and a column-offset x view
// (rows not 16-byte aligned: the generic GEMV kernel). Columns beside the out slice stay untouched.
TEST_F(CudaTest, LinearGegluMatchesLinearLinearGeluTanhMul) {
  std::mt19937 rng(902);
  struct Case {
    int64_t m, f, k, pad;
  };
  const Case cases[] = {{1, 37, 136, 0},  {2, 300, 2048, 0}, {3, 37, 64, 0},   {4, 300, 200, 0},
                        {5, 37, 4104, 0}, {6, 1, 72, 0},     {7, 300, 136, 0}, {8, 37, 392, 0},
                        {9, 40, 136, 0},  {5, 17, 64, 3}};
  Context cpu;
  int variant = 0;
  for (const Case& c : cases)
    for (DType wt : kWeightDtypes)
      for (DType xt : kActDtypes) {
        const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
        const bool bias = variant % 3 != 0;
        HostPair x = random_pair(xt, {c.m, c.k + c.pad}, rng);
        const Tensor x_host = x.f32.tensor.slice(1, c.pad, c.pad + c.k);
        OwnedTensor wg = random_tensor(wt, {c.f, c.k}, rng), wu = random_tensor(wt, {c.f, c.k}, rng);
        OwnedTensor bg = random_tensor(DType::kBF16, {c.f}, rng),
                    bu = random_tensor(DType::kBF16, {c.f}, rng);
        OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.f});
        linear_swiglu(cpu, want.tensor, x_host, wg.tensor, wu.tensor, bias ? bg.tensor : Tensor{},
                      bias ? bu.tensor : Tensor{}, kGelu);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
        DeviceTensor wgd = DeviceTensor::upload(wg.tensor), wud = DeviceTensor::upload(wu.tensor);
        DeviceTensor bgd = DeviceTensor::upload(bg.tensor), bud = DeviceTensor::upload(bu.tensor);
        DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {c.m, c.f + 2}, rng).tensor);
        OwnedTensor before = od.download();
        linear_swiglu(ctx_, od.tensor.slice(1, 1, 1 + c.f), xd.tensor.slice(1, c.pad, c.pad + c.k),
                      wgd.tensor, wud.tensor, bias ? bgd.tensor : Tensor{}, bias ? bud.tensor : Tensor{},
                      kGelu);
        OwnedTensor got = od.download();
        const std::string what =
            strfmt("linear_swiglu gelu_tanh m %lld f %lld k %lld pad %lld w %s x %s out %s bias %d",
                   (long long)c.m, (long long)c.f, (long long)c.k, (long long)c.pad, dtype_name(wt),
                   dtype_name(xt), dtype_name(ot), bias);
        expect_close(got.tensor.slice(1, 1, 1 + c.f), want.tensor, tol(ot), what);
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j : {int64_t{0}, c.f + 1})
            ASSERT_EQ(load_f(got.tensor.row_ptr(i), ot, j), load_f(before.tensor.row_ptr(i), ot, j)) << what;
      }
}

// ---------------------------------------------------------------- quantized weights (gemv_qmma.cu's glu)

// linear_q_swiglu(kGeluTanh) on CUDA against the CPU's linear_q, linear_q, gelu_tanh_mul, for every
// tensor-core kernel the gated launch can take: the tiled kernel (4 bits group 64, k % 512 == 0), the
// shared-memory x kernel (other 4-bit launches, tiles off), the plain kernel (8 bits),
// each at m = 1..8 with odd f, group 32/64/128, bf16/f16 scales, biases on and off, and forced k splits.
TEST_F(CudaTest, LinearQGegluMatchesLinearQLinearQGeluTanhMul) {
  RestoreQuantHooks restore;
  std::mt19937 rng(903);
  struct Case {
    int bits, group, tiles;  // tiles: set_linear_q_tiles_for_testing mode
    int64_t k;
  };
  const Case cases[] = {{4, 64, 1, 1024}, {4, 64, 0, 1024}, {4, 32, 1, 256}, {4, 128, 1, 384},
                        {8, 64, 1, 1024}, {8, 64, 0, 512},  {8, 32, 0, 160}, {8, 128, 0, 1024}};
  Context cpu;
  int variant = 0;
  for (const Case& c : cases) {
    cuda::set_linear_q_tiles_for_testing(c.tiles);
    for (int64_t f : {37, 300})
      for (DType sb : {DType::kBF16, DType::kF16}) {
        RandomQuantWeight wg(f, c.k, c.bits, c.group, sb, rng), wu(f, c.k, c.bits, c.group, sb, rng);
        OwnedTensor bg = random_tensor(DType::kBF16, {f}, rng), bu = random_tensor(DType::kBF16, {f}, rng);
        DeviceTensor bgd = DeviceTensor::upload(bg.tensor), bud = DeviceTensor::upload(bu.tensor);
        HostPair x = random_pair(DType::kBF16, {8, c.k}, rng, -2.0f, 2.0f);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
        for (int split : {0, 1, 4}) {
          cuda::set_linear_q_split_for_testing(split);
          for (int64_t m = 1; m <= 8; ++m) {
            const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
            const bool bias = variant % 3 != 0;
            OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f});
            linear_q_swiglu(cpu, want.tensor, x.f32.tensor.slice(0, 0, m), wg.host, wu.host,
                            bias ? bg.tensor : Tensor{}, bias ? bu.tensor : Tensor{}, kGelu);
            DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {m, f}, rng).tensor);
            linear_q_swiglu(ctx_, od.tensor, xd.tensor.slice(0, 0, m), wg.dev, wu.dev,
                            bias ? bgd.tensor : Tensor{}, bias ? bud.tensor : Tensor{}, kGelu);
            expect_close(
                od.download().tensor, want.tensor, tol(ot),
                strfmt("linear_q_swiglu gelu_tanh bits %d group %d tiles %d k %lld f %lld scales %s split "
                       "%d m %lld out %s bias %d",
                       c.bits, c.group, c.tiles, (long long)c.k, (long long)f, dtype_name(sb), split,
                       (long long)m, dtype_name(ot), bias));
          }
        }
      }
  }
}

// What the tensor-core GEMV does not take runs as GEMV per matrix into f32 scratch + gelu_tanh_mul (5-bit
// weights, f32 x); m = 9 takes two fused launches; f32 scales take the plain tensor-core kernel.
TEST_F(CudaTest, LinearQGegluFallbacksMatchTheCpu) {
  std::mt19937 rng(904);
  struct Case {
    int64_t m, k, f;
    int bits, group;
    DType xt, sb;
  };
  const Case cases[] = {{2, 320, 37, 5, 64, DType::kBF16, DType::kBF16},
                        {3, 256, 37, 4, 64, DType::kF32, DType::kBF16},
                        {9, 256, 33, 4, 64, DType::kBF16, DType::kBF16},
                        {4, 256, 300, 8, 32, DType::kBF16, DType::kF32}};
  Context cpu;
  int variant = 0;
  for (const Case& c : cases) {
    const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
    const bool bias = variant % 2 != 0;
    HostPair x = random_pair(c.xt, {c.m, c.k}, rng, -2.0f, 2.0f);
    RandomQuantWeight wg(c.f, c.k, c.bits, c.group, c.sb, rng), wu(c.f, c.k, c.bits, c.group, c.sb, rng);
    OwnedTensor bg = random_tensor(DType::kF32, {c.f}, rng), bu = random_tensor(DType::kF32, {c.f}, rng);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.f});
    linear_q_swiglu(cpu, want.tensor, x.f32.tensor, wg.host, wu.host, bias ? bg.tensor : Tensor{},
                    bias ? bu.tensor : Tensor{}, kGelu);
    DeviceTensor xd = DeviceTensor::upload(x.data.tensor), bgd = DeviceTensor::upload(bg.tensor);
    DeviceTensor bud = DeviceTensor::upload(bu.tensor);
    DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {c.m, c.f}, rng).tensor);
    linear_q_swiglu(ctx_, od.tensor, xd.tensor, wg.dev, wu.dev, bias ? bgd.tensor : Tensor{},
                    bias ? bud.tensor : Tensor{}, kGelu);
    expect_close(
        od.download().tensor, want.tensor, tol(ot),
        strfmt("linear_q_swiglu gelu_tanh fallback m %lld k %lld f %lld bits %d group %d x %s scales %s "
               "out %s bias %d",
               (long long)c.m, (long long)c.k, (long long)c.f, c.bits, c.group, dtype_name(c.xt),
               dtype_name(c.sb), dtype_name(ot), bias));
  }
}

// ---------------------------------------------------------------- batch invariance and graphs

// A row's GeGLU output has the same bits whatever m (<= 8) it is computed in, on both fused launches.
TEST_F(CudaTest, GegluRowsDoNotDependOnM) {
  std::mt19937 rng(905);
  const int64_t k = 1024, f = 300;
  HostPair x = random_pair(DType::kBF16, {8, k}, rng);
  DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
  OwnedTensor wg = random_tensor(DType::kBF16, {f, k}, rng), wu = random_tensor(DType::kBF16, {f, k}, rng);
  DeviceTensor wgd = DeviceTensor::upload(wg.tensor), wud = DeviceTensor::upload(wu.tensor);
  RandomQuantWeight qg(f, k, 4, 64, DType::kBF16, rng), qu(f, k, 4, 64, DType::kBF16, rng);
  for (bool quant : {false, true}) {
    auto run = [&](const Tensor& out, int64_t m) {
      if (quant)
        linear_q_swiglu(ctx_, out, xd.tensor.slice(0, 0, m), qg.dev, qu.dev, {}, {}, kGelu);
      else
        linear_swiglu(ctx_, out, xd.tensor.slice(0, 0, m), wgd.tensor, wud.tensor, {}, {}, kGelu);
    };
    DeviceTensor all = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {8, f}).tensor);
    run(all.tensor, 8);
    const std::vector<float> full = values(all.download().tensor);
    for (int64_t m = 1; m < 8; ++m) {
      DeviceTensor some = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {m, f}).tensor);
      run(some.tensor, m);
      const std::vector<float> part = values(some.download().tensor);
      EXPECT_EQ(std::memcmp(part.data(), full.data(), part.size() * sizeof(float)), 0)
          << (quant ? "quantized" : "bf16") << " m " << m;
    }
  }
}

// The fused GeGLU launches record into a CUDA graph (no scratch, no host sync) and replay to the same bits.
TEST_F(CudaTest, GegluLaunchesReplayFromAGraph) {
  std::mt19937 rng(906);
  void* stream = cuda::stream_create();
  Context ctx;
  ctx.cuda_stream = stream;
  const int64_t k = 512, f = 96;
  OwnedTensor wg = random_tensor(DType::kBF16, {f, k}, rng), wu = random_tensor(DType::kBF16, {f, k}, rng);
  DeviceTensor wgd = DeviceTensor::upload(wg.tensor), wud = DeviceTensor::upload(wu.tensor);
  RandomQuantWeight qg(f, k, 4, 64, DType::kBF16, rng), qu(f, k, 4, 64, DType::kBF16, rng);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {2, k}, rng).tensor);
  DeviceTensor a0 = DeviceTensor::upload(random_tensor(DType::kBF16, {2, f}, rng).tensor);
  DeviceTensor a1 = DeviceTensor::upload(random_tensor(DType::kBF16, {2, f}, rng).tensor);
  auto step = [&] {
    linear_swiglu(ctx, a0.tensor, x.tensor, wgd.tensor, wud.tensor, {}, {}, kGelu);
    linear_q_swiglu(ctx, a1.tensor, x.tensor, qg.dev, qu.dev, {}, {}, kGelu);
  };
  step();
  cuda::synchronize(stream);
  EXPECT_EQ(cuda::scratch_capacity(stream), 0u);
  const std::vector<float> e0 = values(a0.download().tensor), e1 = values(a1.download().tensor);
  cuda::fill_zero_async(a0.tensor.data, a0.tensor.nbytes(), stream);
  cuda::fill_zero_async(a1.tensor.data, a1.tensor.nbytes(), stream);
  cuda::graph_begin_capture(stream);
  step();
  void* exec = cuda::graph_end_capture(stream);
  cuda::graph_launch(exec, stream);
  cuda::synchronize(stream);
  const std::vector<float> r0 = values(a0.download().tensor), r1 = values(a1.download().tensor);
  EXPECT_EQ(std::memcmp(e0.data(), r0.data(), e0.size() * 4), 0);
  EXPECT_EQ(std::memcmp(e1.data(), r1.data(), e1.size() * 4), 0);
  cuda::graph_destroy(exec);
  cuda::stream_destroy(stream);
}

// ---------------------------------------------------------------- bench (BUNSEN_BENCH_GEMV=1)

class GegluBench : public GraphBench {};

// The Gemma gate/up shapes at m = 1 and 4 (bf16, and MLX 4/8-bit group 64): the multi-part GEMV + a
// separate gelu_tanh_mul (today's Gemma path) against the fused GeGLU launch, and the fused SwiGLU launch of
// the same shape (the GeGLU epilogue should cost the same). Weight sets cycle past the L2.
TEST_F(GegluBench, GemmaGateUpShapes) {
  struct Shape {
    const char* name;
    int64_t d, f;
  };
  const Shape shapes[] = {{"gemma4-e4b/gemma3-4b", 2560, 10240}, {"gemma3-27b", 5376, 21504}};
  for (const Shape& s : shapes)
    for (int bits : {0, 4, 8})
      for (int64_t m : {1, 4}) {
        const double w_bytes = bits == 0 ? 2.0 * s.f * s.d * 2 : 2.0 * BenchQuant::bytes(s.f, s.d, bits);
        const int copies = static_cast<int>(std::max<double>(1.0, (512.0 * (1 << 20)) / w_bytes));
        std::vector<BenchTensor> wg, wu;
        std::vector<BenchQuant> qg, qu;
        for (int c = 0; c < copies; ++c) {
          if (bits == 0) {
            wg.push_back(BenchTensor::make(DType::kBF16, {s.f, s.d}));
            wu.push_back(BenchTensor::make(DType::kBF16, {s.f, s.d}));
          } else {
            qg.push_back(BenchQuant::make(s.f, s.d, bits));
            qu.push_back(BenchQuant::make(s.f, s.d, bits));
          }
        }
        BenchTensor x = BenchTensor::make(DType::kBF16, {m, s.d}),
                    g = BenchTensor::make(DType::kBF16, {m, s.f});
        BenchTensor u = BenchTensor::make(DType::kBF16, {m, s.f}),
                    act = BenchTensor::make(DType::kBF16, {m, s.f});
        auto gated = [&](int i, GluAct a) {
          if (bits == 0)
            linear_swiglu(ctx_, act.t, x.t, wg[i % copies].t, wu[i % copies].t, {}, {}, a);
          else
            linear_q_swiglu(ctx_, act.t, x.t, qg[i % copies].w, qu[i % copies].w, {}, {}, a);
        };
        const double unfused = time_us([&](int i) {
          if (bits == 0) {
            const LinearPart parts[] = {{g.t, wg[i % copies].t, {}}, {u.t, wu[i % copies].t, {}}};
            linear_multi(ctx_, x.t, parts);
          } else {
            const QuantLinearPart parts[] = {{g.t, qg[i % copies].w, {}}, {u.t, qu[i % copies].w, {}}};
            linear_q_multi(ctx_, x.t, parts);
          }
          gelu_tanh_mul(ctx_, act.t, g.t, u.t);
        });
        const double geglu = time_us([&](int i) { gated(i, GluAct::kGeluTanh); });
        const double swiglu = time_us([&](int i) { gated(i, GluAct::kSilu); });
        std::printf(
            "[bench] %-22s %-5s m %lld: multi+gelu_tanh_mul %8.2f us | fused geglu %8.2f us (%+.2f) | "
            "fused swiglu %8.2f us | %.0f GB/s\n",
            s.name,
            bits == 0   ? "bf16"
            : bits == 4 ? "q4"
                        : "q8",
            (long long)m, unfused, geglu, geglu - unfused, swiglu, w_bytes / geglu / 1e3);
        OwnedTensor h = OwnedTensor::make(DType::kBF16, {m, s.f});
        cuda::copy_to_host(h.tensor.data, act.t.data, act.t.nbytes());
        for (float v : values(h.tensor)) ASSERT_TRUE(std::isfinite(v)) << s.name << " bits " << bits;
      }
}

}  // namespace
}  // namespace bunsen::kernels::test
