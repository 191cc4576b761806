// The GEMV's small-launch path (BUNSEN_GEMV_SMALL, gemv.cu) on the real decode shapes of Llama-3.2-1B:
// q/k/v in one launch (2048 -> 2048 + 512 + 512), o (2048 -> 2048), down (8192 -> 2048), gate/up + SiLU and
// + GELU-tanh (2 x 8192 x 2048), bf16 weights, m = 1..8: both paths against ref::linear, the small path's
// batch invariance on these shapes, and (on an H200-sized GPU) that the shape rule picks the small path for
// the one-wave launches and the default path for gate/up. BUNSEN_BENCH_GEMV=1 adds GemvSmallBench: the 1B
// and 8B decode matrices timed in CUDA graphs of 100 calls, default vs small path, each k split, and the
// GEMVs of whole 1B / 8B decode steps (distinct weights per layer) default vs the shape rule.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "graph_bench_util.h"

namespace bunsen::kernels::test {
namespace {

struct RestoreGemvHooks {
  ~RestoreGemvHooks() {
    cuda::set_gemv_small_for_testing(-1);
    cuda::set_gemv_split_for_testing(0);
  }
};

int sms() {
  int n = 0;
  return cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, cuda::current_device()) == cudaSuccess ? n : 0;
}

// One projection on the device: weights [n, k] bf16 (bound to x [m, k] bf16), f32 output.
struct Proj {
  OwnedTensor w;
  DeviceTensor wd;
  static Proj make(int64_t n, int64_t k, std::mt19937& rng) {
    Proj p;
    p.w = random_tensor(DType::kBF16, {n, k}, rng);
    p.wd = DeviceTensor::upload(p.w.tensor);
    return p;
  }
};

OwnedTensor run_linear(Context& ctx, const DeviceTensor& x, int64_t m, const Proj& p) {
  DeviceTensor out = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {m, p.w.tensor.shape[0]}).tensor);
  linear(ctx, out.tensor, x.tensor.slice(0, 0, m), p.wd.tensor);
  return out.download();
}

std::vector<OwnedTensor> run_qkv(Context& ctx, const DeviceTensor& x, int64_t m, const Proj (&qkv)[3]) {
  std::vector<DeviceTensor> od;
  for (const Proj& p : qkv)
    od.push_back(DeviceTensor::upload(OwnedTensor::make(DType::kF32, {m, p.w.tensor.shape[0]}).tensor));
  const LinearPart parts[] = {{od[0].tensor, qkv[0].wd.tensor, {}},
                              {od[1].tensor, qkv[1].wd.tensor, {}},
                              {od[2].tensor, qkv[2].wd.tensor, {}}};
  linear_multi(ctx, x.tensor.slice(0, 0, m), parts);
  std::vector<OwnedTensor> got;
  for (const DeviceTensor& o : od) got.push_back(o.download());
  return got;
}

OwnedTensor run_glu(Context& ctx, const DeviceTensor& x, int64_t m, const Proj& g, const Proj& u, GluAct act) {
  DeviceTensor out = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {m, g.w.tensor.shape[0]}).tensor);
  linear_swiglu(ctx, out.tensor, x.tensor.slice(0, 0, m), g.wd.tensor, u.wd.tensor, {}, {}, act);
  return out.download();
}

bool same_bits(const OwnedTensor& a, const OwnedTensor& b) {
  return a.tensor.nbytes() == b.tensor.nbytes() && std::memcmp(a.tensor.data, b.tensor.data, a.tensor.nbytes()) == 0;
}

// The first m rows of an [8, n] f32 result.
bool same_bits_rows(const OwnedTensor& got, const OwnedTensor& all8, int64_t m) {
  return std::memcmp(got.tensor.data, all8.tensor.data, static_cast<size_t>(m * got.tensor.shape[1]) * 4) == 0;
}

class GemvSmallTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    std::mt19937 rng(811);
    x_host_ = random_pair(DType::kBF16, {8, 2048}, rng);
    xf_host_ = random_pair(DType::kBF16, {8, 8192}, rng);
    x_ = DeviceTensor::upload(x_host_.data.tensor);
    xf_ = DeviceTensor::upload(xf_host_.data.tensor);
    qkv_[0] = Proj::make(2048, 2048, rng);
    qkv_[1] = Proj::make(512, 2048, rng);
    qkv_[2] = Proj::make(512, 2048, rng);
    o_ = Proj::make(2048, 2048, rng);
    down_ = Proj::make(2048, 8192, rng);
    gate_ = Proj::make(8192, 2048, rng);
    up_ = Proj::make(8192, 2048, rng);
  }

  OwnedTensor want_linear(const HostPair& x, int64_t m, const Proj& p) {
    OwnedTensor want = OwnedTensor::make(DType::kF32, {m, p.w.tensor.shape[0]});
    ref::linear(want.tensor, x.f32.tensor.slice(0, 0, m), p.w.tensor, Tensor{});
    return want;
  }
  OwnedTensor want_glu(int64_t m, GluAct act) {
    OwnedTensor g = want_linear(x_host_, m, gate_), u = want_linear(x_host_, m, up_);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {m, 8192});
    if (act == GluAct::kSilu)
      ref::silu_mul(want.tensor, g.tensor, u.tensor);
    else
      ref::gelu_tanh_mul(want.tensor, g.tensor, u.tensor);
    return want;
  }

  HostPair x_host_, xf_host_;
  DeviceTensor x_, xf_;
  Proj qkv_[3], o_, down_, gate_, up_;
};

// Both paths match the f32 reference on every 1B decode matrix at m = 1, 2, 3, 5, 8 (f32 summation order
// is all that differs).
TEST_F(GemvSmallTest, BothPathsMatchReferenceOnLlama1BShapes) {
  RestoreGemvHooks restore;
  for (int mode : {0, 2})
    for (int64_t m : {1, 2, 3, 5, 8}) {
      cuda::set_gemv_small_for_testing(mode);
      const std::string what = strfmt("small mode %d m %lld", mode, (long long)m);
      const std::vector<OwnedTensor> qkv = run_qkv(ctx_, x_, m, qkv_);
      for (int p = 0; p < 3; ++p)
        expect_close(qkv[p].tensor, want_linear(x_host_, m, qkv_[p]).tensor, 1e-4f, what + " qkv part " + std::to_string(p));
      expect_close(run_linear(ctx_, x_, m, o_).tensor, want_linear(x_host_, m, o_).tensor, 1e-4f, what + " o");
      expect_close(run_linear(ctx_, xf_, m, down_).tensor, want_linear(xf_host_, m, down_).tensor, 1e-4f, what + " down");
      for (GluAct act : {GluAct::kSilu, GluAct::kGeluTanh})
        expect_close(run_glu(ctx_, x_, m, gate_, up_, act).tensor, want_glu(m, act).tensor, 1e-4f,
                     what + (act == GluAct::kSilu ? " gate/up silu" : " gate/up gelu_tanh"));
    }
}

// The weight streams' L2 policy (l2_hint.cuh) is a hint: evict_first gives the evict_normal bits on both
// paths and every 1B decode matrix (q/k/v, o, down, gate/up).
TEST_F(GemvSmallTest, L2EvictFirstGivesTheSameBits) {
  RestoreGemvHooks restore;
  struct RestoreL2 {
    ~RestoreL2() { cuda::set_l2_evict_first_for_testing(-1); }
  } restore_l2;
  for (int mode : {0, 1})
    for (int64_t m : {1, 3}) {
      cuda::set_gemv_small_for_testing(mode);
      std::vector<OwnedTensor> got[2];
      for (int first : {0, 1}) {
        cuda::set_l2_evict_first_for_testing(first);
        got[first] = run_qkv(ctx_, x_, m, qkv_);
        got[first].push_back(run_linear(ctx_, x_, m, o_));
        got[first].push_back(run_linear(ctx_, xf_, m, down_));
        got[first].push_back(run_glu(ctx_, x_, m, gate_, up_, GluAct::kSilu));
      }
      ASSERT_EQ(got[0].size(), got[1].size());
      for (size_t i = 0; i < got[0].size(); ++i)
        EXPECT_TRUE(same_bits(got[0][i], got[1][i]))
            << "small mode " << mode << " m " << m << " launch " << i;
    }
}

// On each path a row's bits do not depend on m (1..8), on the 1B shapes and with every forced k split.
TEST_F(GemvSmallTest, RowResultsDoNotDependOnMOnLlama1BShapes) {
  RestoreGemvHooks restore;
  for (int mode : {0, 1, 2})
    for (int split : {0, 1, 2, 4, 8}) {
      cuda::set_gemv_small_for_testing(mode);
      cuda::set_gemv_split_for_testing(split);
      const OwnedTensor o8 = run_linear(ctx_, x_, 8, o_), down8 = run_linear(ctx_, xf_, 8, down_);
      const std::vector<OwnedTensor> qkv8 = run_qkv(ctx_, x_, 8, qkv_);
      const OwnedTensor glu8 = run_glu(ctx_, x_, 8, gate_, up_, GluAct::kSilu);
      for (int64_t m = 1; m < 8; ++m) {
        const std::string what = strfmt("small mode %d split %d m %lld", mode, split, (long long)m);
        ASSERT_TRUE(same_bits_rows(run_linear(ctx_, x_, m, o_), o8, m)) << what << " o";
        ASSERT_TRUE(same_bits_rows(run_linear(ctx_, xf_, m, down_), down8, m)) << what << " down";
        const std::vector<OwnedTensor> qkv = run_qkv(ctx_, x_, m, qkv_);
        for (int p = 0; p < 3; ++p) ASSERT_TRUE(same_bits_rows(qkv[p], qkv8[p], m)) << what << " qkv " << p;
        ASSERT_TRUE(same_bits_rows(run_glu(ctx_, x_, m, gate_, up_, GluAct::kSilu), glu8, m)) << what << " gate/up";
      }
    }
}

// The shape rule (mode 1) on an H200-sized GPU (100..140 SMs): q/k/v, o and down fit one wave of resident
// blocks and take the small path (same bits as forcing it), gate/up needs two and keeps the default path
// (same bits as mode 0). The two paths' bits differ (different k split) on at least one of these.
TEST_F(GemvSmallTest, ShapeRulePicksSmallPathForOneWaveLaunches) {
  const int n_sm = sms();
  if (n_sm < 100 || n_sm > 140) GTEST_SKIP() << n_sm << " SMs: the rule's choices below assume an H100/H200";
  RestoreGemvHooks restore;
  auto all = [&](int mode) {
    cuda::set_gemv_small_for_testing(mode);
    std::vector<OwnedTensor> r = run_qkv(ctx_, x_, 1, qkv_);
    r.push_back(run_linear(ctx_, x_, 1, o_));
    r.push_back(run_linear(ctx_, xf_, 1, down_));
    r.push_back(run_glu(ctx_, x_, 1, gate_, up_, GluAct::kSilu));
    return r;
  };
  const std::vector<OwnedTensor> def = all(0), rule = all(1), forced = all(2);
  const char* names[] = {"q", "k", "v", "o", "down", "gate/up"};
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(rule[i], forced[i])) << names[i] << ": rule should take the small path";
  EXPECT_TRUE(same_bits(rule[5], def[5])) << "gate/up: rule should keep the default path";
  bool any_differs = false;
  for (int i = 0; i < 5; ++i) any_differs = any_differs || !same_bits(def[i], forced[i]);
  EXPECT_TRUE(any_differs) << "the small path gave the default path's bits on every matrix: is it selected at all?";
}

// ---- BUNSEN_BENCH_GEMV=1: default vs small path on the 1B and 8B decode matrices ----

// One device allocation of constant bf16 bytes (the values do not change the timing).
struct DevBuf {
  cuda::DeviceBuffer buf;
  Tensor t;
  static DevBuf make(std::initializer_list<int64_t> shape) {
    DevBuf d;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    d.buf = cuda::DeviceBuffer(static_cast<size_t>(n) * 2 + 256);
    EXPECT_EQ(cudaMemset(d.buf.data(), 0x3c, d.buf.size()), cudaSuccess);
    d.t = Tensor::view(d.buf.data(), DType::kBF16, shape, Device::cuda(cuda::current_device()));
    return d;
  }
};

class GemvSmallBench : public GraphBench {};

TEST_F(GemvSmallBench, DecodeShapes) {
  RestoreGemvHooks restore;
  // kind: 0 = linear [n, k], 1 = q/k/v linear_multi (n = q rows, n2 = k and v rows each), 2 = gate/up + SiLU.
  struct Shape {
    const char* name;
    int kind;
    int64_t n, n2, k;
  };
  const Shape shapes[] = {{"1B q/k/v 2048->2048+2x512", 1, 2048, 512, 2048}, {"1B o 2048->2048", 0, 2048, 0, 2048},
                          {"1B down 8192->2048", 0, 2048, 0, 8192},          {"1B gate/up 2x 2048->8192", 2, 8192, 0, 2048},
                          {"1B q/k/v as one 2048->3072", 0, 3072, 0, 2048},   {"8B q/k/v 4096->4096+2x1024", 1, 4096, 1024, 4096},
                          {"8B q/k/v as one 4096->6144", 0, 6144, 0, 4096},   {"8B o 4096->4096", 0, 4096, 0, 4096},
                          {"8B down 14336->4096", 0, 4096, 0, 14336},         {"8B gate/up 2x 4096->14336", 2, 14336, 0, 4096}};
  std::printf("[bench] path: default = BUNSEN_GEMV_SMALL=0, rule = the shipped default, small = forced\n");
  for (const Shape& s : shapes) {
    const int64_t rows = s.kind == 1 ? s.n + 2 * s.n2 : s.kind == 2 ? 2 * s.n : s.n;
    const int64_t bytes = rows * s.k * 2;
    const int copies = static_cast<int>(std::max<int64_t>(2, (512ll << 20) / bytes));  // cycle past the L2
    std::vector<DevBuf> w0, w1, w2;
    for (int c = 0; c < copies; ++c) {
      w0.push_back(DevBuf::make({s.n, s.k}));
      if (s.kind != 0) w1.push_back(DevBuf::make({s.kind == 1 ? s.n2 : s.n, s.k}));
      if (s.kind == 1) w2.push_back(DevBuf::make({s.n2, s.k}));
    }
    DevBuf x = DevBuf::make({1, s.k}), o0 = DevBuf::make({1, s.n}), o1 = DevBuf::make({1, s.n2 > 0 ? s.n2 : 1}),
           o2 = DevBuf::make({1, s.n2 > 0 ? s.n2 : 1});
    const std::function<void(int)> call = [&](int i) {
      const int c = i % copies;
      if (s.kind == 0) {
        linear(ctx_, o0.t, x.t, w0[c].t);
      } else if (s.kind == 1) {
        const LinearPart parts[] = {{o0.t, w0[c].t, {}}, {o1.t, w1[c].t, {}}, {o2.t, w2[c].t, {}}};
        linear_multi(ctx_, x.t, parts);
      } else {
        linear_swiglu(ctx_, o0.t, x.t, w0[c].t, w1[c].t);
      }
    };
    for (int mode : {0, 1, 2})
      for (int split : {0, 1, 2, 4, 8}) {
        if (mode == 1 && split != 0) continue;  // the rule with a forced split is one of the other rows
        cuda::set_gemv_small_for_testing(mode);
        cuda::set_gemv_split_for_testing(split);
        const double us = time_us(call, 100);
        std::printf("[bench] %-30s %-7s split %-4s %8.2f us %6.2f TB/s\n", s.name,
                    mode == 0 ? "default" : mode == 1 ? "rule" : "small", split == 0 ? "auto" : std::to_string(split).c_str(),
                    us, bytes / us / 1e6);
      }
  }
}

// The GEMVs of whole decode steps (no norms, attention or lm_head): per layer q/k/v (linear_multi), o,
// gate/up + SiLU, down, each layer its own weights, the output of each feeding the next, captured in one
// graph as the runner replays a step, default vs shape-rule path: what the mix of small (early loads, PDL
// overlap) and default launches gives end to end. Values overflow to inf along the chain; timing only.
TEST_F(GemvSmallBench, LayerChains) {
  RestoreGemvHooks restore;
  struct Model {
    const char* name;
    int64_t layers, d, q_dim, kv_dim, f;
  };
  for (const Model& md : {Model{"1B", 16, 2048, 2048, 512, 8192}, Model{"8B", 32, 4096, 4096, 1024, 14336}}) {
    struct Layer {
      DevBuf q, k, v, o, g, u, down;
    };
    std::vector<Layer> ls;
    for (int64_t l = 0; l < md.layers; ++l)
      ls.push_back({DevBuf::make({md.q_dim, md.d}), DevBuf::make({md.kv_dim, md.d}), DevBuf::make({md.kv_dim, md.d}),
                    DevBuf::make({md.d, md.q_dim}), DevBuf::make({md.f, md.d}), DevBuf::make({md.f, md.d}),
                    DevBuf::make({md.d, md.f})});
    DevBuf x = DevBuf::make({1, md.d}), q = DevBuf::make({1, md.q_dim}), k = DevBuf::make({1, md.kv_dim}),
           v = DevBuf::make({1, md.kv_dim}), h = DevBuf::make({1, md.d}), act = DevBuf::make({1, md.f});
    const double bytes = 2.0 * md.layers * md.d * (2 * md.q_dim + 2 * md.kv_dim + 3 * md.f);
    for (int mode : {0, 1}) {
      cuda::set_gemv_small_for_testing(mode);
      const double us = time_us(
          [&](int) {
            for (const Layer& l : ls) {
              const LinearPart parts[] = {{q.t, l.q.t, {}}, {k.t, l.k.t, {}}, {v.t, l.v.t, {}}};
              linear_multi(ctx_, x.t, parts);
              linear(ctx_, h.t, q.t, l.o.t);
              linear_swiglu(ctx_, act.t, h.t, l.g.t, l.u.t);
              linear(ctx_, x.t, act.t, l.down.t);
            }
          },
          4);
      std::printf("[bench] %s GEMV chain (%lld layers) %-7s %9.1f us %6.2f TB/s (%.2f us per layer)\n", md.name,
                  (long long)md.layers, mode == 0 ? "default" : "rule", us, bytes / us / 1e6, us / md.layers);
    }
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
