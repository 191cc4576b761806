// CUDA MoE ops against the CPU references: moe_route (f32 and bf16 logits, softmax/sigmoid, renorm,
// expert scale; ids exact, weights close), moe_experts on the grouped-GEMV and the expert-sorted tile paths
// (forced and automatic) at odd sizes, with several tokens sharing an expert, experts chosen by no token,
// bf16/f16/f32 and MLX 4/8-bit experts (rows long enough for several vector-load passes), SiLU and tanh-GELU, f32/bf16 activations; an invalid id contributes
// nothing; the GEMV path replays from a CUDA graph bit for bit. Skips without a GPU. BUNSEN_CUDA_BENCH=1 adds
// a timing of one decode token through 4-bit Gemma-4-26B-A4B-shaped experts (printed).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../kernels/moe_test_util.h"
#include "cuda_test_util.h"
#include "kernels/cuda/moe_ops.h"

namespace bunsen::kernels::test {
namespace {

class CudaMoeTest : public CudaTest {
 protected:
  void TearDown() override {
    if (cuda::device_count() > 0) {
      cuda::set_moe_path_for_testing(cuda::MoePath::kAuto);
      cuda::set_moe_tiles_per_element_for_testing(false);
    }
    CudaTest::TearDown();
  }
};

// A projection's stacked tensors copied to the device, with device address tables.
struct DeviceProj {
  DeviceTensor w, scales, biases, ptrs, scale_ptrs, bias_ptrs;
  ExpertWeights view;
  explicit DeviceProj(const ExpertProj& h) {
    view = h.view;
    w = DeviceTensor::upload(h.w.tensor);
    ptrs = DeviceTensor::upload(ExpertProj::table(h.w.tensor, w.tensor.data).tensor);
    view.ptrs = ptrs.tensor;
    if (h.view.bits == 0) return;
    scales = DeviceTensor::upload(h.scales.tensor);
    biases = DeviceTensor::upload(h.biases.tensor);
    scale_ptrs = DeviceTensor::upload(ExpertProj::table(h.scales.tensor, scales.tensor.data).tensor);
    bias_ptrs = DeviceTensor::upload(ExpertProj::table(h.biases.tensor, biases.tensor.data).tensor);
    view.scale_ptrs = scale_ptrs.tensor;
    view.bias_ptrs = bias_ptrs.tensor;
  }
};

struct DeviceExperts {
  DeviceProj gate, up, down;
  MoeActivation act;
  explicit DeviceExperts(const ExpertSet& s) : gate(s.gate), up(s.up), down(s.down), act(s.act) {}
  MoeExperts view() const { return {gate.view, up.view, down.view, act}; }
};

TEST_F(CudaMoeTest, RouteMatchesTheCpu) {
  std::mt19937 rng(951);
  for (int64_t n_experts : {5, 8, 60, 128, 257})
    for (int k : {1, 3, 8})
      for (DType lt : kActDtypes)
        for (MoeScoring sc : {MoeScoring::kSoftmax, MoeScoring::kSigmoid}) {
          if (k > n_experts) continue;
          const int64_t n = 13;
          HostPair logits = random_pair(lt, {n, n_experts}, rng, -6.0f, 6.0f);
          OwnedTensor es = random_tensor(DType::kBF16, {n_experts}, rng, 0.5f, 2.0f);
          DeviceTensor d_logits = DeviceTensor::upload(logits.data.tensor), d_es = DeviceTensor::upload(es.tensor);
          MoeRouteParams p;
          p.top_k = k, p.scoring = sc, p.norm_topk = k > 1, p.scale = 1.5f;
          OwnedTensor ids = OwnedTensor::make(DType::kI32, {n, k}), w = OwnedTensor::make(DType::kF32, {n, k});
          ref::moe_route(ids.tensor, w.tensor, logits.f32.tensor, p);
          DeviceTensor d_ids = DeviceTensor::upload(ids.tensor), d_w = DeviceTensor::upload(w.tensor);
          cuda::fill_zero_async(d_ids.tensor.data, d_ids.tensor.nbytes(), nullptr);
          moe_route(ctx_, d_ids.tensor, d_w.tensor, d_logits.tensor, p);
          const std::string what = strfmt("%lld experts k %d %s", (long long)n_experts, k, dtype_name(lt));
          const OwnedTensor got_ids = d_ids.download();
          EXPECT_EQ(std::memcmp(got_ids.tensor.data, ids.tensor.data, ids.tensor.nbytes()), 0) << what;
          expect_close(d_w.download().tensor, w.tensor, 1e-5f, what);
          // The per-expert scale multiplies each chosen weight.
          p.expert_scale = d_es.tensor;
          MoeRouteParams ph = p;
          ph.expert_scale = es.tensor;
          ref::moe_route(ids.tensor, w.tensor, logits.f32.tensor, ph);
          moe_route(ctx_, d_ids.tensor, d_w.tensor, d_logits.tensor, p);
          expect_close(d_w.download().tensor, w.tensor, 1e-5f, what + " expert_scale");
        }
}

struct Case {
  int64_t n, d, f, e, k, used;
  int bits, group;
};

void check_experts(CudaMoeTest& t, Context& ctx, const Case& c, DType wt, DType act_dt, MoeActivation act,
                   std::mt19937& rng) {
  ExpertSet s = make_experts(c.e, c.d, c.f, wt, c.bits, c.group, rng, act);
  DeviceExperts ds(s);
  HostPair x = random_pair(act_dt, {c.n, c.d}, rng);
  Routing r = make_routing(c.n, c.k, c.used, rng);
  OwnedTensor want = OwnedTensor::make(DType::kF32, {c.n, c.d});
  ref::moe_experts(want.tensor, x.f32.tensor, r.ids.tensor, r.weights.tensor, s.view());
  DeviceTensor dx = DeviceTensor::upload(x.data.tensor), dids = DeviceTensor::upload(r.ids.tensor);
  DeviceTensor dw = DeviceTensor::upload(r.weights.tensor);
  DeviceTensor dout = DeviceTensor::upload(random_tensor(act_dt, {c.n, c.d}, rng).tensor);
  moe_experts(ctx, dout.tensor, dx.tensor, dids.tensor, dw.tensor, ds.view());
  expect_close(dout.download().tensor, want.tensor, tolerance(act_dt, 5e-5f),
               strfmt("n %lld d %lld f %lld e %lld k %lld bits %d w %s act %s", (long long)c.n, (long long)c.d,
                      (long long)c.f, (long long)c.e, (long long)c.k, c.bits, dtype_name(wt), dtype_name(act_dt)));
  (void)t;
}

const Case kCases[] = {{1, 64, 32, 8, 2, 8, 0, 0},     {3, 37, 19, 5, 3, 5, 0, 0},    {9, 64, 24, 6, 3, 4, 0, 0},
                       {40, 72, 45, 16, 4, 7, 0, 0},   {70, 128, 96, 12, 3, 5, 0, 0}, {4, 64, 96, 8, 2, 3, 4, 32},
                       {33, 128, 64, 4, 4, 4, 4, 64},  {5, 96, 32, 6, 2, 6, 8, 32},   {21, 256, 64, 9, 2, 9, 3, 64},
                       // Rows of several 16-byte-load passes (the vectorised 4/8-bit GEMV), every group size.
                       {2, 320, 128, 8, 4, 8, 4, 64},  {3, 512, 192, 16, 8, 16, 8, 64}, {1, 384, 256, 6, 2, 6, 4, 128},
                       {2, 256, 128, 5, 3, 5, 8, 128}, {4, 1088, 96, 7, 3, 7, 4, 32}};

TEST_F(CudaMoeTest, ExpertsMatchTheCpuOnBothPaths) {
  std::mt19937 rng(952);
  for (cuda::MoePath path : {cuda::MoePath::kGemv, cuda::MoePath::kTiles, cuda::MoePath::kAuto}) {
    cuda::set_moe_path_for_testing(path);
    for (const Case& c : kCases)
      for (DType wt : kWeightDtypes)
        for (DType act_dt : kActDtypes) {
          if (c.bits && wt == DType::kF32) continue;
          SCOPED_TRACE(static_cast<int>(path));
          check_experts(*this, ctx_, c, wt, act_dt, MoeActivation::kSilu, rng);
        }
  }
}

TEST_F(CudaMoeTest, GeluExperts) {
  std::mt19937 rng(953);
  for (cuda::MoePath path : {cuda::MoePath::kGemv, cuda::MoePath::kTiles}) {
    cuda::set_moe_path_for_testing(path);
    check_experts(*this, ctx_, {7, 64, 40, 6, 2, 6, 0, 0}, DType::kBF16, DType::kBF16, MoeActivation::kGeluTanh, rng);
    check_experts(*this, ctx_, {7, 64, 64, 6, 2, 6, 4, 64}, DType::kBF16, DType::kF32, MoeActivation::kGeluTanh, rng);
  }
}

// An id outside [0, n_experts) (not checked on the device) drops that slot's contribution.
TEST_F(CudaMoeTest, InvalidIdContributesNothing) {
  std::mt19937 rng(954);
  for (cuda::MoePath path : {cuda::MoePath::kGemv, cuda::MoePath::kTiles}) {
    cuda::set_moe_path_for_testing(path);
    const int64_t n = 4, d = 32, f = 16, e = 5, k = 2;
    ExpertSet s = make_experts(e, d, f, DType::kBF16, 0, 0, rng);
    DeviceExperts ds(s);
    OwnedTensor x = random_tensor(DType::kF32, {n, d}, rng);
    Routing r = make_routing(n, k, e, rng);
    Routing r0 = {clone(r.ids.tensor), clone(r.weights.tensor)};
    r.ids.tensor.ptr<int32_t>()[1] = 77;  // token 0, slot 1
    r0.weights.tensor.ptr<float>()[1] = 0.0f;
    OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
    ref::moe_experts(want.tensor, x.tensor, r0.ids.tensor, r0.weights.tensor, s.view());
    DeviceTensor dx = DeviceTensor::upload(x.tensor), dids = DeviceTensor::upload(r.ids.tensor);
    DeviceTensor dw = DeviceTensor::upload(r.weights.tensor), dout = DeviceTensor::upload(x.tensor);
    moe_experts(ctx_, dout.tensor, dx.tensor, dids.tensor, dw.tensor, ds.view());
    expect_close(dout.download().tensor, want.tensor, 5e-5f, "invalid id");
  }
}

// Routing and experts of a decode step can be recorded in a CUDA graph (no host sync) and replayed.
TEST_F(CudaMoeTest, DecodeStepReplaysFromAGraph) {
  std::mt19937 rng(955);
  void* stream = cuda::stream_create();
  Context ctx;
  ctx.cuda_stream = stream;
  const int64_t n = 4, d = 64, f = 48, e = 16, k = 4;
  ExpertSet s = make_experts(e, d, f, DType::kBF16, 0, 0, rng);
  DeviceExperts ds(s);
  DeviceTensor logits = DeviceTensor::upload(random_tensor(DType::kF32, {n, e}, rng, -3.0f, 3.0f).tensor);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {n, d}, rng).tensor);
  DeviceTensor ids = DeviceTensor::upload(OwnedTensor::make(DType::kI32, {n, k}).tensor);
  DeviceTensor w = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {n, k}).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {n, d}, rng).tensor);
  MoeRouteParams p;
  p.top_k = static_cast<int>(k), p.norm_topk = true;
  moe_route(ctx, ids.tensor, w.tensor, logits.tensor, p);
  moe_experts(ctx, out.tensor, x.tensor, ids.tensor, w.tensor, ds.view());  // grows the scratch arena
  cuda::synchronize(stream);
  const std::vector<float> eager = values(out.download().tensor);
  cuda::fill_zero_async(out.tensor.data, out.tensor.nbytes(), stream);
  cuda::fill_zero_async(ids.tensor.data, ids.tensor.nbytes(), stream);
  cuda::synchronize(stream);
  cuda::graph_begin_capture(stream);
  moe_route(ctx, ids.tensor, w.tensor, logits.tensor, p);
  moe_experts(ctx, out.tensor, x.tensor, ids.tensor, w.tensor, ds.view());
  void* exec = cuda::graph_end_capture(stream);
  cuda::graph_launch(exec, stream);
  cuda::synchronize(stream);
  const std::vector<float> replay = values(out.download().tensor);
  EXPECT_EQ(std::memcmp(eager.data(), replay.data(), eager.size() * 4), 0);
  cuda::graph_destroy(exec);
  cuda::stream_destroy(stream);
}

// The tile kernels' chunk-decoded 4/8-bit weight tiles (the default) give weight_at's bits (the per-element
// form): the quantized cases above, Gemma-4-26B-A4B's and Qwen3-30B-A3B's expert widths (top-8), bf16 and f32
// activations, an invalid id in a slot.
TEST_F(CudaMoeTest, ChunkDecodedTilesGiveThePerElementBits) {
  std::mt19937 rng(957);
  std::vector<Case> cases;
  for (const Case& c : kCases)
    if (c.bits == 4 || c.bits == 8) cases.push_back(c);
  cases.push_back({1, 2816, 704, 16, 8, 16, 4, 64});
  cases.push_back({2, 2048, 768, 12, 8, 12, 4, 64});
  cases.push_back({1, 512, 320, 10, 8, 10, 8, 32});
  cuda::set_moe_path_for_testing(cuda::MoePath::kTiles);
  for (const Case& c : cases) {
    for (DType act_dt : kActDtypes) {
      const std::string what =
          strfmt("n %lld d %lld f %lld k %lld bits %d group %d act %s", (long long)c.n, (long long)c.d,
                 (long long)c.f, (long long)c.k, c.bits, c.group, dtype_name(act_dt));
      ExpertSet s = make_experts(c.e, c.d, c.f, DType::kBF16, c.bits, c.group, rng, MoeActivation::kGeluTanh);
      DeviceExperts ds(s);
      HostPair x = random_pair(act_dt, {c.n, c.d}, rng);
      Routing r = make_routing(c.n, c.k, c.used, rng);
      if (c.n * c.k > 2) r.ids.tensor.ptr<int32_t>()[1] = static_cast<int32_t>(c.e + 3);  // slot 1: invalid
      DeviceTensor dx = DeviceTensor::upload(x.data.tensor), dids = DeviceTensor::upload(r.ids.tensor);
      DeviceTensor dw = DeviceTensor::upload(r.weights.tensor);
      std::vector<std::vector<float>> got;
      for (bool per_element : {true, false}) {
        cuda::set_moe_tiles_per_element_for_testing(per_element);
        DeviceTensor dout = DeviceTensor::upload(random_tensor(act_dt, {c.n, c.d}, rng).tensor);
        moe_experts(ctx_, dout.tensor, dx.tensor, dids.tensor, dw.tensor, ds.view());
        got.push_back(values(dout.download().tensor));
      }
      ASSERT_EQ(got[0].size(), got[1].size()) << what;
      EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0) << what;
    }
  }
}

// The router's pick rules at every width it takes (up to 1,024 experts, top-32), as the CPU's: equal scores
// go to the lower expert; with sigmoid scores a NaN logit never wins while another expert is left and a -inf
// logit scores zero; with softmax a NaN logit makes the whole row NaN, which the weights carry on (the picks
// then go in expert order, as on the CPU). Every row's picks equal the CPU's bit for bit.
TEST_F(CudaMoeTest, RoutePicksTiesLowerAndNeverNaN) {
  std::mt19937 rng(958);
  for (int64_t n_experts : {8, 128, 257, 1024})
    for (int k : {1, 2, 6, 32})
      for (MoeScoring sc : {MoeScoring::kSoftmax, MoeScoring::kSigmoid}) {
        if (k > n_experts - 2) continue;
        const int64_t n = 9;
        HostPair logits = random_pair(DType::kF32, {n, n_experts}, rng, -6.0f, 6.0f);
        float* l = logits.f32.tensor.ptr<float>();
        l[3] = l[5] = 100.0f;  // row 0: a tie at the top, NaN and -inf
        l[1] = std::nanf("");
        l[2] = -INFINITY;
        l[n_experts + 4] = l[n_experts + 6] = 50.0f;  // row 1: a tie at the top
        MoeRouteParams p;
        p.top_k = k, p.scoring = sc, p.norm_topk = k > 1, p.scale = 1.5f;
        DeviceTensor d_logits = DeviceTensor::upload(logits.f32.tensor);
        DeviceTensor d_ids = DeviceTensor::upload(OwnedTensor::make(DType::kI32, {n, k}).tensor);
        DeviceTensor d_w = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {n, k}).tensor);
        moe_route(ctx_, d_ids.tensor, d_w.tensor, d_logits.tensor, p);
        const OwnedTensor ids = d_ids.download(), w = d_w.download();
        const int32_t* got = ids.tensor.ptr<int32_t>();
        const float* gw = w.tensor.ptr<float>();
        const std::string what = strfmt("%lld experts k %d %s", (long long)n_experts, k,
                                        sc == MoeScoring::kSoftmax ? "softmax" : "sigmoid");
        OwnedTensor want_ids = OwnedTensor::make(DType::kI32, {n, k}),
                    want_w = OwnedTensor::make(DType::kF32, {n, k});
        ref::moe_route(want_ids.tensor, want_w.tensor, logits.f32.tensor, p);
        EXPECT_EQ(std::memcmp(got, want_ids.tensor.data, want_ids.tensor.nbytes()), 0) << what;
        EXPECT_EQ(got[k], 4) << what;
        if (k > 1) {
          EXPECT_EQ(got[k + 1], 6) << what;
        }
        for (int j = 0; j < k; ++j) {
          if (sc == MoeScoring::kSigmoid) {
            EXPECT_NE(got[j], 1) << what << " slot " << j;
            EXPECT_TRUE(std::isfinite(gw[j])) << what << " slot " << j;
          } else {
            EXPECT_TRUE(std::isnan(gw[j])) << what << " slot " << j;
          }
          EXPECT_TRUE(std::isfinite(gw[k + j])) << what << " row 1 slot " << j;
        }
        if (sc == MoeScoring::kSigmoid) {
          EXPECT_EQ(got[0], 3) << what;
          if (k > 1) {
            EXPECT_EQ(got[1], 5) << what;
          }
        }
      }
}

// BUNSEN_CUDA_BENCH=1: one decode token (m = 1) through moe_experts on the Gemma-4-26B-A4B expert shapes
// (128 experts of d 2816, d_expert 704, top-8, MLX 4-bit group 64): us and GB/s of the 8 experts' codes +
// scales + biases, the routing cycling over disjoint expert sets so that the L2 cannot hold them.
TEST_F(CudaMoeTest, BenchQuantDecodeExperts) {
  const char* on = std::getenv("BUNSEN_CUDA_BENCH");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "set BUNSEN_CUDA_BENCH=1";
  const int64_t d = 2816, f = 704, e = 128, k = 8, group = 64;
  const int bits = 4;
  struct Proj {
    cuda::DeviceBuffer w, s, b;
    DeviceTensor ptrs, sptrs, bptrs;
    ExpertWeights view;
  };
  auto make_proj = [&](int64_t rows, int64_t cols) {
    Proj p;
    const int64_t wb = rows * cols * bits / 8, sbb = rows * (cols / group) * 2;
    p.w = cuda::DeviceBuffer(static_cast<size_t>(e * wb));
    p.s = cuda::DeviceBuffer(static_cast<size_t>(e * sbb));
    p.b = cuda::DeviceBuffer(static_cast<size_t>(e * sbb));
    EXPECT_EQ(cudaMemset(p.w.data(), 0x5a, p.w.size()), cudaSuccess);
    EXPECT_EQ(cudaMemset(p.s.data(), 0x3c, p.s.size()), cudaSuccess);
    EXPECT_EQ(cudaMemset(p.b.data(), 0x3c, p.b.size()), cudaSuccess);
    auto table = [&](const cuda::DeviceBuffer& buf, int64_t per) {
      OwnedTensor t = OwnedTensor::make(DType::kI64, {e});
      for (int64_t i = 0; i < e; ++i)
        t.tensor.ptr<int64_t>()[i] = static_cast<int64_t>(reinterpret_cast<intptr_t>(buf.data())) + i * per;
      return DeviceTensor::upload(t.tensor);
    };
    p.ptrs = table(p.w, wb);
    p.sptrs = table(p.s, sbb);
    p.bptrs = table(p.b, sbb);
    p.view = ExpertWeights{p.ptrs.tensor, p.sptrs.tensor, p.bptrs.tensor, DType::kBF16, rows, cols, bits,
                           static_cast<int>(group)};
    return p;
  };
  Proj gate = make_proj(f, d), up = make_proj(f, d), down = make_proj(d, f);
  const MoeExperts experts{gate.view, up.view, down.view, MoeActivation::kGeluTanh};
  const int64_t sets = e / k;  // disjoint routings: token t of call c uses experts c * k .. c * k + k - 1
  std::vector<DeviceTensor> ids, weights;
  for (int64_t c = 0; c < sets; ++c) {
    OwnedTensor id = OwnedTensor::make(DType::kI32, {1, k}), w = OwnedTensor::make(DType::kF32, {1, k});
    for (int64_t j = 0; j < k; ++j) {
      id.tensor.ptr<int32_t>()[j] = static_cast<int32_t>(c * k + j);
      w.tensor.ptr<float>()[j] = 1.0f / static_cast<float>(k);
    }
    ids.push_back(DeviceTensor::upload(id.tensor));
    weights.push_back(DeviceTensor::upload(w.tensor));
  }
  std::mt19937 rng(956);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {1, d}, rng).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kBF16, {1, d}, rng).tensor);
  auto run = [&](int64_t c) {
    moe_experts(ctx_, out.tensor, x.tensor, ids[static_cast<size_t>(c % sets)].tensor,
                weights[static_cast<size_t>(c % sets)].tensor, experts);
  };
  const double bytes = k * (3.0 * d * f * bits / 8 + 3.0 * 2 * 2 * d * f / group);
  for (int64_t c = 0; c < sets; ++c) run(c);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int reps = 200;
  cudaEventRecord(a);
  for (int r = 0; r < reps; ++r) run(r);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  const double us = 1000.0 * ms / reps;
  std::printf("[ bench    ] moe_experts q%d m=1 d %lld f %lld top-%lld of %lld: %8.2f us %7.1f GB/s\n", bits,
              (long long)d, (long long)f, (long long)k, (long long)e, us, bytes / (us * 1e3));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  for (float v : values(out.download().tensor)) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace bunsen::kernels::test
