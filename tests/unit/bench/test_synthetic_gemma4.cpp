// The Gemma 4 synthetic benchmark shapes: each parses as gemma4_text with the real layer plan, its manifest
// adds up to the published size (26B-A4B: 25.2 B total, 3.8 B active with the embedding row; E4B's language
// model: 7.46 B of which 2.82 B is the per-layer-embedding table, ~4.6 B "effective"), and `bunsen fit`
// counts KV only for the layers that own it, each with its own head_dim and KV heads.
#include <gtest/gtest.h>

#include "bench/fit.h"
#include "bench/synthetic_shapes.h"
#include "model/arch/gemma4.h"
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

model::ModelConfig shape(const std::string& name) { return model::parse_config(synthetic_config_json(name), name); }

TEST(SyntheticGemma4, ParameterCountsMatchThePublishedSizes) {
  EXPECT_NEAR(static_cast<double>(params_of(shape("gemma4-26b-a4b"))) / 1e9, 25.2, 0.05);
  const model::ModelConfig e4b = shape("gemma4-e4b");
  const double total = static_cast<double>(params_of(e4b)) / 1e9;
  const double ple_table = 262144.0 * 42 * 256 / 1e9;
  EXPECT_NEAR(total, 7.46, 0.01);
  EXPECT_NEAR(total - ple_table, 4.64, 0.01);
}

TEST(SyntheticGemma4, LayerPlans) {
  const model::arch::Gemma4Params e4b = model::arch::gemma4_params(shape("gemma4-e4b"));
  ASSERT_EQ(e4b.layers.size(), 42u);
  EXPECT_EQ(e4b.layers[5].head_dim, 512);
  EXPECT_EQ(e4b.layers[0].head_dim, 256);
  EXPECT_EQ(e4b.layers[23].kv_source, -1);  // the last owning layer
  EXPECT_EQ(e4b.layers[24].kv_source, 22);  // the first shared one (sliding)
  EXPECT_EQ(e4b.layers[40].kv_source, 22);  // last sliding layer before the 18 shared ones
  EXPECT_EQ(e4b.layers[41].kv_source, 23);  // last full layer before them
  const model::arch::Gemma4Params moe = model::arch::gemma4_params(shape("gemma4-26b-a4b"));
  EXPECT_TRUE(moe.moe);
  EXPECT_EQ(moe.layers[5].n_kv_heads, 2);
  EXPECT_TRUE(moe.layers[5].k_eq_v);
  EXPECT_EQ(moe.layers[4].n_kv_heads, 8);
  EXPECT_EQ(moe.layers[4].window, 1024);
}

TEST(SyntheticGemma4, FitCountsOwnedKvLayersWithTheirShapes) {
  // e4b: 24 owning layers (18 shared): 4 full x 2 x 512 per K (and V) per token of context, bf16; the
  // 20 sliding x 2 x 256 ones per token of the window (their own block space).
  const FitModel e4b = fit_model_from_config(shape("gemma4-e4b"), DType::kBF16, "e4b");
  EXPECT_EQ(kv_bytes_per_token(e4b, DType::kBF16), 2u * (4 * 2 * 512) * 2);
  EXPECT_EQ(sliding_kv_bytes_per_token(e4b, DType::kBF16), 2u * (20 * 2 * 256) * 2);
  // 26B-A4B: 5 full x 2 x 512; 25 sliding x 8 x 256 (window 1024).
  const FitModel moe = fit_model_from_config(shape("gemma4-26b-a4b"), DType::kBF16, "moe");
  EXPECT_EQ(kv_bytes_per_token(moe, DType::kBF16), 2u * (5 * 2 * 512) * 2);
  EXPECT_EQ(sliding_kv_bytes_per_token(moe, DType::kBF16), 2u * (25 * 8 * 256) * 2);
  EXPECT_EQ(moe.swa_window, 1024);
}

}  // namespace
}  // namespace bunsen::bench
