// RoutingOverride (model/moe.h): forcing the experts of chosen (decoder layer, token)s on the CPU MoE path.
// One MoE block run directly (moe_forward, softmax + norm_topk and sigmoid + routed scale + expert_scale): the
// block knows its decoder layer from its prefix; re-forcing the model's own choice is bit-identical; forcing
// other experts changes exactly the forced row, whose output matches a hand computation of the routed mix;
// tokens are numbered per layer across steps until rewind(); no installed scope, no effect; bad forced ids
// throw. Then whole models of each MoE golden configuration (synthetic weights): forcing the own choice
// everywhere gives bit-identical logits, forcing one (layer, token) changes nothing before that layer or token.
// routing_swap_gap on hand-built rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "core/buffer.h"
#include "core/status.h"
#include "model/config.h"
#include "model/moe.h"
#include "model/registry.h"
#include "model/routing_trace.h"
#include "model/synthetic.h"
#include "model_test_util.h"

namespace bunsen::model {
namespace {

// Forces the ids of listed (layer, token)s; with keep_own, every other token is "forced" to its own choice
// (re-weighed by the override path). Records what it was asked.
struct Forced : RoutingOverride {
  std::map<std::pair<int, int64_t>, std::vector<int32_t>> ids;
  bool keep_own = false;
  std::vector<std::pair<int, int64_t>> asked;
  bool choose(int layer, int64_t token, std::span<const float>, std::span<int32_t> out) override {
    asked.emplace_back(layer, token);
    const auto it = ids.find({layer, token});
    if (it == ids.end()) return keep_own;
    std::copy(it->second.begin(), it->second.end(), out.begin());
    return true;
  }
};

constexpr int64_t kE = 4, kK = 2, kD = 16, kF = 8, kN = 3;
const std::string kPrefix = "model.layers.3.mlp";

struct Block {
  WeightStore ws;
  MoeLayer l;
  OwnedTensor expert_scale = OwnedTensor::make(DType::kF32, {kE});
};

std::unique_ptr<Block> make_block(bool sigmoid) {
  auto b = std::make_unique<Block>();
  const std::vector<int64_t> router = {kE, kD}, gu = {kE, 2 * kF, kD}, down = {kE, kD, kF};
  b->ws.add(kPrefix + ".gate.weight", synthetic_tensor("router", router, DType::kF32, 11));
  b->ws.add(kPrefix + ".experts.gate_up_proj", synthetic_tensor("gate_up", gu, DType::kF32, 12));
  b->ws.add(kPrefix + ".experts.down_proj", synthetic_tensor("down", down, DType::kF32, 13));
  MoeSpec s;
  s.n_experts = kE, s.top_k = kK, s.d_model = kD, s.d_expert = kF;
  s.scoring = sigmoid ? kernels::MoeScoring::kSigmoid : kernels::MoeScoring::kSoftmax;
  s.norm_topk = !sigmoid;
  s.routed_scale = sigmoid ? 2.5f : 1.0f;
  b->l = load_moe(b->ws, ModelConfig{}, kPrefix, s);
  if (sigmoid) {
    const float es[kE] = {0.5f, 1.5f, 2.0f, 0.75f};
    std::memcpy(b->expert_scale.tensor.data, es, sizeof es);
    b->l.expert_scale = b->expert_scale.tensor;
  }
  return b;
}

// out [kN, kD] and the routing of one moe_forward over x [kN, kD].
struct BlockRun {
  std::vector<float> out, weights;
  std::vector<int32_t> ids;
};

BlockRun forward(const Block& b, const std::vector<float>& x) {
  Arena arena(1 << 16);
  const MoeBuffers buf = alloc_moe_buffers(arena, b.l.spec, kN);
  BlockRun r;
  r.out.assign(kN * kD, 0.0f);
  kernels::Context ctx;
  std::vector<float> xin(x);
  moe_forward(ctx, b.l, Tensor::view(r.out.data(), DType::kF32, {kN, kD}),
              Tensor::view(xin.data(), DType::kF32, {kN, kD}), buf);
  r.ids.assign(buf.ids.ptr<int32_t>(), buf.ids.ptr<int32_t>() + kN * kK);
  r.weights.assign(buf.weights.ptr<float>(), buf.weights.ptr<float>() + kN * kK);
  return r;
}

// The routed mix of the experts `ids` for one token x [kD], in double, from the block's f32 weights.
std::vector<double> hand_mix(const Block& b, const float* x, const std::vector<int32_t>& ids) {
  const float* wr = b.ws.get(kPrefix + ".gate.weight").ptr<float>();
  const float* gu = b.ws.get(kPrefix + ".experts.gate_up_proj").ptr<float>();
  const float* dn = b.ws.get(kPrefix + ".experts.down_proj").ptr<float>();
  const bool sigmoid = b.l.spec.scoring == kernels::MoeScoring::kSigmoid;
  std::vector<double> logit(kE), score(kE);
  double mx = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < kE; ++e) {
    for (int64_t d = 0; d < kD; ++d) logit[e] += static_cast<double>(wr[e * kD + d]) * x[d];
    mx = std::max(mx, logit[e]);
  }
  for (int64_t e = 0; e < kE; ++e) sum += std::exp(logit[e] - mx);
  for (int64_t e = 0; e < kE; ++e)
    score[e] = sigmoid ? 1.0 / (1.0 + std::exp(-logit[e])) : std::exp(logit[e] - mx) / sum;
  double chosen = 0.0;
  for (int32_t e : ids) chosen += score[e];
  std::vector<double> out(kD, 0.0);
  for (int32_t e : ids) {
    double w = b.l.spec.norm_topk ? score[e] / chosen : score[e];
    w *= b.l.spec.routed_scale;
    if (!b.l.expert_scale.empty()) w *= b.l.expert_scale.ptr<float>()[e];
    std::vector<double> h(kF);
    for (int64_t f = 0; f < kF; ++f) {
      double g = 0.0, u = 0.0;
      for (int64_t d = 0; d < kD; ++d) {
        g += static_cast<double>(gu[(e * 2 * kF + f) * kD + d]) * x[d];
        u += static_cast<double>(gu[(e * 2 * kF + kF + f) * kD + d]) * x[d];
      }
      h[f] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t d = 0; d < kD; ++d) {
      double y = 0.0;
      for (int64_t f = 0; f < kF; ++f) y += static_cast<double>(dn[(e * kD + d) * kF + f]) * h[f];
      out[d] += w * y;
    }
  }
  return out;
}

void expect_row_near(const float* got, const std::vector<double>& want, const char* what) {
  double num = 0.0, den = 0.0;
  for (int64_t d = 0; d < kD; ++d) num += (got[d] - want[d]) * (got[d] - want[d]), den += want[d] * want[d];
  ASSERT_GT(den, 0.0) << what;
  EXPECT_LT(std::sqrt(num / den), 1e-5) << what;
}

bool rows_equal(const std::vector<float>& a, const std::vector<float>& b, int64_t row, int64_t width) {
  return std::memcmp(a.data() + row * width, b.data() + row * width, static_cast<size_t>(width) * sizeof(float)) == 0;
}

TEST(RoutingOverride, ForcedExpertsChangeOnlyTheirRowAndMatchTheHandComputedMix) {
  for (bool sigmoid : {false, true}) {
    SCOPED_TRACE(sigmoid ? "sigmoid, routed scale, expert_scale" : "softmax, norm_topk");
    const auto b = make_block(sigmoid);
    EXPECT_EQ(b->l.layer, 3);
    std::vector<float> x(kN * kD);
    for (int64_t i = 0; i < kN * kD; ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f) * 1.7f;
    const BlockRun base = forward(*b, x);
    const std::vector<int32_t> own(base.ids.begin() + kK, base.ids.begin() + 2 * kK);  // token 1
    expect_row_near(base.out.data() + kD, hand_mix(*b, x.data() + kD, own), "the model's own choice");

    Forced same;  // every token re-forced to its own experts: the same weights and outputs, bit for bit
    same.keep_own = true;
    {
      RoutingOverrideScope scope(&same);
      const BlockRun r = forward(*b, x);
      EXPECT_EQ(r.ids, base.ids);
      EXPECT_EQ(std::memcmp(r.weights.data(), base.weights.data(), base.weights.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(r.out.data(), base.out.data(), base.out.size() * sizeof(float)), 0);
    }
    EXPECT_EQ(same.asked, (std::vector<std::pair<int, int64_t>>{{3, 0}, {3, 1}, {3, 2}}));

    std::vector<int32_t> other;  // the experts token 1 did not choose
    for (int32_t e = 0; e < kE; ++e)
      if (std::find(own.begin(), own.end(), e) == own.end()) other.push_back(e);
    Forced f;
    f.ids[{3, 1}] = other;
    RoutingOverrideScope scope(&f);
    const BlockRun r = forward(*b, x);
    EXPECT_TRUE(rows_equal(r.out, base.out, 0, kD));
    EXPECT_TRUE(rows_equal(r.out, base.out, 2, kD));
    EXPECT_FALSE(rows_equal(r.out, base.out, 1, kD));
    EXPECT_EQ(std::vector<int32_t>(r.ids.begin() + kK, r.ids.begin() + 2 * kK), other);
    expect_row_near(r.out.data() + kD, hand_mix(*b, x.data() + kD, other), "forced experts");
    // A second step continues the numbering (tokens 3..5: nothing forced), rewind() restarts it.
    const BlockRun next = forward(*b, x);
    EXPECT_EQ(std::memcmp(next.out.data(), base.out.data(), base.out.size() * sizeof(float)), 0);
    EXPECT_EQ(f.asked.back(), (std::pair<int, int64_t>{3, 5}));
    f.rewind();
    EXPECT_EQ(std::memcmp(forward(*b, x).out.data(), r.out.data(), r.out.size() * sizeof(float)), 0);
    // Forced ids must be distinct experts of the block.
    f.ids[{3, 4}] = {0, 0};
    EXPECT_THROW(forward(*b, x), Error);  // tokens 3..5
    f.ids[{3, 7}] = {0, static_cast<int32_t>(kE)};
    EXPECT_THROW(forward(*b, x), Error);  // tokens 6..8
  }
  // Without a scope nothing is asked.
  const auto b = make_block(false);
  Forced idle;
  idle.keep_own = true;
  { RoutingOverrideScope scope(&idle); }
  forward(*b, std::vector<float>(kN * kD, 0.5f));
  EXPECT_TRUE(idle.asked.empty());
}

// Routing and "layer" outputs of one forward on the CPU.
struct Capture : ActivationHook {
  RoutingTrace trace;
  std::vector<std::vector<float>> layers;  // [layer][n_tokens * d_model]
  void on(std::string_view name, int layer, const Tensor& t) override {
    trace.on(name, layer, t);
    if (name != "layer" || layer < 0) return;
    if (layers.size() <= static_cast<size_t>(layer)) layers.resize(static_cast<size_t>(layer) + 1);
    layers[static_cast<size_t>(layer)].assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
};

class RoutingOverrideModel : public ::testing::TestWithParam<std::string> {};

TEST_P(RoutingOverrideModel, ForcingChangesNothingBeforeTheForcedLayerAndToken) {
  auto m = testutil::fixture_model(GetParam());
  const ModelConfig& cfg = m->config();
  const std::vector<int32_t> tokens = testutil::spread_tokens(21, cfg.vocab_size);
  const auto n = static_cast<int64_t>(tokens.size()), vocab = cfg.vocab_size, d = cfg.d_model;
  Capture base;
  const std::vector<float> want = testutil::prefill_logits(*m, tokens, 16, &base);
  const auto& layers = base.trace.layers();
  ASSERT_FALSE(layers.empty());

  Forced same;
  same.keep_own = true;
  {
    RoutingOverrideScope scope(&same);
    const std::vector<float> got = testutil::prefill_logits(*m, tokens, 16);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "own choice re-forced";
  }
  ASSERT_EQ(static_cast<int64_t>(same.asked.size()), static_cast<int64_t>(layers.size()) * n);
  for (size_t i = 0; i < layers.size(); ++i)  // the hook's decoder layer is the one the block parsed
    EXPECT_EQ(same.asked[i * static_cast<size_t>(n)], (std::pair<int, int64_t>{layers[i].layer, 0}));

  // Token t at the last MoE layer L: its k-th expert swapped for the best one it did not choose.
  const RoutingTrace::Layer& ml = layers.back();
  const int L = ml.layer;
  const int64_t t = 9, k = ml.top_k, e = ml.n_experts;
  std::vector<int32_t> ids(ml.ids.begin() + t * k, ml.ids.begin() + (t + 1) * k);
  const float* lt = ml.logits.data() + t * e;
  int32_t best = -1;
  for (int32_t x = 0; x < e; ++x)
    if (std::find(ids.begin(), ids.end(), x) == ids.end() && (best < 0 || lt[x] > lt[best])) best = x;
  ids.back() = best;
  Forced f;
  f.ids[{L, t}] = ids;
  Capture forced;
  std::vector<float> got;
  {
    RoutingOverrideScope scope(&f);
    got = testutil::prefill_logits(*m, tokens, 16, &forced);
  }
  for (int64_t r = 0; r < t; ++r) EXPECT_TRUE(rows_equal(got, want, r, vocab)) << "logits row " << r;
  EXPECT_FALSE(rows_equal(got, want, t, vocab)) << "the forced token's logits";
  ASSERT_EQ(forced.layers.size(), base.layers.size());
  for (size_t l = 0; l <= static_cast<size_t>(L); ++l)
    for (int64_t r = 0; r < n; ++r) {
      const bool changed = !rows_equal(forced.layers[l], base.layers[l], r, d);
      EXPECT_EQ(changed, static_cast<int>(l) == L && r == t) << "layer " << l << " row " << r;
    }
  const RoutingTrace::Layer& fl = forced.trace.layers().back();
  EXPECT_EQ(std::vector<int32_t>(fl.ids.begin() + t * k, fl.ids.begin() + (t + 1) * k), ids);
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, RoutingOverrideModel,
                         ::testing::Values("qwen3_moe", "qwen3_next", "gemma4_moe"));

TEST(RoutingSwapGap, HandBuiltRows) {
  const float l[5] = {2.0f, 0.5f, 1.0f, -1.0f, 0.9f};
  const int32_t a[2] = {0, 2}, same[2] = {2, 0}, next[2] = {0, 4}, far[2] = {0, 3}, both[2] = {1, 3};
  EXPECT_EQ(routing_swap_gap(l, 5, a, same, 2, 1.0), 0.0);
  EXPECT_NEAR(routing_swap_gap(l, 5, a, next, 2, 1.0), 0.1, 1e-6);  // 1.0 - 0.9: the margin of a
  EXPECT_NEAR(routing_swap_gap(l, 5, a, next, 2, 1.0), routing_margin(l, 5, a, 2, 1.0), 1e-12);
  EXPECT_NEAR(routing_swap_gap(l, 5, a, far, 2, 0.5), 4.0, 1e-6);    // (1 - (-1)) / 0.5
  EXPECT_NEAR(routing_swap_gap(l, 5, a, both, 2, 1.0), 3.0, 1e-6);   // spread of {2, 1, 0.5, -1}
  EXPECT_NEAR(routing_swap_gap(l, 5, next, a, 2, 1.0), 0.1, 1e-6);   // symmetric
  const float tie[3] = {1.0f, 1.0f, 0.0f};
  const int32_t t0[1] = {0}, t1[1] = {1};
  EXPECT_EQ(routing_swap_gap(tie, 3, t0, t1, 1), 0.0);
  const float nan_row[3] = {1.0f, NAN, 0.0f};
  EXPECT_TRUE(std::isinf(routing_swap_gap(nan_row, 3, t0, t1, 1, 1.0)));
}

TEST(RoutingTrace, RecordsTheLayerScale) {
  RoutingTrace trace;
  float l0[4] = {2.0f, 0.5f, 1.0f, -1.0f};
  int32_t i0[2] = {0, 2};
  trace.on("router_logits", 1, Tensor::view(l0, DType::kF32, {1, 4}));
  trace.on("router_ids", 1, Tensor::view(i0, DType::kI32, {1, 2}));
  EXPECT_NEAR(trace.layers()[0].scale, std::sqrt(1.171875), 1e-9);
}

}  // namespace
}  // namespace bunsen::model
