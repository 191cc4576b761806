// Gemma 4 text decoder (gemma4_text, and the text part of the gemma4 multimodal wrapper): the layer plan
// read from config.json (per-layer head_dim / KV heads, sliding vs full, KV-shared layers, K=V layers,
// per-layer-type RoPE, per-layer input embeddings, MoE) and the family's factory and tensor manifest.
// Not the vision/audio towers. Invariants after gemma4_params(): layers has n_layers entries; a KV-shared
// layer's kv_source is an earlier, non-shared layer of the same kind (same head_dim, KV heads, window).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/registry.h"

namespace bunsen::model::arch {

// RoPE of one layer kind. "default": every pair rotates (dim = head_dim); "proportional" (Gemma 4 global
// layers): the first floor(partial * head_dim / 2) frequencies theta^(-2i/head_dim), the rest 0 (pass
// through), with rotate_half over the whole head_dim.
struct Gemma4Rope {
  bool proportional = false;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;  // inv_freq is divided by it
};

struct Gemma4Layer {
  bool sliding = false;
  int window = 0;  // sliding layers: keys with q_pos - k_pos < window are visible
  int64_t head_dim = 0;
  int64_t n_kv_heads = 0;
  int kv_source = -1;   // >= 0: KV-shared layer that attends over that layer's cache (no k/v weights)
  bool k_eq_v = false;  // no v_proj: v = rms_norm(k_proj(x)) without weight
  int64_t d_ff = 0;     // dense MLP width (doubled on KV-shared layers with use_double_wide_mlp)
};

struct Gemma4Params {
  int64_t ple_dim = 0;    // hidden_size_per_layer_input (0 = no per-layer input embeddings)
  int64_t ple_vocab = 0;  // vocab_size_per_layer_input
  int64_t n_kv_shared = 0;
  bool moe = false;  // enable_moe_block: router + experts beside the dense MLP in every layer
  int64_t n_experts = 0, top_k = 0, moe_d_ff = 0;
  float final_softcap = 0.0f;  // 0 = off
  bool attention_bias = false;  // q/k/v/o biases
  Gemma4Rope rope_sliding, rope_full;
  int64_t n_heads = 0;              // num_attention_heads (every layer)
  std::vector<Gemma4Layer> layers;  // [n_layers]
  int64_t max_q_dim() const;        // max over layers of n_heads * head_dim
};

// The layer plan of a gemma4 / gemma4_text config (cfg.hparams_json). Errors: Error("config", ...).
Gemma4Params gemma4_params(const ModelConfig& cfg);
// RoPE inverse frequencies of a layer kind for head_dim, as transformers computes them ([head_dim / 2]).
std::vector<float> gemma4_inv_freq(const Gemma4Rope& r, int64_t head_dim);

// The model's kv_layout() from the config alone: per-layer head_dim / KV heads / window, KV-shared layers
// pointing at their source (shares_kv_with).
std::vector<KvLayerSpec> gemma4_kv_layout(const ModelConfig& cfg);
std::vector<KvLayerSpec> gemma4_kv_layout(const Gemma4Params& p);

std::unique_ptr<Model> create_gemma4(const ModelConfig& cfg, WeightStore weights);
// HF 5.x state-dict names: Gemma4ForCausalLM ("model.*") for gemma4_text, the language model of
// Gemma4ForConditionalGeneration ("model.language_model.*") for gemma4.
std::vector<TensorSpec> gemma4_tensors(const ModelConfig& cfg);

}  // namespace bunsen::model::arch
