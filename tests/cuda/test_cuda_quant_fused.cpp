// The fused quantized decode ops on CUDA (linear_q_multi: q/k/v in one tensor-core GEMV launch;
// linear_q_swiglu: gate/up + SiLU in one launch) against the CPU's unfused linear_q (+ silu_mul) on the same
// data: m = 1..9 (9: two launches for the gated op, linear_q per part for the multi op), odd n, 4/8 bits
// and every group size (the fused kernel), and the fallbacks (5-bit weights, f32 activations, mixed bit
// widths) that must give the same results through the unfused kernels. Skips without a GPU.
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/cuda/qmma_plan.h"
#include "kernels/cuda/quant_ops.h"
#include "quant_test_util.h"

namespace bunsen::kernels::test {
namespace {

float tol(DType out) { return out == DType::kBF16 ? 1e-2f : 1e-4f; }

struct MultiCase {
  int64_t m, k;
  int bits[3];
  int group;
  DType xt;
};

TEST_F(CudaTest, LinearQMultiMatchesLinearQPerPart) {
  std::mt19937 rng(831);
  const MultiCase cases[] = {
      {1, 256, {4, 4, 4}, 64, DType::kBF16},   {2, 384, {8, 8, 8}, 128, DType::kBF16},
      {3, 96, {4, 4, 4}, 32, DType::kBF16},    {8, 1024, {8, 8, 8}, 64, DType::kBF16},
      {5, 4096, {4, 4, 4}, 64, DType::kBF16},  {9, 256, {4, 4, 4}, 64, DType::kBF16},   // m > 8: per part
      {4, 256, {4, 4, 4}, 64, DType::kF32},    {1, 320, {5, 5, 5}, 64, DType::kBF16},   // fallbacks
      {6, 256, {4, 8, 4}, 64, DType::kBF16}};
  const int64_t ns[3] = {67, 16, 33};
  int variant = 0;
  for (const MultiCase& c : cases)
    for (DType sb : {DType::kBF16, DType::kF16, DType::kF32}) {
      const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
      const bool bias = variant % 3 != 0;
      HostPair x = random_pair(c.xt, {c.m, c.k}, rng);
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      std::vector<RandomQuantWeight> w;
      w.reserve(3);
      std::vector<OwnedTensor> b, want;
      std::vector<DeviceTensor> bd, od;
      std::vector<QuantLinearPart> parts;
      Context cpu;
      for (int p = 0; p < 3; ++p) {
        w.emplace_back(ns[p], c.k, c.bits[p], c.group, sb, rng);
        b.push_back(random_tensor(DType::kBF16, {ns[p]}, rng));
        want.push_back(OwnedTensor::make(DType::kF32, {c.m, ns[p]}));
        linear_q(cpu, want.back().tensor, x.f32.tensor, w.back().host, bias ? b.back().tensor : Tensor{});
        bd.push_back(DeviceTensor::upload(b.back().tensor));
        od.push_back(DeviceTensor::upload(random_tensor(ot, {c.m, ns[p]}, rng).tensor));
      }
      for (int p = 0; p < 3; ++p)
        parts.push_back({od[static_cast<size_t>(p)].tensor, w[static_cast<size_t>(p)].dev,
                         bias ? bd[static_cast<size_t>(p)].tensor : Tensor{}});
      linear_q_multi(ctx_, xd.tensor, parts);
      const float t = c.m > cuda::kGemvMaxM ? 1.5e-2f : tol(ot);  // m > 8: the dequantize + GEMM path
      for (int p = 0; p < 3; ++p)
        expect_close(od[static_cast<size_t>(p)].download().tensor, want[static_cast<size_t>(p)].tensor, t,
                     strfmt("linear_q_multi part %d m %lld k %lld bits %d group %d x %s scales %s out %s bias %d", p,
                            (long long)c.m, (long long)c.k, c.bits[p], c.group, dtype_name(c.xt), dtype_name(sb),
                            dtype_name(ot), bias));
    }
}

TEST_F(CudaTest, LinearQSwigluMatchesLinearQLinearQSiluMul) {
  std::mt19937 rng(832);
  struct Case {
    int64_t m, k, f;
    int bits, group;
    DType xt;
  };
  const Case cases[] = {{1, 256, 67, 4, 64, DType::kBF16},   {2, 512, 16, 8, 64, DType::kBF16},
                        {4, 128, 45, 4, 32, DType::kBF16},   {8, 1024, 100, 8, 128, DType::kBF16},
                        {9, 256, 33, 4, 64, DType::kBF16},   {3, 4096, 24, 4, 64, DType::kBF16},
                        {2, 320, 37, 5, 64, DType::kBF16},   {3, 256, 37, 4, 64, DType::kF32}};  // fallbacks
  int variant = 0;
  for (const Case& c : cases)
    for (DType sb : {DType::kBF16, DType::kF32}) {
      const DType ot = ++variant % 2 == 0 ? DType::kBF16 : DType::kF32;
      const bool bias = variant % 3 != 0;
      HostPair x = random_pair(c.xt, {c.m, c.k}, rng);
      RandomQuantWeight wg(c.f, c.k, c.bits, c.group, sb, rng), wu(c.f, c.k, c.bits, c.group, sb, rng);
      OwnedTensor bg = random_tensor(DType::kBF16, {c.f}, rng), bu = random_tensor(DType::kBF16, {c.f}, rng);
      OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.f});
      Context cpu;
      linear_q_swiglu(cpu, want.tensor, x.f32.tensor, wg.host, wu.host, bias ? bg.tensor : Tensor{},
                      bias ? bu.tensor : Tensor{});
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor), bgd = DeviceTensor::upload(bg.tensor);
      DeviceTensor bud = DeviceTensor::upload(bu.tensor);
      DeviceTensor od = DeviceTensor::upload(random_tensor(ot, {c.m, c.f}, rng).tensor);
      linear_q_swiglu(ctx_, od.tensor, xd.tensor, wg.dev, wu.dev, bias ? bgd.tensor : Tensor{},
                      bias ? bud.tensor : Tensor{});
      expect_close(od.download().tensor, want.tensor, tol(ot),
                   strfmt("linear_q_swiglu m %lld k %lld f %lld bits %d group %d x %s scales %s out %s bias %d",
                          (long long)c.m, (long long)c.k, (long long)c.f, c.bits, c.group, dtype_name(c.xt),
                          dtype_name(sb), dtype_name(ot), bias));
    }
}

// The fused launches record into a CUDA graph like linear_q (no scratch, no host sync on the fused path).
TEST_F(CudaTest, FusedQuantOpsReplayFromAGraph) {
  std::mt19937 rng(833);
  void* stream = cuda::stream_create();
  Context ctx;
  ctx.cuda_stream = stream;
  const int64_t k = 512, f = 96;
  RandomQuantWeight wq(64, k, 4, 64, DType::kBF16, rng), wk(16, k, 4, 64, DType::kBF16, rng);
  RandomQuantWeight wg(f, k, 4, 64, DType::kBF16, rng), wu(f, k, 4, 64, DType::kBF16, rng);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {2, k}, rng).tensor);
  DeviceTensor q = DeviceTensor::upload(random_tensor(DType::kBF16, {2, 64}, rng).tensor);
  DeviceTensor kk = DeviceTensor::upload(random_tensor(DType::kBF16, {2, 16}, rng).tensor);
  DeviceTensor act = DeviceTensor::upload(random_tensor(DType::kBF16, {2, f}, rng).tensor);
  auto step = [&] {
    const QuantLinearPart parts[] = {{q.tensor, wq.dev, {}}, {kk.tensor, wk.dev, {}}};
    linear_q_multi(ctx, x.tensor, parts);
    linear_q_swiglu(ctx, act.tensor, x.tensor, wg.dev, wu.dev);
  };
  step();
  cuda::synchronize(stream);
  EXPECT_EQ(cuda::scratch_capacity(stream), 0u);
  const std::vector<float> eq = values(q.download().tensor), ea = values(act.download().tensor);
  cuda::fill_zero_async(q.tensor.data, q.tensor.nbytes(), stream);
  cuda::fill_zero_async(act.tensor.data, act.tensor.nbytes(), stream);
  cuda::graph_begin_capture(stream);
  step();
  void* exec = cuda::graph_end_capture(stream);
  cuda::graph_launch(exec, stream);
  cuda::synchronize(stream);
  const std::vector<float> rq = values(q.download().tensor), ra = values(act.download().tensor);
  EXPECT_EQ(std::memcmp(eq.data(), rq.data(), eq.size() * 4), 0);
  EXPECT_EQ(std::memcmp(ea.data(), ra.data(), ea.size() * 4), 0);
  cuda::graph_destroy(exec);
  cuda::stream_destroy(stream);
}

// The tiled 4-bit group-64 kernel (weights staged through shared memory; set_linear_q_tiles_for_testing)
// under every launch plan (qmma_plan.h: the tile kernel and the ring kernels):
// linear_q at every m 1..8, k of 1, 3 and 8 tiles of 512, odd and tile-sized n, bf16/f16 scales and every
// forced k split; linear_q_multi (two parts) and linear_q_swiglu (gated rows) - against the CPU's unfused
// ops on the same data.
TEST_F(CudaTest, TiledQuantGemvMatchesTheCpu) {
  struct Restore {
    ~Restore() {
      if (cuda::device_count() > 0) {
        cuda::set_linear_q_tiles_for_testing(-1);
        cuda::set_linear_q_split_for_testing(0);
        cuda::set_qmma_plan_for_testing(-1);
      }
    }
  } restore;
  cuda::set_linear_q_tiles_for_testing(1);
  std::mt19937 rng(835);
  Context cpu;
  expect_every_qmma_plan_matches_the_cpu(ctx_, 4, rng);
  for (int64_t m : {1, 3, 8}) {
    const int64_t k = 1024, f = 37;
    HostPair x = random_pair(DType::kBF16, {m, k}, rng);
    DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
    RandomQuantWeight wg(f, k, 4, 64, DType::kBF16, rng), wu(f, k, 4, 64, DType::kBF16, rng),
        wv(24, k, 4, 64, DType::kBF16, rng);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f}), want_g = OwnedTensor::make(DType::kF32, {m, f});
    OwnedTensor want_v = OwnedTensor::make(DType::kF32, {m, 24});
    linear_q_swiglu(cpu, want.tensor, x.f32.tensor, wg.host, wu.host);
    linear_q(cpu, want_g.tensor, x.f32.tensor, wg.host);
    linear_q(cpu, want_v.tensor, x.f32.tensor, wv.host);
    for (int plan = 0; plan < cuda::kQMmaPlans; ++plan) {
      cuda::set_qmma_plan_for_testing(plan);
      const std::string what = strfmt("plan %s m %lld", cuda::qmma_plan_name(plan), (long long)m);
      DeviceTensor od = DeviceTensor::upload(random_tensor(DType::kF32, {m, f}, rng).tensor);
      linear_q_swiglu(ctx_, od.tensor, xd.tensor, wg.dev, wu.dev);
      expect_close(od.download().tensor, want.tensor, 1e-4f, "tiled linear_q_swiglu " + what);
      DeviceTensor og = DeviceTensor::upload(random_tensor(DType::kF32, {m, f}, rng).tensor);
      DeviceTensor ov = DeviceTensor::upload(random_tensor(DType::kF32, {m, 24}, rng).tensor);
      const QuantLinearPart parts[] = {{og.tensor, wg.dev, {}}, {ov.tensor, wv.dev, {}}};
      linear_q_multi(ctx_, xd.tensor, parts);
      expect_close(og.download().tensor, want_g.tensor, 1e-4f, "tiled linear_q_multi part 0 " + what);
      expect_close(ov.download().tensor, want_v.tensor, 1e-4f, "tiled linear_q_multi part 1 " + what);
    }
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
