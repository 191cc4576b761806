// Qwen3.5 outside the goldens: the published wrapper config (nested text_config, full_attention_interval
// instead of layer_types, rope_parameters with mrope keys) parses to HF's values; the checkpoint name variants
// load to the same logits as the plain qwen3_5_text model: the qwen3_5 wrapper's model.language_model. (with
// model.visual.* and mtp.* tensors that are ignored) and mlx-lm's sanitized layout (language_model.model.,
// language_model.lm_head, conv1d [C, K, 1], zero-centred norms stored as 1 + w); kv_layout's layer kinds.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model_test_util.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;

// The text_config of Qwen/Qwen3.5-4B as published (vision_config left out; layer_types left out so the
// interval rule is exercised).
constexpr const char* kQwen35_4b = R"({"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",
  "tie_word_embeddings":true,"text_config":{"model_type":"qwen3_5_text","hidden_size":2560,"intermediate_size":9216,
  "num_hidden_layers":32,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":256,"full_attention_interval":4,
  "linear_conv_kernel_dim":4,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_num_key_heads":16,
  "linear_num_value_heads":32,"vocab_size":248320,"rms_norm_eps":1e-06,"max_position_embeddings":262144,
  "eos_token_id":248044,"rope_parameters":{"mrope_interleaved":true,"mrope_section":[11,11,10],
  "rope_type":"default","rope_theta":10000000,"partial_rotary_factor":0.25}}})";

TEST(Qwen35Config, PublishedWrapperConfigParses) {
  const ModelConfig c = parse_config(kQwen35_4b, "qwen3.5-4b");
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.d_model, 2560);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_TRUE(c.tie_word_embeddings);  // from the wrapper
  const std::vector<KvLayerSpec> l = kv_layout_from_config(c);
  ASSERT_EQ(l.size(), 32u);
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].is_linear(), (i + 1) % 4 != 0) << "layer " << i;
    if (l[i].is_linear()) {
      EXPECT_EQ(l[i].conv_channels, 2 * 16 * 128 + 32 * 128);
      EXPECT_EQ(l[i].conv_len, 3);
      EXPECT_EQ(l[i].state_heads * l[i].state_k * l[i].state_v, 32 * 128 * 128);
    } else {
      EXPECT_EQ(l[i].n_kv_heads, 4);
      EXPECT_EQ(l[i].head_dim, 256);
    }
  }
  // HF's default partial_rotary_factor (0.25) when a config omits it.
  const ModelConfig d = parse_config(R"({"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,
    "intermediate_size":8,"num_hidden_layers":4,"num_attention_heads":2,"head_dim":16})", "minimal");
  EXPECT_EQ(d.rotary_dim(), 4);
  EXPECT_EQ(kv_layout_from_config(d)[3].is_linear(), false);
  EXPECT_EQ(kv_layout_from_config(d)[2].is_linear(), true);
}

constexpr const char* kTinyText = R"({"model_type":"qwen3_5_text","vocab_size":97,"hidden_size":32,
  "intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,
  "layer_types":["linear_attention","full_attention"],"linear_conv_kernel_dim":4,"linear_key_head_dim":8,
  "linear_value_head_dim":8,"linear_num_key_heads":1,"linear_num_value_heads":2,"tie_word_embeddings":false,
  "rope_parameters":{"rope_type":"default","rope_theta":10000.0,"partial_rotary_factor":0.5}})";

std::vector<float> run_logits(Model& m, const std::vector<int32_t>& tokens) {
  return testutil::prefill_logits(m, tokens, 16);
}

using Tensors = std::map<std::string, OwnedTensor>;

Tensors plain_weights(const ModelConfig& cfg) {
  Tensors t;
  for (const auto& s : expected_tensors(cfg)) t.emplace(s.name, synthetic_tensor(s.name, s.shape, DType::kF32, 5));
  return t;
}

std::vector<float> load_and_run(const std::string& config, const Tensors& file, const std::vector<int32_t>& toks) {
  ScratchDir dir("bunsen_st");
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& [name, t] : file) list.emplace_back(name, t.tensor);
  write_safetensors(dir.file("model.safetensors"), list);
  std::ofstream(dir.file("config.json")) << config;
  auto m = load_model(dir.path());
  return run_logits(*m, toks);
}

OwnedTensor copy_of(const OwnedTensor& t) {
  OwnedTensor c = OwnedTensor::make(t.tensor.dtype, std::span<const int64_t>(t.tensor.shape, t.tensor.ndim));
  std::memcpy(c.tensor.data, t.tensor.data, t.tensor.nbytes());
  return c;
}

bool is_centred_norm(const std::string& n) {
  for (const char* s : {".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                        ".q_norm.weight", ".k_norm.weight"})
    if (n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::strlen(s), s) == 0) return true;
  return false;
}

TEST(Qwen35Checkpoint, WrapperAndMlxNamesGiveTheSameLogits) {
  const ModelConfig cfg = parse_config(kTinyText, "tiny");
  const Tensors plain = plain_weights(cfg);
  const std::vector<int32_t> toks = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};
  const std::vector<float> want = load_and_run(kTinyText, plain, toks);

  // The qwen3_5 wrapper: model.language_model.*, lm_head.weight, plus tensors bunsen ignores.
  Tensors wrapped;
  for (const auto& [name, t] : plain) {
    const std::string n = name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name;
    wrapped.emplace(n, copy_of(t));
  }
  wrapped.emplace("model.visual.patch_embed.proj.weight", synthetic_tensor("v", std::vector<int64_t>{4, 4}, DType::kF32, 1));
  wrapped.emplace("mtp.fc.weight", synthetic_tensor("m", std::vector<int64_t>{4, 4}, DType::kF32, 1));
  std::string wrapper = std::string(R"({"model_type":"qwen3_5","text_config":)") + kTinyText + "}";
  EXPECT_EQ(load_and_run(wrapper, wrapped, toks), want);

  // mlx-lm / mlx-vlm sanitized: language_model.model.*, language_model.lm_head, conv1d [C, K, 1] and the
  // zero-centred norms stored shifted (1 + w), no mtp.* tensors.
  Tensors mlx;
  for (const auto& [name, t] : plain) {
    std::string n = name == "lm_head.weight" ? "language_model.lm_head.weight" : "language_model." + name;
    OwnedTensor c = copy_of(t);
    if (is_centred_norm(name))
      for (int64_t i = 0; i < c.tensor.numel(); ++i) c.tensor.ptr<float>()[i] += 1.0f;
    if (name.find("conv1d.weight") != std::string::npos) {
      c.tensor.shape[1] = t.tensor.shape[2];  // [C, 1, K] -> [C, K, 1]: the same memory
      c.tensor.shape[2] = 1;
      c.tensor.strides[1] = 1;
      c.tensor.strides[2] = 1;
    }
    mlx.emplace(n, std::move(c));
  }
  EXPECT_EQ(load_and_run(wrapper, mlx, toks), want);
}

TEST(Qwen35Checkpoint, MissingTextModelIsNamed) {
  const ModelConfig cfg = parse_config(kTinyText, "tiny");
  Tensors t;
  t.emplace("foo.weight", synthetic_tensor("foo", std::vector<int64_t>{2, 2}, DType::kF32, 1));
  testutil::expect_error([&] { load_and_run(kTinyText, t, {1, 2}); }, {"embed_tokens", "Qwen3.5"});
}

}  // namespace
}  // namespace bunsen::model
