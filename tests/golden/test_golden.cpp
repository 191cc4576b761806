// Golden parity with Hugging Face transformers (f32, CPU) for every llama-family fixture: the weights are
// rebuilt bit-exactly from the shared generator (checked against HF's FNV-1a hashes), written as a real
// safetensors checkpoint, loaded through load_model, and compared per layer, on logits and on 32 greedy
// tokens. Tolerance: max |ours - HF| / max |HF| <= 1e-4 per tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "engine/generator.h"
#include "golden_file.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

constexpr double kTol = 1e-4;

struct Capture : model::ActivationHook {
  std::map<std::string, std::vector<float>> values;
  void on(std::string_view name, int layer, const Tensor& t) override {
    std::string key(name);
    if (layer >= 0) key += "." + std::to_string(layer);
    auto& v = values[key];
    for (int64_t r = 0; r < t.dim(0); ++r) {  // rows may be strided views
      const float* p = static_cast<const float*>(t.row_ptr(r));
      v.insert(v.end(), p, p + t.dim(1));
    }
  }
};

void check_decode_logits(const Fixture& f, engine::Runner& runner, const std::vector<int32_t>& ids,
                         const std::vector<int32_t>& greedy) {
  const bool full = f.outputs->has("greedy_logits");
  std::vector<float> ref = to_f32(f.outputs->get(full ? "greedy_logits" : "greedy_logits_cols"));
  std::vector<int32_t> cols;
  if (!full) cols = to_i32(f.outputs->get("greedy_col_ids"));
  const int64_t vocab = runner.model().config().vocab_size;
  kv::BlockTable table(runner.block_size());
  ASSERT_TRUE(table.acquire_state_slot(runner.pool()));  // hybrid models: the linear-attention state slot
  std::vector<kv::BlockId> blocks;
  ASSERT_TRUE(runner.pool().allocate_n(table.blocks_needed(static_cast<int64_t>(ids.size() + greedy.size())), blocks));
  for (auto b : blocks) table.append(b);
  engine::SeqChunk prefill{&table, ids.data(), static_cast<int64_t>(ids.size()), 0, engine::SeqChunk::Logits::kLast};
  Tensor logits = runner.step({&prefill, 1});
  std::vector<float> got;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const float* row = logits.ptr<float>();
    if (full) got.insert(got.end(), row, row + vocab);
    else for (int32_t c : cols) got.push_back(row[c]);
    engine::SeqChunk step{&table, &greedy[i], 1, static_cast<int64_t>(ids.size() + i), engine::SeqChunk::Logits::kLast};
    logits = runner.step({&step, 1});
  }
  table.release_all(runner.pool());
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_LE(rel_err(got.data(), ref.data(), ref.size()), kTol) << f.name << " decode logits";
}

class Golden : public testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(Golden, MatchesTransformers) {
  const auto& [name, dtype] = GetParam();
  Fixture f = load_fixture(name);
  const std::string dir = build_checkpoint(f, dtype);
  auto m = model::load_model(dir);
  const model::ModelConfig& cfg = m->config();

  // The manifest the C++ family expects equals the tensors HF's state dict holds.
  std::set<std::string> ours, theirs;
  for (const auto& s : model::expected_tensors(cfg)) ours.insert(s.name);
  for (const auto& [n, _] : f.weights.items()) theirs.insert(n);
  EXPECT_EQ(ours, theirs);

  // RoPE table (families with one table per layer kind store none here; their layers' outputs check it).
  if (f.outputs->has("rope_inv_freq")) {
    model::RopeTable rope = model::compute_rope(cfg, 0);
    std::vector<float> hf_inv = to_f32(f.outputs->get("rope_inv_freq"));
    ASSERT_EQ(rope.inv_freq.size(), hf_inv.size());
    EXPECT_LE(rel_err(rope.inv_freq.data(), hf_inv.data(), hf_inv.size()), 1e-6);
    EXPECT_NEAR(rope.attention_scaling, std::stod(f.metadata.at("attention_scaling")), 1e-6);
  }

  std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  const auto T = static_cast<int64_t>(ids.size());
  engine::RunnerOptions ro;
  ro.max_context = T + 40;
  ro.max_tokens_per_step = T;
  ro.max_logit_rows = T;
  ro.block_size = 4;  // several blocks per sequence even for short fixtures
  engine::Runner runner(*m, ro);
  Capture cap;
  std::vector<float> logits = engine::score(runner, ids, &cap);

  auto expect_close = [&](const std::string& key, const std::vector<float>& got) {
    std::vector<float> ref = to_f32(f.outputs->get(key));
    ASSERT_EQ(got.size(), ref.size()) << key;
    EXPECT_LE(rel_err(got.data(), ref.data(), ref.size()), kTol) << name << " " << key;
  };
  expect_close("embed", cap.values["embed"]);
  expect_close("decoder_in", cap.values["decoder_in"]);
  for (int64_t l = 0; l < cfg.n_layers; ++l) expect_close("layer." + std::to_string(l), cap.values["layer." + std::to_string(l)]);
  expect_close("final_norm", cap.values["final_norm"]);
  if (f.outputs->has("logits")) {
    expect_close("logits", logits);
  } else {  // large vocab: a fixed subset of columns plus the argmax of every row
    std::vector<int32_t> cols = to_i32(f.outputs->get("logit_col_ids"));
    std::vector<float> sub;
    for (int64_t t = 0; t < T; ++t)
      for (int32_t c : cols) sub.push_back(logits[static_cast<size_t>(t * cfg.vocab_size + c)]);
    expect_close("logits_cols", sub);
    std::vector<int32_t> am = to_i32(f.outputs->get("logits_argmax"));
    for (int64_t t = 0; t < T; ++t) {
      const float* row = logits.data() + t * cfg.vocab_size;
      EXPECT_EQ(std::max_element(row, row + cfg.vocab_size) - row, am[static_cast<size_t>(t)]) << "row " << t;
    }
  }

  // 32 greedy tokens through the paged decode path.
  engine::GenerateOptions go;
  go.sampling.temperature = 0;
  std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
  go.max_tokens = static_cast<int64_t>(greedy.size());
  engine::GenerateResult r = engine::generate(runner, ids, go);
  EXPECT_EQ(r.tokens, greedy) << name;

  // Teacher-forced decode: the logits of every single-token decode step (through the KV cache) equal HF's
  // full-recompute logits for the same prefix.
  check_decode_logits(f, runner, ids, greedy);
}

std::string param_name(const testing::TestParamInfo<Golden::ParamType>& p) {
  return std::get<0>(p.param) + "_" + dtype_name(std::get<1>(p.param));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         testing::Combine(testing::ValuesIn(fixture_names()), testing::Values(DType::kBF16, DType::kF32)),
                         param_name);

TEST(GoldenData, EveryFixtureBelongsToASupportedFamily) {  // none is skipped silently
  for (const auto& n : all_fixture_names()) {
    const auto names = fixture_names();
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end())
        << "fixture " << n << " (model_type " << fixture_model_type(n) << ") is not run: its family is not registered";
  }
}

TEST(GoldenData, EveryFamilyHasAFixture) {
  std::set<std::string> families;
  for (const auto& n : fixture_names()) families.insert(fixture_model_type(n));
  for (const auto& t : model::supported_model_types())  // a multimodal wrapper is covered by its text model's
    EXPECT_TRUE(families.count(model::text_model_type(t))) << "no golden fixture for " << t;
}

}  // namespace
}  // namespace bunsen::golden
