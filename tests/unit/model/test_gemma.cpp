// Gemma 2 / 3 outside the goldens: config.json as published on the Hub (sparse gemma3 text_config, legacy
// rope spellings, default layer interleave) parsed to the values of HF's config classes; the checkpoint
// name variants (HF 5.x CausalLM, the gemma3 wrapper's model.language_model., the Hub/MLX
// language_model.model. with language_model.lm_head, MLX 4-bit modules) load to the same logits as the plain
// model; kv_layout's per-layer windows; the embedding normalizer's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/arch/gemma.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model_test_util.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::expect_error;

// google/gemma-3-4b-it's config.json (vision_config left out): the text_config omits every default.
constexpr const char* kGemma3_4b = R"({"architectures":["Gemma3ForConditionalGeneration"],"boi_token_index":255999,
  "eoi_token_index":256000,"eos_token_id":[1,106],"image_token_index":262144,"mm_tokens_per_image":256,
  "model_type":"gemma3","text_config":{"hidden_size":2560,"intermediate_size":10240,"model_type":"gemma3_text",
  "num_hidden_layers":34,"rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024},
  "torch_dtype":"bfloat16"})";

// google/gemma-2-2b's config.json (no layer_types: HF alternates sliding / global from layer 0).
constexpr const char* kGemma2_2b = R"({"architectures":["Gemma2ForCausalLM"],"attention_bias":false,
  "attn_logit_softcapping":50.0,"bos_token_id":2,"cache_implementation":"hybrid","eos_token_id":1,
  "final_logit_softcapping":30.0,"head_dim":256,"hidden_act":"gelu_pytorch_tanh",
  "hidden_activation":"gelu_pytorch_tanh","hidden_size":2304,"intermediate_size":9216,
  "max_position_embeddings":8192,"model_type":"gemma2","num_attention_heads":8,"num_hidden_layers":26,
  "num_key_value_heads":4,"pad_token_id":0,"query_pre_attn_scalar":256,"rms_norm_eps":1e-06,
  "rope_theta":10000.0,"sliding_window":4096,"torch_dtype":"float32","vocab_size":256000})";

TEST(GemmaConfig, SparseGemma3WrapperGetsHfDefaults) {
  const ModelConfig c = parse_config(kGemma3_4b, "gemma-3-4b-it/config.json");
  EXPECT_EQ(c.model_type, "gemma3");
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.d_model, 2560);
  EXPECT_EQ(c.n_layers, 34);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.d_ff, 10240);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / 16.0f);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.attn_logit_softcap, 0.0);
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  // Global layers: rope_theta 1e6 with the linear scaling; local layers: 1e4, unscaled.
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  ASSERT_TRUE(c.rope_local.has_value());
  EXPECT_EQ(c.rope_local->type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope_local->theta, 1e4);
  // sliding_window_pattern 6: every 6th layer (5, 11, ...) is global.
  for (int64_t i = 0; i < c.n_layers; ++i)
    EXPECT_EQ(c.sliding_window[static_cast<size_t>(i)], (i + 1) % 6 == 0 ? 0 : 1024) << "layer " << i;
}

TEST(GemmaConfig, Gemma2DefaultsAndAlternatingLayers) {
  const ModelConfig c = parse_config(kGemma2_2b, "gemma-2-2b/config.json");
  EXPECT_DOUBLE_EQ(c.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(c.final_logit_softcap, 30.0);
  EXPECT_FALSE(c.rope_local.has_value());
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e4);
  for (int64_t i = 0; i < c.n_layers; ++i)
    EXPECT_EQ(c.sliding_window[static_cast<size_t>(i)], i % 2 == 0 ? 4096 : 0) << "layer " << i;
  // Soft-caps absent from a gemma2 config take HF's defaults; present as null they are off.
  const ModelConfig d = parse_config(R"({"model_type":"gemma2"})", "d");
  EXPECT_DOUBLE_EQ(d.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(d.final_logit_softcap, 30.0);
  EXPECT_EQ(d.vocab_size, 256000);
  const ModelConfig n =
      parse_config(R"({"model_type":"gemma2","attn_logit_softcapping":null,"final_logit_softcapping":null})", "n");
  EXPECT_EQ(n.attn_logit_softcap, 0.0);
  EXPECT_EQ(n.final_logit_softcap, 0.0);
}

TEST(GemmaConfig, Gemma3LocalRopeSpellingsAndErrors) {
  const ModelConfig legacy = parse_config(
      R"({"model_type":"gemma3_text","rope_theta":500000,"rope_local_base_freq":5000,"sliding_window_pattern":2})",
      "legacy");
  EXPECT_DOUBLE_EQ(legacy.rope.theta, 5e5);
  EXPECT_EQ(legacy.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(legacy.rope_local->theta, 5e3);
  EXPECT_EQ(legacy.sliding_window[0], 4096);
  EXPECT_EQ(legacy.sliding_window[1], 0);
  const ModelConfig nested = parse_config(R"({"model_type":"gemma3_text","rope_parameters":{
      "full_attention":{"rope_type":"linear","factor":2.0,"rope_theta":1000000.0},
      "sliding_attention":{"rope_type":"default","rope_theta":20000.0}}})",
                                          "nested");
  EXPECT_EQ(nested.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(nested.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(nested.rope_local->theta, 2e4);
  EXPECT_EQ(nested.rope_local->type, RopeType::kDefault);
  expect_error([] { parse_config(R"({"model_type":"gemma3_text","hidden_activation":"gelu"})", "x"); },
               {"x", "hidden_activation 'gelu'"});
  expect_error([] { parse_config(R"({"model_type":"gemma3_text","use_bidirectional_attention":true})", "x"); },
               {"x", "use_bidirectional_attention"});
}

TEST(GemmaConfig, EmbeddingNormalizerIsRoundedToTheTableDtype) {
  using arch::gemma_embed_scale;
  EXPECT_EQ(gemma_embed_scale(2304, DType::kBF16), 48.0f);  // exact
  EXPECT_EQ(gemma_embed_scale(2560, DType::kBF16), 50.5f);  // sqrt = 50.596...
  EXPECT_EQ(gemma_embed_scale(1152, DType::kBF16), 34.0f);  // sqrt = 33.941...
  EXPECT_EQ(gemma_embed_scale(3072, DType::kBF16), 55.5f);  // HF's own example (sqrt = 55.4256)
  EXPECT_EQ(gemma_embed_scale(2560, DType::kF32), static_cast<float>(std::sqrt(2560.0)));
  EXPECT_EQ(gemma_embed_scale(2560, DType::kF16), 50.59375f);
}

// ---- checkpoint name variants ----

// A tiny gemma3 language model: 3 layers (sliding, global, sliding), window 4, untied or tied head.
std::string text_json(bool tied) {
  return std::string(R"("vocab_size":97,"hidden_size":64,"intermediate_size":96,"num_hidden_layers":3,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"query_pre_attn_scalar":24,"sliding_window":4,
    "rms_norm_eps":1e-6,"final_logit_softcapping":15.0,
    "layer_types":["sliding_attention","full_attention","sliding_attention"],"tie_word_embeddings":)") +
         (tied ? "true" : "false");
}
std::string causal_config(bool tied) { return R"({"model_type":"gemma3_text",)" + text_json(tied) + "}"; }
std::string wrapper_config(bool tied, const std::string& quant = "") {
  return R"({"model_type":"gemma3","text_config":{"model_type":"gemma3_text",)" + text_json(tied) + "}" + quant +
         "}";
}

// Writes the synthetic weights of the plain (model.*) names under renamed keys; rename maps a plain name.
template <typename Rename>
void write_checkpoint(const ScratchDir& dir, const std::string& config, bool tied, Rename rename) {
  const ModelConfig plain = parse_config(causal_config(tied), "plain");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& s : expected_tensors(plain)) {
    owned.push_back(synthetic_tensor(s.name, s.shape, DType::kBF16, 23));
    list.emplace_back(rename(s.name), owned.back().tensor);
  }
  write_safetensors(dir.file("model.safetensors"), list);
  std::ofstream(dir.file("config.json")) << config;
}

std::vector<float> run_logits(Model& m, const std::vector<int32_t>& tokens) {
  return testutil::prefill_logits(m, tokens, 4);
}

const std::vector<int32_t> kTokens = {1, 17, 42, 96, 0, 5, 5, 63, 20, 11, 2, 33, 70, 8};

std::string strip_model(const std::string& name) { return name.substr(std::string("model.").size()); }

TEST(GemmaCheckpoint, NameVariantsGiveTheSameLogits) {
  for (bool tied : {false, true}) {
    ScratchDir plain_dir("bunsen_st"), hub_dir("bunsen_st"), hf5_dir("bunsen_st");
    write_checkpoint(plain_dir, causal_config(tied), tied, [](const std::string& n) { return n; });
    // Hub gemma-3 / mlx-vlm: language_model.model.* and language_model.lm_head.
    write_checkpoint(hub_dir, wrapper_config(tied), tied, [](const std::string& n) {
      return n == "lm_head.weight" ? "language_model.lm_head.weight" : "language_model.model." + strip_model(n);
    });
    // transformers 5.x Gemma3ForConditionalGeneration: model.language_model.* and lm_head.
    write_checkpoint(hf5_dir, wrapper_config(tied), tied, [](const std::string& n) {
      return n == "lm_head.weight" ? n : "model.language_model." + strip_model(n);
    });
    const std::vector<float> want = run_logits(*load_model(plain_dir.path()), kTokens);
    for (float v : want) ASSERT_TRUE(std::isfinite(v));
    for (float v : want) ASSERT_LE(std::fabs(v), 15.0f);  // the final soft-cap
    for (const ScratchDir* d : {&hub_dir, &hf5_dir}) {
      auto m = load_model(d->path());
      EXPECT_EQ(m->config().model_type, "gemma3");
      const std::vector<float> got = run_logits(*m, kTokens);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << d->path() << " tied " << tied;
    }
    // The manifest of the wrapper names the HF 5.x keys.
    const auto specs = expected_tensors(parse_config(wrapper_config(tied), "w"));
    EXPECT_EQ(specs.front().name, "model.language_model.embed_tokens.weight");
  }
}

TEST(GemmaCheckpoint, MissingEmbeddingNamesThePrefixesTried) {
  ScratchDir dir("bunsen_st");
  write_checkpoint(dir, causal_config(true), true, [](const std::string& n) { return "text." + n; });
  expect_error([&] { load_model(dir.path()); },
               {"model.embed_tokens.weight", "language_model.model.embed_tokens.weight",
                "model.language_model.embed_tokens.weight"});
}

TEST(GemmaCheckpoint, KvLayoutReportsEachLayersWindow) {
  ScratchDir dir("bunsen_st");
  write_checkpoint(dir, causal_config(true), true, [](const std::string& n) { return n; });
  auto m = load_model(dir.path());
  const auto layout = m->kv_layout();
  ASSERT_EQ(layout.size(), 3u);
  EXPECT_EQ(layout[0].sliding_window, 4);
  EXPECT_EQ(layout[1].sliding_window, 0);
  EXPECT_EQ(layout[2].sliding_window, 4);
  for (const auto& l : layout) {
    EXPECT_EQ(l.n_kv_heads, 2);
    EXPECT_EQ(l.head_dim, 16);
  }
}

// MLX affine codes of one [rows, cols] f32 weight (scales/biases rounded to bf16, as mlx-lm stores them for a
// bf16 model) and the f32 weight they dequantize to.
struct QuantModule {
  OwnedTensor packed, scales, biases, dequantized;
};
QuantModule quantize_module(const OwnedTensor& w, int64_t rows, int64_t cols, QuantSpec spec) {
  const int64_t groups = cols / spec.group_size;
  QuantModule q{OwnedTensor::make(DType::kU32, {rows, packed_cols(cols, spec.bits)}),
                OwnedTensor::make(DType::kBF16, {rows, groups}), OwnedTensor::make(DType::kBF16, {rows, groups}),
                OwnedTensor::make(DType::kF32, {rows, cols})};
  std::vector<float> sc(static_cast<size_t>(rows * groups)), bi(sc.size());
  quantize_affine(w.tensor.ptr<float>(), rows, cols, spec, q.packed.tensor.ptr<uint32_t>(), sc.data(), bi.data());
  for (size_t i = 0; i < sc.size(); ++i) {
    q.scales.tensor.ptr<uint16_t>()[i] = f32_to_bf16(sc[i]);
    q.biases.tensor.ptr<uint16_t>()[i] = f32_to_bf16(bi[i]);
    sc[i] = bf16_to_f32(q.scales.tensor.ptr<uint16_t>()[i]);
    bi[i] = bf16_to_f32(q.biases.tensor.ptr<uint16_t>()[i]);
  }
  dequantize_affine(q.packed.tensor.ptr<uint32_t>(), sc.data(), bi.data(), rows, cols, spec,
                    q.dequantized.tensor.ptr<float>());
  return q;
}

// An MLX 4-bit gemma3 wrapper checkpoint (language_model.model.* names, every Linear and the embedding
// quantized) gives the logits of the plain model built from the dequantized weights.
TEST(GemmaCheckpoint, Mlx4BitWrapperEqualsDequantizedModel) {
  const std::string quant = R"(,"quantization":{"group_size":32,"bits":4,"mode":"affine"})";
  const ModelConfig plain = parse_config(causal_config(true), "plain");
  ScratchDir qdir("bunsen_st");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> list;
  WeightStore reference;
  for (const auto& s : expected_tensors(plain)) {
    OwnedTensor t = synthetic_tensor(s.name, s.shape, DType::kF32, 29);
    const std::string renamed = "language_model.model." + strip_model(s.name);
    if (s.shape.size() != 2) {  // norms stay float
      owned.push_back(synthetic_tensor(s.name, s.shape, DType::kBF16, 29));
      list.emplace_back(renamed, owned.back().tensor);
      reference.add(s.name, std::move(t));
      continue;
    }
    QuantModule q = quantize_module(t, s.shape[0], s.shape[1], QuantSpec{4, 32});
    reference.add(s.name, std::move(q.dequantized));
    const std::string prefix = renamed.substr(0, renamed.size() - std::string(".weight").size());
    list.emplace_back(renamed, q.packed.tensor);
    list.emplace_back(prefix + ".scales", q.scales.tensor);
    list.emplace_back(prefix + ".biases", q.biases.tensor);
    for (OwnedTensor* o : {&q.packed, &q.scales, &q.biases}) owned.push_back(std::move(*o));
  }
  write_safetensors(qdir.file("model.safetensors"), list);
  std::ofstream(qdir.file("config.json")) << wrapper_config(true, quant);
  auto q = load_model(qdir.path());
  // The quantized embedding's normalizer is rounded to bf16 (mlx-lm); sqrt(64) = 8 is exact either way.
  auto f = create_model(plain, std::move(reference));
  EXPECT_LT(q->weight_bytes_per_token(), f->weight_bytes_per_token() / 3);
  const std::vector<float> lq = run_logits(*q, kTokens), lf = run_logits(*f, kTokens);
  ASSERT_EQ(lq.size(), lf.size());
  float scale = 0.0f, worst = 0.0f;
  for (size_t i = 0; i < lq.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lq[i]));
    scale = std::fmax(scale, std::fabs(lf[i]));
    worst = std::fmax(worst, std::fabs(lq[i] - lf[i]));
  }
  EXPECT_LE(worst, 1e-5f * scale);
}

}  // namespace
}  // namespace bunsen::model
