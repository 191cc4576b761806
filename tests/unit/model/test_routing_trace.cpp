// RoutingTrace and routing_margin (model/routing_trace.h): the margin of a hand-built router row (own sd and a
// given scale), the trace
// fed by hand through the hook names moe.h emits (pairing, appending across steps, several layers, margins at
// the layer's scale), and the
// trace of a real forward of each MoE golden fixture's configuration (synthetic weights, CPU): one entry per
// token and MoE layer, every margin >= 0, the chosen ids those moe_route picks from the recorded logits.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/buffer.h"
#include "core/status.h"
#include "model/config.h"
#include "model/registry.h"
#include "model/routing_trace.h"
#include "model/synthetic.h"
#include "model_test_util.h"

namespace bunsen::model {
namespace {

TEST(RoutingMargin, HandBuiltRow) {
  // logits {2, 0.5, 1, -1}, top 2 = experts {0, 2}: l_k = 1, l_{k+1} = 0.5, gap 0.5.
  // mean 0.625; squared deviations 1.890625 + 0.015625 + 0.140625 + 2.640625 = 4.6875; sd = sqrt(4.6875 / 4).
  const float logits[4] = {2.0f, 0.5f, 1.0f, -1.0f};
  const int32_t ids[2] = {0, 2};
  EXPECT_NEAR(routing_margin(logits, 4, ids, 2), 0.5 / std::sqrt(1.171875), 1e-12);
  const int32_t top1[1] = {0};  // gap 2 - 1 = 1
  EXPECT_NEAR(routing_margin(logits, 4, top1, 1), 1.0 / std::sqrt(1.171875), 1e-12);
  const int32_t tie_ids[2] = {0, 1};
  const float tie[4] = {1.0f, 0.5f, 0.5f, 0.0f};  // a tie at the k-th place: margin 0
  EXPECT_EQ(routing_margin(tie, 4, tie_ids, 2), 0.0);
  const float flat[4] = {0.25f, 0.25f, 0.25f, 0.25f};  // sd 0
  EXPECT_EQ(routing_margin(flat, 4, tie_ids, 2), 0.0);
  const int32_t all[4] = {0, 1, 2, 3};
  EXPECT_TRUE(std::isinf(routing_margin(logits, 4, all, 4)));
  // The margin is invariant under shifting and scaling the logits (one threshold for every layer).
  float scaled[4];
  for (int e = 0; e < 4; ++e) scaled[e] = 3.0f * logits[e] - 7.0f;
  EXPECT_NEAR(routing_margin(scaled, 4, ids, 2), routing_margin(logits, 4, ids, 2), 1e-6);
  // A given scale replaces the token's own sd.
  EXPECT_NEAR(routing_margin(logits, 4, ids, 2, 2.0), 0.25, 1e-12);
  EXPECT_TRUE(std::isinf(routing_margin(logits, 4, all, 4, 2.0)));
}

TEST(RoutingTrace, PairsLogitsWithIdsAndAppendsSteps) {
  RoutingTrace trace;
  float l0[2 * 4] = {2.0f, 0.5f, 1.0f, -1.0f, 0.0f, 3.0f, 2.9f, 1.0f};  // [2 tokens, 4 experts]
  int32_t i0[2 * 2] = {0, 2, 1, 2};
  float l1[1 * 4] = {1.0f, 0.5f, 0.5f, 0.0f};
  int32_t i1[1 * 2] = {0, 1};
  trace.on("layer", 0, Tensor::view(l0, DType::kF32, {2, 4}));  // other names are ignored
  trace.on("router_logits", 3, Tensor::view(l0, DType::kF32, {2, 4}));
  trace.on("router_ids", 3, Tensor::view(i0, DType::kI32, {2, 2}));
  trace.on("router_logits", 5, Tensor::view(l1, DType::kF32, {1, 4}));
  trace.on("router_ids", 5, Tensor::view(i1, DType::kI32, {1, 2}));
  trace.on("router_logits", 3, Tensor::view(l1, DType::kF32, {1, 4}));  // a second step
  trace.on("router_ids", 3, Tensor::view(i1, DType::kI32, {1, 2}));
  ASSERT_EQ(trace.layers().size(), 2u);
  const RoutingTrace::Layer& a = trace.layers()[0];
  EXPECT_EQ(a.layer, 3);
  EXPECT_EQ(a.top_k, 2);
  ASSERT_EQ(a.n_tokens(), 3);
  // Layer 3's margins use its scale: the RMS of the three tokens' logit sds (every token, both steps).
  // Variances: {2, 0.5, 1, -1}: 1.171875; {0, 3, 2.9, 1}: mean 1.725, 1.62188 (computed below); {1, .5, .5, 0}: 0.125.
  auto var = [](const float* l) {
    double m = 0, q = 0;
    for (int e = 0; e < 4; ++e) m += l[e] / 4.0;
    for (int e = 0; e < 4; ++e) q += (l[e] - m) * (l[e] - m) / 4.0;
    return q;
  };
  const double scale = std::sqrt((var(l0) + var(l0 + 4) + var(l1)) / 3.0);
  EXPECT_NEAR(a.margin[0], 0.5 / scale, 1e-6);  // gap 1 - 0.5
  EXPECT_NEAR(a.margin[1], 1.9 / scale, 1e-5);  // gap 2.9 - 1
  EXPECT_EQ(a.margin[2], 0.0f);                 // a tie
  // Not the token's own sd: token 0's sd (1.08) and the layer's scale differ.
  EXPECT_GT(std::abs(a.margin[0] - routing_margin(l0, 4, i0, 2)), 0.01);
  EXPECT_EQ(a.ids, (std::vector<int32_t>{0, 2, 1, 2, 0, 1}));
  EXPECT_EQ(trace.layers()[1].layer, 5);
  EXPECT_EQ(trace.layers()[1].n_tokens(), 1);
  EXPECT_EQ(trace.min_margin(0), 0.0);  // layer 5's token 0 is a tie
  EXPECT_NEAR(trace.min_margin(1), a.margin[1], 1e-6);
  EXPECT_TRUE(std::isinf(trace.min_margin(7)));
  // ids without their logits are an error, not a silent mismatch.
  EXPECT_THROW(trace.on("router_ids", 3, Tensor::view(i1, DType::kI32, {1, 2})), Error);
}

// MoE layers the manifest of `cfg` names.
int64_t moe_layers(const ModelConfig& cfg) {
  int64_t n = 0;
  for (const TensorSpec& t : expected_tensors(cfg)) n += t.name.find("experts.gate_up_proj") != std::string::npos;
  return n;
}

class RoutingTraceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(RoutingTraceFixture, OneMarginPerTokenAndMoeLayer) {
  auto m = testutil::fixture_model(GetParam());
  const ModelConfig& cfg = m->config();
  const std::vector<int32_t> tokens = testutil::spread_tokens(21, cfg.vocab_size);
  RoutingTrace trace;
  testutil::prefill_logits(*m, tokens, 16, &trace);
  const int64_t want_layers = moe_layers(cfg);
  ASSERT_GT(want_layers, 0);
  ASSERT_EQ(static_cast<int64_t>(trace.layers().size()), want_layers);
  double smallest = INFINITY;
  for (const RoutingTrace::Layer& l : trace.layers()) {
    SCOPED_TRACE(l.layer);
    ASSERT_EQ(l.n_tokens(), static_cast<int64_t>(tokens.size()));
    ASSERT_EQ(l.ids.size(), tokens.size() * static_cast<size_t>(l.top_k));
    for (float v : l.margin) EXPECT_GE(v, 0.0f);
    for (float v : l.margin) smallest = std::min(smallest, static_cast<double>(v));
    for (int32_t e : l.ids) EXPECT_TRUE(e >= 0 && e < 64);
  }
  std::printf("[ routing  ] %-14s %zu MoE layers x %zu tokens, smallest margin %.4f\n", GetParam().c_str(),
              trace.layers().size(), tokens.size(), smallest);
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, RoutingTraceFixture,
                         ::testing::Values("qwen3_moe", "qwen3_moe_raw", "qwen3_next", "gemma4_moe"));

}  // namespace
}  // namespace bunsen::model
