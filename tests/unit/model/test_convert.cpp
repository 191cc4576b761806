// convert_checkpoint in-process: which tensors mlx-lm's rule quantizes, the tensors mlx-lm's sanitize drops
// (rotary inv_freq, a tied lm_head), the progress callback (one call per written source tensor, monotone
// bytes ending at the total), and a failed conversion leaving neither DST nor its temp directory behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/config.h"
#include "model/convert.h"
#include "model/registry.h"
#include "model/safetensors_writer.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;
using testutil::expect_error;

TEST(ConvertRule, QuantizableTensors) {
  EXPECT_TRUE(is_quantizable("model.layers.0.self_attn.q_proj.weight", {128, 64}, true, 64));
  EXPECT_TRUE(is_quantizable("model.embed_tokens.weight", {300, 128}, true, 64));
  EXPECT_TRUE(is_quantizable("lm_head.weight", {300, 128}, true, 128));
  EXPECT_FALSE(is_quantizable("model.layers.0.mlp.down_proj.weight", {128, 192}, true, 128));  // 192 % 128
  EXPECT_FALSE(is_quantizable("model.layers.0.self_attn.q_proj.bias", {128}, true, 64));
  EXPECT_FALSE(is_quantizable("model.norm.weight", {128}, true, 64));
  EXPECT_FALSE(is_quantizable("model.layers.0.post_attention_layernorm.weight", {4, 128}, true, 64));
  EXPECT_FALSE(is_quantizable("model.layers.0.q_proj.weight", {128, 64}, false, 64));  // already u32
  EXPECT_FALSE(is_quantizable("conv.weight", {8, 4, 64}, true, 64));
  EXPECT_FALSE(is_quantizable("x.weight", {8, 0}, true, 64));
}

// A tiny tied llama checkpoint with an HF-style rotary table that mlx-lm drops.
std::string tied_checkpoint(const ScratchDir& dir) {
  const std::string text = R"({"model_type": "llama", "vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": true})";
  const std::string src = dir.file("src");
  fs::create_directories(src);
  std::ofstream(src + "/config.json") << text;
  const ModelConfig cfg = parse_config(text, "tiny");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> views;
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  specs.push_back({"lm_head.weight", {96, 64}});
  specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {16}});
  for (const auto& s : specs) {
    owned.push_back(synthetic_tensor(s.name, s.shape, DType::kF16, 3));
    views.emplace_back(s.name, owned.back().tensor);
  }
  save_safetensors(src + "/model.safetensors", views);
  return src;
}

TEST(Convert, DropsWhatMlxLmDropsAndReportsProgress) {
  ScratchDir dir("bunsen_st");
  ConvertOptions o;
  o.src = tied_checkpoint(dir);
  o.dst = dir.file("out/nested/q");  // parents are created
  o.quantize = true;
  o.spec = {8, 32};
  std::vector<ConvertProgress> calls;
  o.progress = [&](const ConvertProgress& p) { calls.push_back(p); };
  const ConvertResult r = convert_checkpoint(o);

  const WeightStore in = WeightStore::open(o.src), out = WeightStore::open(o.dst);
  EXPECT_FALSE(out.has("lm_head.weight"));
  EXPECT_FALSE(out.has("lm_head.scales"));
  EXPECT_FALSE(out.has("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_EQ(out.get("model.embed_tokens.weight", {96, 64 * 8 / 32}).dtype, DType::kU32);
  EXPECT_EQ(out.get("model.embed_tokens.scales", {96, 2}).dtype, DType::kF16);
  const size_t written_sources = in.names().size() - 2;
  ASSERT_EQ(calls.size(), written_sources);
  EXPECT_EQ(r.n_quantized, 8u);  // q, k, v, o, gate, up, down, embed
  EXPECT_EQ(r.n_tensors, written_sources + 2 * r.n_quantized);
  EXPECT_EQ(out.names().size(), r.n_tensors);
  EXPECT_EQ(r.n_shards, 1u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].index, i + 1);
    EXPECT_EQ(calls[i].count, written_sources);
    if (i) {
      EXPECT_GT(calls[i].bytes_done, calls[i - 1].bytes_done);
    }
  }
  EXPECT_EQ(calls.back().bytes_done, calls.back().bytes_total);
  EXPECT_TRUE(r.copied_files.empty());
  // Nothing but DST itself was created next to it.
  size_t siblings = 0;
  for (const auto& e : fs::directory_iterator(dir.file("out/nested"))) siblings += e.path().filename() != "q";
  EXPECT_EQ(siblings, 0u);
}

TEST(Convert, FailureLeavesNothingBehind) {
  ScratchDir dir("bunsen_st");
  ConvertOptions o;
  o.src = tied_checkpoint(dir);
  o.dst = dir.file("dst");
  o.quantize = true;
  o.progress = [](const ConvertProgress& p) {
    if (p.index == 3) throw Error("test", "interrupted");
  };
  expect_error([&] { convert_checkpoint(o); }, {"interrupted"});
  EXPECT_FALSE(fs::exists(o.dst));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("dst"), std::string::npos) << e.path();
  o.progress = nullptr;
  o.spec = {7, 64};
  expect_error([&] { convert_checkpoint(o); }, {"bits=7"});
  fs::create_directories(o.dst);
  o.spec = {4, 64};
  expect_error([&] { convert_checkpoint(o); }, {"convert", "already exists"});
}

}  // namespace
}  // namespace bunsen::model
