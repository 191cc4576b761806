// ModelConfig: config.json (+ nested text_config) and generation_config.json turned into typed
// hyper-parameters. Not weights (weights.h) and not an architecture (arch/). Invariants after
// load_config(): n_heads % n_kv_heads == 0; per-layer vectors have n_layers entries; every field a family
// needs is present or an Error("config", ...) names the missing key.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/quant.h"

namespace bunsen::model {

enum class RopeType { kDefault, kLinear, kDynamic, kLlama3, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  double partial_rotary_factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // 0 = not given
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;
};

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<bool> do_sample;
};

// The `quantization` (or `quantization_config`) block of an MLX checkpoint's config.json: mode "affine",
// a default bits/group_size, and per-module overrides keyed by module path (OptiQ mixed precision).
struct QuantizationConfig {
  bool enabled = false;  // the block is present
  QuantSpec spec;        // default for every quantized module
  // module path ("model.layers.0.mlp.down_proj") -> its spec; nullopt = `false` (kept in float)
  std::map<std::string, std::optional<QuantSpec>> overrides;
};

struct ModelConfig {
  std::string model_type;  // as written in config.json (e.g. "llama", "qwen3")
  int64_t vocab_size = 0;
  int64_t d_model = 0;  // hidden_size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t d_ff = 0;  // intermediate_size
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for llama's attention_bias) biases
  bool o_proj_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;           // qwen3: RMSNorm over head_dim on q and k
  bool fused_qkv = false;         // phi3: qkv_proj
  bool fused_gate_up = false;     // phi3: gate_up_proj
  RopeConfig rope;
  std::vector<int> sliding_window;  // [n_layers]; 0 = full attention
  std::vector<bool> use_rope;       // [n_layers]; false = NoPE layer (smollm3)
  // granite multipliers (1 = off)
  double embedding_multiplier = 1.0;
  double residual_multiplier = 1.0;
  std::optional<double> attention_multiplier;  // replaces 1/sqrt(head_dim) when set
  double logits_scaling = 1.0;                 // logits are divided by this
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  DType torch_dtype = DType::kBF16;
  GenerationDefaults generation;
  QuantizationConfig quantization;
  // The JSON object the fields above were read from (text_config for multimodal wrappers, with the
  // wrapper's shared keys merged in), serialized: arch/ files parse their family-specific keys from it.
  std::string hparams_json;
  // ---- gemma2 / gemma3 (issue 9; parse_gemma() in config.cpp) ----
  double query_pre_attn_scalar = 0;     // > 0: attention scale = query_pre_attn_scalar^-0.5
  double attn_logit_softcap = 0;        // 0 = off; else attention scores = cap * tanh(scores / cap)
  double final_logit_softcap = 0;       // 0 = off; else logits = cap * tanh(logits / cap)
  std::optional<RopeConfig> rope_local;  // RoPE of the sliding-window layers when it differs from `rope`

  float attention_scale() const;
  // The spec module `path` is quantized with (its override, else the default), nullopt when the config
  // quantizes nothing or the override is `false`. Whether a module with a spec is actually quantized is
  // decided at load as mlx-lm does: its `<path>.scales` tensor exists (or its weight is u32).
  std::optional<QuantSpec> quant_spec(const std::string& path) const;
  int64_t rotary_dim() const;
};

// Reads DIR/config.json (and DIR/generation_config.json when present).
ModelConfig load_config(const std::string& dir);
// Parses config.json text; `source` names it in error messages.
ModelConfig parse_config(const std::string& json_text, const std::string& source);
// Applies generation_config.json text on top of `cfg` (eos ids, sampling defaults).
void apply_generation_config(ModelConfig& cfg, const std::string& json_text, const std::string& source);

// Inverse frequencies and cos/sin scaling for `cfg.rope` (all scaling variants), as HF computes them.
// seq_len matters only for "dynamic" (the longest position the step reaches + 1).
struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  int rotary_dim = 0;
};
RopeTable compute_rope(const ModelConfig& cfg, int64_t seq_len = 0);

}  // namespace bunsen::model
