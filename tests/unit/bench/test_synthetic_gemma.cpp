// The Gemma synthetic benchmark shapes: each parses as its family, and its tensor manifest adds up to the
// parameter count published for the real checkpoint (gemma-2-2b: 2,614,341,888; gemma-3-1b: 999,885,952;
// gemma-3-4b's language model: 3.88 B, its vision tower left out), with the real layer interleave.
#include <gtest/gtest.h>

#include "bench/synthetic_shapes.h"
#include "model/config.h"
#include "model/registry.h"

namespace bunsen::bench {
namespace {

uint64_t params_of(const model::ModelConfig& c) {
  uint64_t total = 0;
  for (const auto& s : model::expected_tensors(c)) {
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    total += n;
  }
  return total;
}

model::ModelConfig shape(const std::string& name) {
  return model::parse_config(synthetic_config_json(name), name);
}

TEST(SyntheticGemma, ParameterCountsMatchThePublishedCheckpoints) {
  EXPECT_EQ(params_of(shape("gemma2-2b")), 2614341888ull);
  EXPECT_EQ(params_of(shape("gemma3-1b")), 999885952ull);
  const double p4 = static_cast<double>(params_of(shape("gemma3-4b")));
  EXPECT_NEAR(p4 / 1e9, 3.88, 0.005);
}

TEST(SyntheticGemma, LayerInterleaveAndScales) {
  const model::ModelConfig g2 = shape("gemma2-2b");
  EXPECT_EQ(g2.sliding_window[0], 4096);
  EXPECT_EQ(g2.sliding_window[1], 0);
  EXPECT_DOUBLE_EQ(g2.final_logit_softcap, 30.0);
  const model::ModelConfig g3 = shape("gemma3-4b");
  int global = 0;
  for (int w : g3.sliding_window) global += w == 0;
  EXPECT_EQ(global, 5);  // layers 5, 11, 17, 23, 29 of 34
  EXPECT_EQ(g3.sliding_window[5], 0);
  EXPECT_EQ(g3.sliding_window[0], 1024);
  ASSERT_TRUE(g3.rope_local.has_value());
  EXPECT_DOUBLE_EQ(g3.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(g3.rope_local->theta, 10000.0);
}

}  // namespace
}  // namespace bunsen::bench
