// Gemma 4 on the CPU beyond the golden fixtures: the layer plan from both config spellings (5.17's
// per_layer_config and the Hub's global_head_dim / num_global_key_value_heads), the wrapper's nested
// text_config, proportional RoPE frequencies, the KV layout (shared layers point at their source), and the
// checkpoint layouts real checkpoints use: the same weights saved as Gemma4ForCausalLM ("model."), as the
// multimodal wrapper ("model.language_model."), as mlx-vlm does ("language_model.model." with SwitchGLU experts
// and the untied head inside the language model), with per-expert tensors, and with 4-bit MLX experts all
// give the reference logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/arch/gemma4.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model_test_util.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::expect_error;

// Every switch at once: PLE, KV sharing, K=V global layers with their own head_dim, double-wide MLP, MoE.
std::string text_json(bool tied, const std::string& shapes) {
  return std::string(R"("vocab_size":97,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":4,
    "num_attention_heads":2,"num_key_value_heads":2,"head_dim":16,"attention_k_eq_v":true,"sliding_window":4,
    "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
    "num_kv_shared_layers":2,"hidden_size_per_layer_input":8,"vocab_size_per_layer_input":97,
    "use_double_wide_mlp":true,"enable_moe_block":true,"num_experts":4,"top_k_experts":2,
    "moe_intermediate_size":32,"final_logit_softcapping":10.0,"rms_norm_eps":1e-6,"tie_word_embeddings":)") +
         (tied ? "true," : "false,") + shapes;
}
constexpr const char* kGlobalKeys = R"("global_head_dim":32,"num_global_key_value_heads":1)";
constexpr const char* kPerLayer = R"("per_layer_config":{"1":{"head_dim":32,"num_key_value_heads":1},
    "3":{"head_dim":32,"num_key_value_heads":1}})";

std::string causal_lm_json(bool tied, const char* shapes = kGlobalKeys) {
  return R"({"model_type":"gemma4_text",)" + text_json(tied, shapes) + "}";
}
std::string wrapper_json(bool tied, const std::string& extra = "") {
  return R"({"model_type":"gemma4","tie_word_embeddings":)" + std::string(tied ? "true" : "false") + extra +
         R"(,"text_config":{"model_type":"gemma4_text",)" + text_json(tied, kGlobalKeys) + "}}";
}

TEST(Gemma4Params, LayerPlanFromEitherConfigSpelling) {
  for (const char* shapes : {kGlobalKeys, kPerLayer}) {
    const arch::Gemma4Params p = arch::gemma4_params(parse_config(causal_lm_json(true, shapes), "t"));
    ASSERT_EQ(p.layers.size(), 4u);
    const int source[] = {-1, -1, 0, 1};
    const int64_t head_dim[] = {16, 32, 16, 32}, kv_heads[] = {2, 1, 2, 1}, d_ff[] = {48, 48, 96, 96};
    for (size_t i = 0; i < 4; ++i) {
      const arch::Gemma4Layer& l = p.layers[i];
      EXPECT_EQ(l.kv_source, source[i]) << i;
      EXPECT_EQ(l.head_dim, head_dim[i]) << i;
      EXPECT_EQ(l.n_kv_heads, kv_heads[i]) << i;
      EXPECT_EQ(l.d_ff, d_ff[i]) << i;
      EXPECT_EQ(l.sliding, i % 2 == 0) << i;
      EXPECT_EQ(l.window, i % 2 == 0 ? 4 : 0) << i;
      EXPECT_EQ(l.k_eq_v, i % 2 == 1) << i;  // only global layers use K=V
    }
    EXPECT_EQ(p.ple_dim, 8);
    EXPECT_TRUE(p.moe);
    EXPECT_EQ(p.top_k, 2);
    EXPECT_FLOAT_EQ(p.final_softcap, 10.0f);
    EXPECT_TRUE(p.rope_full.proportional);
    EXPECT_DOUBLE_EQ(p.rope_full.partial_rotary_factor, 0.25);  // HF's default full-attention RoPE
    EXPECT_DOUBLE_EQ(p.rope_full.theta, 1e6);
    EXPECT_FALSE(p.rope_sliding.proportional);
  }
}

TEST(Gemma4Params, GlobalKvHeadsNeedKEqV) {
  // HF applies num_global_key_value_heads only when attention_k_eq_v is set.
  std::string j = causal_lm_json(true);
  j.replace(j.find(R"("attention_k_eq_v":true)"), 23, R"("attention_k_eq_v":false)");
  const arch::Gemma4Params p = arch::gemma4_params(parse_config(j, "t"));
  EXPECT_EQ(p.layers[1].head_dim, 32);
  EXPECT_EQ(p.layers[1].n_kv_heads, 2);
  EXPECT_FALSE(p.layers[1].k_eq_v);
}

TEST(Gemma4Params, WrapperReadsTextConfigAndNamesItsLanguageModel) {
  const ModelConfig c = parse_config(wrapper_json(true), "w");
  EXPECT_EQ(c.model_type, "gemma4");
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_TRUE(c.tie_word_embeddings);
  const arch::Gemma4Params p = arch::gemma4_params(c);
  EXPECT_EQ(p.layers[3].kv_source, 1);
  for (const TensorSpec& s : expected_tensors(c))
    EXPECT_EQ(s.name.rfind("model.language_model.", 0), 0u) << s.name;
}

TEST(Gemma4Params, ProportionalRopeRotatesAQuarterOfTheFrequencies) {
  arch::Gemma4Rope r;
  r.proportional = true;
  r.theta = 1e6;
  r.partial_rotary_factor = 0.25;
  const std::vector<float> inv = arch::gemma4_inv_freq(r, 32);
  ASSERT_EQ(inv.size(), 16u);
  for (size_t i = 0; i < inv.size(); ++i) {
    // floor(0.25 * 32 / 2) = 4 rotated pairs with exponents 2i / head_dim, the rest pass through.
    const double want = i < 4 ? std::pow(1e6, -2.0 * static_cast<double>(i) / 32.0) : 0.0;
    EXPECT_NEAR(inv[i], want, 1e-6 * std::max(want, 1e-30)) << i;
  }
  arch::Gemma4Rope d;  // default: every pair, dim = head_dim
  d.theta = 1e4;
  const std::vector<float> dinv = arch::gemma4_inv_freq(d, 16);
  EXPECT_NEAR(dinv[7], std::pow(1e4, -14.0 / 16.0), 1e-9);
}

TEST(Gemma4Params, BadConfigsFailNamingTheProblem) {
  std::string j = causal_lm_json(true);
  j.replace(j.find(R"("num_kv_shared_layers":2)"), 24, R"("num_kv_shared_layers":4)");
  expect_error([&] { arch::gemma4_params(parse_config(j, "t")); }, {"num_kv_shared_layers"});
  std::string r = causal_lm_json(true);
  r.insert(r.size() - 1, R"(,"rope_parameters":{"full_attention":{"rope_type":"yarn","factor":2.0}})");
  expect_error([&] { arch::gemma4_params(parse_config(r, "t")); }, {"yarn"});
}

using Tensors = std::map<std::string, OwnedTensor>;

OwnedTensor copy_f32(const Tensor& t) {
  OwnedTensor c = OwnedTensor::make(DType::kF32, std::span<const int64_t>(t.shape, static_cast<size_t>(t.ndim)));
  std::memcpy(c.tensor.data, t.data, t.nbytes());
  return c;
}

// The reference checkpoint: HF 5.x Gemma4ForCausalLM names, f32 synthetic weights.
Tensors reference(const ModelConfig& c) {
  Tensors out;
  for (const TensorSpec& s : expected_tensors(c)) out.emplace(s.name, synthetic_tensor(s.name, s.shape, DType::kF32, 5));
  return out;
}

// Rows [r0, r0 + rows) of every expert of a stacked [E, R, C] tensor, as [E, rows, C].
OwnedTensor expert_rows(const Tensor& t, int64_t r0, int64_t rows) {
  const int64_t e = t.shape[0], r = t.shape[1], c = t.shape[2];
  OwnedTensor out = OwnedTensor::make(DType::kF32, {e, rows, c});
  for (int64_t i = 0; i < e; ++i)
    std::memcpy(out.tensor.ptr<float>() + i * rows * c, t.ptr<float>() + (i * r + r0) * c,
                static_cast<size_t>(rows * c) * sizeof(float));
  return out;
}

enum class Experts { kStacked, kSwitchGlu, kPerExpert };

// `ref` renamed to prefix `pre` (for "model."), with the experts in `layout` and the untied head at `head`.
Tensors relayout(const Tensors& ref, const std::string& pre, Experts layout, const std::string& head) {
  Tensors out;
  for (const auto& [name, t] : ref) {
    std::string n = name.rfind("model.", 0) == 0 ? pre + name.substr(6) : name;
    if (name == "lm_head.weight") n = head;
    const bool gu = n.ends_with(".experts.gate_up_proj"), down = n.ends_with(".experts.down_proj");
    if (layout == Experts::kStacked || (!gu && !down)) {
      out.emplace(n, copy_f32(t.tensor));
      continue;
    }
    const std::string base = n.substr(0, n.rfind(".experts.") + 9);  // "...layers.i.experts."
    const int64_t f = gu ? t.tensor.shape[1] / 2 : t.tensor.shape[2];
    std::vector<std::pair<std::string, OwnedTensor>> parts;
    if (gu) {
      parts.emplace_back("gate_proj", expert_rows(t.tensor, 0, f));
      parts.emplace_back("up_proj", expert_rows(t.tensor, f, f));
    } else {
      parts.emplace_back("down_proj", expert_rows(t.tensor, 0, t.tensor.shape[1]));
    }
    for (auto& [proj, all] : parts) {
      if (layout == Experts::kSwitchGlu) {
        out.emplace(base + "switch_glu." + proj + ".weight", std::move(all));
        continue;
      }
      const int64_t e = all.tensor.shape[0], r = all.tensor.shape[1], c = all.tensor.shape[2];
      for (int64_t i = 0; i < e; ++i) {
        OwnedTensor one = OwnedTensor::make(DType::kF32, {r, c});
        std::memcpy(one.tensor.data, all.tensor.ptr<float>() + i * r * c, static_cast<size_t>(r * c) * sizeof(float));
        out.emplace(base + std::to_string(i) + "." + proj + ".weight", std::move(one));
      }
    }
  }
  return out;
}

std::unique_ptr<Model> save_and_load(const ScratchDir& dir, const std::string& config, const Tensors& t) {
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& [name, v] : t) list.emplace_back(name, v.tensor);
  write_safetensors(dir.file("model.safetensors"), list);
  std::ofstream(dir.file("config.json")) << config;
  return load_model(dir.path());
}

std::vector<float> run_logits(Model& m, const std::vector<int32_t>& tokens) {
  return testutil::prefill_logits(m, tokens, 8);
}

const std::vector<int32_t> kPrompt = {3, 17, 42, 5, 96, 0, 11, 64, 23, 8, 77, 31};  // longer than the window

TEST(Gemma4Checkpoints, EveryLayoutGivesTheReferenceLogits) {
  for (const bool tied : {true, false}) {
    const ModelConfig c = parse_config(causal_lm_json(tied), "t");
    const Tensors ref = reference(c);
    ScratchDir ref_dir("bunsen_st");
    auto m = save_and_load(ref_dir, causal_lm_json(tied), ref);
    const std::vector<KvLayerSpec> kv = m->kv_layout();
    ASSERT_EQ(kv.size(), 4u);
    EXPECT_EQ(kv[2].shares_kv_with, 0);
    EXPECT_EQ(kv[3].shares_kv_with, 1);
    EXPECT_EQ(kv[1].head_dim, 32);
    const std::vector<float> want = run_logits(*m, kPrompt);
    struct Variant {
      std::string config, prefix, head;
      Experts experts;
    };
    const std::vector<Variant> variants = {
        {wrapper_json(tied), "model.language_model.", "lm_head.weight", Experts::kStacked},
        {wrapper_json(tied), "language_model.model.", "language_model.lm_head.weight", Experts::kSwitchGlu},
        {causal_lm_json(tied), "model.", "lm_head.weight", Experts::kPerExpert},
    };
    for (const Variant& v : variants) {
      ScratchDir dir("bunsen_st");
      auto mv = save_and_load(dir, v.config, relayout(ref, v.prefix, v.experts, v.head));
      EXPECT_EQ(run_logits(*mv, kPrompt), want) << v.prefix << " tied=" << tied;
    }
  }
}

// mlx-vlm's 4-bit experts (u32 codes, bf16 scales/biases per SwitchGLU projection) give the logits of the
// float model built from the dequantized expert weights.
TEST(Gemma4Checkpoints, MlxQuantizedExpertsMatchTheirDequantizedWeights) {
  const ModelConfig c = parse_config(causal_lm_json(true), "t");
  const QuantSpec spec{4, 32};
  Tensors mlx = relayout(reference(c), "language_model.model.", Experts::kSwitchGlu, "");
  Tensors deq;  // the same model, experts dequantized, in mlx-vlm layout (float)
  std::vector<std::string> names;
  for (const auto& [name, t] : mlx) names.push_back(name);
  for (const std::string& name : names) {
    OwnedTensor& t = mlx.at(name);
    if (name.find(".switch_glu.") == std::string::npos) {
      deq.emplace(name, copy_f32(t.tensor));
      continue;
    }
    const int64_t e = t.tensor.shape[0], r = t.tensor.shape[1], cols = t.tensor.shape[2], g = cols / spec.group_size;
    OwnedTensor packed = OwnedTensor::make(DType::kU32, {e, r, packed_cols(cols, spec.bits)});
    std::vector<float> sc(static_cast<size_t>(e * r * g)), bi(sc.size());
    quantize_affine(t.tensor.ptr<float>(), e * r, cols, spec, packed.tensor.ptr<uint32_t>(), sc.data(), bi.data());
    OwnedTensor s16 = OwnedTensor::make(DType::kBF16, {e, r, g}), b16 = OwnedTensor::make(DType::kBF16, {e, r, g});
    for (size_t i = 0; i < sc.size(); ++i) {
      s16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(sc[i]);
      b16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(bi[i]);
      sc[i] = bf16_to_f32(s16.tensor.ptr<uint16_t>()[i]);
      bi[i] = bf16_to_f32(b16.tensor.ptr<uint16_t>()[i]);
    }
    OwnedTensor d = OwnedTensor::make(DType::kF32, {e, r, cols});
    dequantize_affine(packed.tensor.ptr<uint32_t>(), sc.data(), bi.data(), e * r, cols, spec, d.tensor.ptr<float>());
    deq.emplace(name, std::move(d));
    const std::string prefix = name.substr(0, name.size() - 7);  // strip ".weight"
    t = std::move(packed);
    mlx.emplace(prefix + ".scales", std::move(s16));
    mlx.emplace(prefix + ".biases", std::move(b16));
  }
  ScratchDir qdir("bunsen_st"), fdir("bunsen_st");
  auto q = save_and_load(qdir, wrapper_json(true, R"(,"quantization":{"group_size":32,"bits":4,"mode":"affine"})"), mlx);
  auto f = save_and_load(fdir, wrapper_json(true), deq);
  const std::vector<float> got = run_logits(*q, kPrompt), want = run_logits(*f, kPrompt);
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LE(max_diff, 1e-4 * max_ref);
}

TEST(Gemma4Checkpoints, MissingTextModelIsAnErrorNamingThePrefixes) {
  const ModelConfig c = parse_config(causal_lm_json(true), "t");
  Tensors t = relayout(reference(c), "text.", Experts::kStacked, "lm_head.weight");
  ScratchDir dir("bunsen_st");
  expect_error([&] { save_and_load(dir, causal_lm_json(true), t); }, {"embed_tokens", "model.language_model."});
}

}  // namespace
}  // namespace bunsen::model
