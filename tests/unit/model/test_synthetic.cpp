// Tests for the synthetic weight generator: known-answer constants for the hashes, the cross-check file
// written by scripts/golden/make_synth_check.py (pure Python), dtype equivalence and thread independence.
// Not a test of the golden models (tests/golden/). Invariant checked: C++ and Python produce the same bits.
#include "model/synthetic.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace bunsen::model {
namespace {

nlohmann::json load_check_file() {
  std::ifstream f(std::string(BUNSEN_SOURCE_DIR) + "/tests/golden/data/synth_check.json");
  EXPECT_TRUE(f.good()) << "missing tests/golden/data/synth_check.json";
  return nlohmann::json::parse(f);
}

std::vector<int64_t> shape_of(const nlohmann::json& c) { return c.at("shape").get<std::vector<int64_t>>(); }

uint64_t hex64(const nlohmann::json& v) { return std::stoull(v.get<std::string>(), nullptr, 16); }

TEST(Synthetic, HashKnownAnswers) {
  // Published reference values: splitmix64's first output from state 0; FNV-1a-64 of "" and "a".
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  const char bytes[] = {'a', 'b'};
  EXPECT_EQ(fnv1a64_bytes(bytes, 2), fnv1a64("ab"));
  EXPECT_EQ(fnv1a64_bytes(bytes + 1, 1, fnv1a64("a")), fnv1a64("ab"));
}

TEST(Synthetic, ScaleRules) {
  const std::vector<int64_t> mat{96, 64}, vec{64};
  auto s = synthetic_scale("model.layers.0.post_attention_layernorm.weight", vec);
  EXPECT_EQ(s.scale, 0.25f);
  EXPECT_EQ(s.offset, 1.0f);
  s = synthetic_scale("model.layers.0.self_attn.k_proj.bias", vec);
  EXPECT_EQ(s.scale, 0.25f);
  EXPECT_EQ(s.offset, 0.0f);
  EXPECT_EQ(synthetic_scale("model.embed_tokens.weight", mat).scale, 1.0f);
  EXPECT_EQ(synthetic_scale("lm_head.weight", mat).scale, 0.5f);  // 4 / sqrt(64)
  EXPECT_EQ(synthetic_scale("model.layers.0.mlp.down_proj.weight", mat).scale, 0.125f);
  EXPECT_EQ(synthetic_scale("x.weight", std::vector<int64_t>{4, 3}).scale, static_cast<float>(1.0 / std::sqrt(3.0)));
}

TEST(Synthetic, MatchesPythonCheckFile) {
  const auto doc = load_check_file();
  ASSERT_GE(doc.at("cases").size(), 5u);
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const auto shape = shape_of(c);
    const uint64_t seed = std::stoull(c.at("seed").get<std::string>());
    EXPECT_EQ(synthetic_key(name, seed), hex64(c.at("key")));
    const auto s = synthetic_scale(name, shape);
    EXPECT_EQ(s.scale, c.at("scale").get<float>());
    EXPECT_EQ(s.offset, c.at("offset").get<float>());

    const OwnedTensor bf = synthetic_tensor(name, shape, DType::kBF16, seed);
    EXPECT_EQ(fnv1a64_bytes(bf.tensor.data, bf.tensor.nbytes()), hex64(c.at("bf16_fnv1a64")));
    const OwnedTensor f = synthetic_tensor(name, shape, DType::kF32, seed);
    const auto first = c.at("first").get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(f.tensor.ptr<float>()[i], first[i]) << "element " << i;
    int64_t zeros = 0;
    for (int64_t i = 0; i < f.tensor.numel(); ++i) zeros += f.tensor.ptr<float>()[i] == 0.0f;
    EXPECT_EQ(zeros, c.at("n_zero").get<int64_t>());
  }
}

TEST(Synthetic, PromptRuleMatchesPython) {
  const auto doc = load_check_file();
  const auto ids = doc.at("prompt_ids_seed_1_vocab_1031").get<std::vector<uint64_t>>();
  ASSERT_EQ(ids.size(), 16u);
  for (uint64_t j = 0; j < ids.size(); ++j) EXPECT_EQ(splitmix64((uint64_t{1} ^ 0x5eed) + j) % 1031, ids[j]);
}

TEST(Synthetic, DtypesHoldIdenticalValues) {
  const auto doc = load_check_file();
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const auto shape = shape_of(c);
    const uint64_t seed = std::stoull(c.at("seed").get<std::string>());
    const OwnedTensor f = synthetic_tensor(name, shape, DType::kF32, seed);
    const OwnedTensor h = synthetic_tensor(name, shape, DType::kF16, seed);
    const OwnedTensor b = synthetic_tensor(name, shape, DType::kBF16, seed);
    int64_t bad = 0;
    for (int64_t i = 0; i < f.tensor.numel(); ++i) {
      const float v = f.tensor.ptr<float>()[i];
      bad += f16_to_f32(h.tensor.ptr<uint16_t>()[i]) != v || bf16_to_f32(b.tensor.ptr<uint16_t>()[i]) != v;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(Synthetic, ParallelFillEqualsElementwise) {
  const std::vector<int64_t> shape{3, 1000, 333};  // odd sizes: chunks do not line up with rows
  const std::string name = "model.layers.7.mlp.gate_proj.weight";
  const OwnedTensor t = synthetic_tensor(name, shape, DType::kF32, 99);
  const auto s = synthetic_scale(name, shape);
  const uint64_t key = synthetic_key(name, 99);
  int64_t bad = 0;
  for (int64_t i = 0; i < t.tensor.numel(); ++i)
    bad += t.tensor.ptr<float>()[i] != synthetic_value(key, static_cast<uint64_t>(i), s);
  EXPECT_EQ(bad, 0);
  // Different seeds and names give different streams.
  EXPECT_NE(synthetic_key(name, 99), synthetic_key(name, 100));
  EXPECT_NE(synthetic_key(name, 99), synthetic_key("model.layers.7.mlp.up_proj.weight", 99));
}

TEST(Synthetic, ValuesAreBoundedAndSpread) {
  const std::vector<int64_t> shape{64, 256};
  const OwnedTensor t = synthetic_tensor("model.layers.0.self_attn.o_proj.weight", shape, DType::kF32, 5);
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < t.tensor.numel(); ++i) {
    const float v = t.tensor.ptr<float>()[i];
    ASSERT_LE(std::fabs(v), 1.0f / 16.0f);  // scale 1/sqrt(256)
    sum += v;
    sum_sq += double(v) * v;
  }
  const double n = double(t.tensor.numel());
  EXPECT_NEAR(sum / n, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sum_sq / n), (1.0 / 16.0) / std::sqrt(3.0), 0.002);  // uniform on [-s, s]
}

TEST(Synthetic, RejectsNonFloatDtype) {
  const std::vector<int64_t> shape{4};
  EXPECT_THROW(synthetic_tensor("a.weight", shape, DType::kI32, 0), Error);
}

}  // namespace
}  // namespace bunsen::model
