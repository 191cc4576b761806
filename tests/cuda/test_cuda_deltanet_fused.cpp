// The fused Gated-DeltaNet decode launch (deltanet_decode_fused: conv1d + delta rule + gated RMSNorm in one
// CUDA kernel, one thread-block cluster per (sequence, k-head)) against the three ops it replaces, on random
// inputs at Qwen3.5-4B's shape (16 / 32 heads of 128: clusters of 8) and the tiny fixtures' (2 / 4 heads of
// 16: clusters of 2), over a step mixing a continuing decode row, a fresh 3-token run, a padding row
// (slot -1) and a continuing 3-token run, then a decode-only step: outputs within 1e-5 relative (only the
// norm's f32 summation order differs), conv state bit for bit, recurrent state within 1e-6; when it must
// not apply it returns false. Whole model: qwen3_5_text and qwen3_next decode with the fused path on and off
// (logit cosine >= 1 - 1e-4, same argmax); BUNSEN_BENCH_DELTANET=1 times 3 launches vs 1 in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "graph_bench_util.h"
#include "kernels/cuda/linear_attn_ops.h"

namespace bunsen::kernels::test {
namespace {

struct Dims {
  int64_t n_k, n_v, dk, dv, kernel;
  int64_t channels() const { return 2 * n_k * dk + n_v * dv; }
};
constexpr Dims kQwen35_4b{16, 32, 128, 128, 4}, kTiny{2, 4, 16, 16, 4};

DeviceTensor dev_i32(const std::vector<int32_t>& v) {
  return DeviceTensor::upload(Tensor::view(const_cast<int32_t*>(v.data()), DType::kI32, {static_cast<int64_t>(v.size())}));
}

// One DeltaNet layer's inputs, weights and two copies of its state (the fused path's and the reference's).
struct Layer {
  Dims d;
  int64_t n = 0;
  DeviceTensor qkv, z, a, b, conv_w, a_log, dt_bias, norm_w;
  DeviceTensor conv_st[2], rec_st[2];
  DeviceTensor conv_out, core, out;  // the reference's intermediates ([n, channels], [n, n_v dv] f32); fused out
  DeviceTensor starts, slots, positions;

  Layer(const Dims& dims, int64_t n_slots, std::mt19937& rng) : d(dims) {
    conv_w = DeviceTensor::upload(random_tensor(DType::kBF16, {d.channels(), d.kernel}, rng, -0.6f, 0.6f).tensor);
    a_log = DeviceTensor::upload(random_tensor(DType::kBF16, {d.n_v}, rng, -2.0f, 1.0f).tensor);
    dt_bias = DeviceTensor::upload(random_tensor(DType::kBF16, {d.n_v}, rng).tensor);
    norm_w = DeviceTensor::upload(random_tensor(DType::kBF16, {d.dv}, rng, 0.5f, 1.5f).tensor);
    const OwnedTensor cs = random_tensor(DType::kF32, {n_slots, d.channels(), d.kernel - 1}, rng);
    const OwnedTensor rs = random_tensor(DType::kF32, {n_slots, d.n_v, d.dk, d.dv}, rng, -0.3f, 0.3f);
    for (int i = 0; i < 2; ++i) {
      conv_st[i] = DeviceTensor::upload(cs.tensor);
      rec_st[i] = DeviceTensor::upload(rs.tensor);
    }
  }

  // A new step: tokens of sequence s are lens[s] from position first[s], in slot slots[s].
  void step(const std::vector<int>& lens, const std::vector<int>& first, const std::vector<int>& sl, std::mt19937& rng) {
    std::vector<int32_t> st{0}, pos, slv(sl.begin(), sl.end());
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int i = 0; i < lens[s]; ++i) pos.push_back(first[s] + i);
      st.push_back(static_cast<int32_t>(pos.size()));
    }
    n = static_cast<int64_t>(pos.size());
    starts = dev_i32(st);
    slots = dev_i32(slv);
    positions = dev_i32(pos);
    qkv = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.channels()}, rng, -2.0f, 2.0f).tensor);
    z = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.n_v * d.dv}, rng, -2.0f, 2.0f).tensor);
    a = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.n_v}, rng, -3.0f, 3.0f).tensor);
    b = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.n_v}, rng, -3.0f, 3.0f).tensor);
    conv_out = DeviceTensor::upload(OwnedTensor::make(DType::kF32, {n, d.channels()}).tensor);
    core = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.n_v * d.dv}, rng).tensor);
    out = DeviceTensor::upload(random_tensor(DType::kF32, {n, d.n_v * d.dv}, rng).tensor);
  }
  StateMeta meta() const { return {starts.tensor, slots.tensor, positions.tensor}; }
  float q_scale() const { return 1.0f / std::sqrt(static_cast<float>(d.dk)); }

  // The three launches Hybrid::deltanet runs without the fused path, on state copy 1, into core.
  void three_ops(Context& ctx) {
    causal_conv1d(ctx, conv_out.tensor, qkv.tensor, conv_w.tensor, conv_st[1].tensor, meta());
    const int64_t kd = d.n_k * d.dk;
    auto heads = [&](int64_t lo, int64_t h, int64_t dim) {
      Tensor t = conv_out.tensor.slice(1, lo, lo + h * dim);
      t.ndim = 3;
      t.shape[1] = h;
      t.shape[2] = dim;
      t.strides[1] = dim;
      t.strides[2] = 1;
      return t;
    };
    const DeltaRuleInputs in{heads(0, d.n_k, d.dk), heads(kd, d.n_k, d.dk), heads(2 * kd, d.n_v, d.dv), a.tensor,
                             b.tensor, a_log.tensor, dt_bias.tensor};
    gated_delta_rule(ctx, core.tensor.reshape({n, d.n_v, d.dv}), in, rec_st[1].tensor, meta(), q_scale());
    Tensor c2 = core.tensor.reshape({n * d.n_v, d.dv});
    rms_norm_gated(ctx, c2, c2, z.tensor.reshape({n * d.n_v, d.dv}), norm_w.tensor, 1e-6f);
  }

  DeltaNetFusedInputs fused_inputs() const {
    DeltaNetFusedInputs f;
    f.qkv = qkv.tensor;
    f.z = z.tensor;
    f.a = a.tensor;
    f.b = b.tensor;
    f.conv_w = conv_w.tensor;
    f.a_log = a_log.tensor;
    f.dt_bias = dt_bias.tensor;
    f.norm_w = norm_w.tensor;
    f.n_k_heads = d.n_k;
    f.n_v_heads = d.n_v;
    f.k_head_dim = d.dk;
    f.v_head_dim = d.dv;
    f.q_scale = q_scale();
    f.eps = 1e-6f;
    return f;
  }
  // The fused launch on state copy 0, into out.
  bool fused(Context& ctx) {
    return deltanet_decode_fused(ctx, out.tensor, fused_inputs(), {conv_st[0].tensor, rec_st[0].tensor}, meta());
  }
};

int64_t differing(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = values(x), b = values(y);
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  return n;
}

void compare(Layer& l, const std::string& what) {
  cuda::synchronize(nullptr);
  const OwnedTensor got = l.out.download(), want = l.core.download();
  expect_close(got.tensor, want.tensor, 1e-5f, what + " out");
  const OwnedTensor cs0 = l.conv_st[0].download(), cs1 = l.conv_st[1].download();
  EXPECT_EQ(differing(cs0.tensor, cs1.tensor), 0) << what << ": conv state differs (it holds inputs: bit for bit)";
  const OwnedTensor rs0 = l.rec_st[0].download(), rs1 = l.rec_st[1].download();
  expect_close(rs0.tensor, rs1.tensor, 1e-6f, what + " recurrent state");
  std::printf("[ fused    ] %-40s out elements not bit-equal %lld of %lld; recurrent state %lld of %lld\n",
              what.c_str(), (long long)differing(got.tensor, want.tensor), (long long)got.tensor.numel(),
              (long long)differing(rs0.tensor, rs1.tensor), (long long)rs0.tensor.numel());
}

class DeltaNetFusedTest : public CudaTest {
 protected:
  void TearDown() override {
    set_deltanet_fused_for_testing(-1);
    CudaTest::TearDown();
  }
};

TEST_F(DeltaNetFusedTest, MatchesTheThreeOps) {
  set_deltanet_fused_for_testing(1);
  for (const auto& [name, d] : {std::pair{"qwen3.5-4b", kQwen35_4b}, {"tiny", kTiny}}) {
    ASSERT_TRUE(cuda::deltanet_fused_fits(d.n_k, d.n_v, d.dk, d.dv, d.kernel)) << name;
    std::mt19937 rng(4242);
    Layer l(d, 4, rng);  // slot 3 is nobody's: it must keep its garbage
    // continuing decode row, fresh 3-token run (garbage in its slot), padding row, continuing 3-token run
    l.step({1, 3, 1, 3}, {9, 0, 4, 17}, {2, 0, -1, 1}, rng);
    ASSERT_TRUE(l.fused(ctx_)) << name;
    l.three_ops(ctx_);
    compare(l, std::string(name) + " mixed step");
    // then a decode-only step of the same sequences (padding again) from the states just written
    l.step({1, 1, 1, 1}, {10, 3, 0, 20}, {2, 0, -1, 1}, rng);
    ASSERT_TRUE(l.fused(ctx_)) << name;
    l.three_ops(ctx_);
    compare(l, std::string(name) + " decode step");
  }
}

TEST_F(DeltaNetFusedTest, DeclinesWhereItDoesNotApply) {
  std::mt19937 rng(7);
  Layer l(kTiny, 2, rng);
  l.step({1}, {3}, {0}, rng);
  set_deltanet_fused_for_testing(0);
  EXPECT_FALSE(l.fused(ctx_)) << "turned off";
  set_deltanet_fused_for_testing(1);
  EXPECT_TRUE(l.fused(ctx_));
  set_delta_rule_form_for_testing(DeltaRuleForm::kChunked);  // every run would take the chunked form
  EXPECT_FALSE(l.fused(ctx_)) << "chunked form forced";
  set_delta_rule_form_for_testing(DeltaRuleForm::kAuto);
  l.step({kDeltaRuleChunkMinTokens}, {0}, {0}, rng);
  EXPECT_FALSE(l.fused(ctx_)) << "a step of chunk_min tokens";
  EXPECT_FALSE(cuda::deltanet_fused_fits(16, 64, 128, 128, 4)) << "clusters of 16";
  EXPECT_FALSE(cuda::deltanet_fused_fits(2, 4, 256, 16, 4)) << "dk 256";
  EXPECT_FALSE(cuda::deltanet_fused_fits(2, 4, 16, 16, 9)) << "conv kernel 9";
  EXPECT_FALSE(cuda::deltanet_fused_fits(3, 4, 16, 16, 4)) << "n_v not a multiple of n_k";
  // CPU tensors: not fused (the model never asks there)
  const OwnedTensor x = OwnedTensor::make(DType::kF32, {1, kTiny.channels()});
  DeltaNetFusedInputs f = l.fused_inputs();
  f.qkv = x.tensor;
  const OwnedTensor o = OwnedTensor::make(DType::kF32, {1, kTiny.n_v * kTiny.dv});
  EXPECT_FALSE(deltanet_decode_fused(ctx_, o.tensor, f, {l.conv_st[0].tensor, l.rec_st[0].tensor}, l.meta()));
}

// ---- bench: BUNSEN_BENCH_DELTANET=1 ----

class DeltaNetFusedBench : public GraphBench {
 protected:
  const char* bench_env() const override { return "BUNSEN_BENCH_DELTANET"; }
  void TearDown() override {
    set_deltanet_fused_for_testing(-1);
    GraphBench::TearDown();
  }
};

TEST_F(DeltaNetFusedBench, DecodeThreeLaunchesVsFused) {
  set_deltanet_fused_for_testing(1);
  for (int batch : {1, 8}) {
    std::mt19937 rng(99);
    Layer l(kQwen35_4b, batch, rng);
    std::vector<int> lens(batch, 1), first(batch, 100), slots;
    for (int s = 0; s < batch; ++s) slots.push_back(s);
    l.step(lens, first, slots, rng);
    const double three = time_us([&](int) { l.three_ops(ctx_); });
    const double fused = time_us([&](int) { ASSERT_TRUE(l.fused(ctx_)); });
    std::printf("deltanet decode qwen3.5-4b batch %d: 3 launches %.2f us, fused %.2f us (%.2fx) per layer\n", batch,
                three, fused, three / fused);
  }
}

}  // namespace
}  // namespace bunsen::kernels::test

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

class DeltaNetFusedModelTest : public CudaTest {
 protected:
  void TearDown() override {
    kernels::set_deltanet_fused_for_testing(-1);
    CudaTest::TearDown();
  }
};

// Teacher-forced decode logits (prefill of the prompt, then one step per golden token; CUDA graphs) of one
// fixture, with the fused path forced on or off; a fresh Runner each, so no graph captured under the other
// setting is replayed.
std::vector<float> fixture_logits(model::Model& m, const Fixture& f, bool fused) {
  kernels::set_deltanet_fused_for_testing(fused ? 1 : 0);
  const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
  engine::Runner runner(m, runner_options(static_cast<int64_t>(ids.size()), static_cast<int64_t>(greedy.size()) + 8));
  return decode_logits(runner, ids, greedy);
}

TEST_F(DeltaNetFusedModelTest, HybridFixturesDecodeAlikeFusedOrNot) {
  for (const std::string name : {"qwen3_5_text", "qwen3_next"}) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda"), Device::cuda(0));
    const model::ModelConfig& cfg = m->config();
    // The fixtures' DeltaNet dims (config.json linear_*: 2 / 4 heads of 16, conv 4) take the fused kernel.
    ASSERT_TRUE(kernels::cuda::deltanet_fused_fits(2, 4, 16, 16, 4));
    // The prompt (80 tokens) takes the chunked form either way; every teacher-forced decode step is fused.
    const std::vector<float> off = fixture_logits(*m, f, false), on = fixture_logits(*m, f, true);
    ASSERT_EQ(on.size(), off.size());
    const int64_t vocab = cfg.vocab_size, rows = static_cast<int64_t>(on.size()) / vocab;
    double worst = 1.0;
    int64_t same = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float *a = on.data() + r * vocab, *b = off.data() + r * vocab;
      worst = std::min(worst, cosine(a, b, static_cast<size_t>(vocab)));
      same += argmax(a, vocab) == argmax(b, vocab) ? 1 : 0;
    }
    std::printf("[ fused    ] %-14s %lld rows: min cosine fused vs three ops %.8f, argmax equal %lld\n", name.c_str(),
                (long long)rows, worst, (long long)same);
    EXPECT_GE(worst, 1.0 - 1e-4) << name;
    EXPECT_EQ(same, rows) << name << ": greedy tokens differ";
  }
}

}  // namespace
}  // namespace bunsen::golden
