// Gemma 4 weights as the forward pass uses them, loaded once from any of the checkpoint layouts the family
// ships in: "model.*" (Gemma4ForCausalLM), "model.language_model.*" (Gemma4ForConditionalGeneration, HF 5.x
// Hub checkpoints), "language_model.model.*" (mlx-vlm conversions); tied or separate lm_head; stacked,
// per-expert or MLX SwitchGLU experts (model/moe.h). Not the forward pass (gemma4.cpp).
// Invariants: every tensor lives on the store's device; KV-shared layers hold no k/v weights; K=V layers
// hold no v weights; inv_freq is host memory (RopeParams takes it from the host).
#pragma once
#include <string>
#include <vector>

#include "kernels/device.h"
#include "model/arch/gemma4.h"
#include "model/layers.h"
#include "model/moe.h"

namespace bunsen::model::arch {

struct Gemma4LayerWeights {
  Tensor in_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm;  // [d_model]
  Tensor q_norm;                   // [head_dim]
  Tensor k_norm;                   // [head_dim]; empty on KV-shared layers
  Linear q, o;                     // [n_heads * head_dim, d_model], [d_model, n_heads * head_dim]
  Linear k, v;                     // [n_kv_heads * head_dim, d_model]; empty when shared (v: also when K=V)
  Linear gate, up, down;           // [d_ff, d], [d_ff, d], [d, d_ff]
  Linear ple_gate, ple_proj;       // [ple_dim, d], [d, ple_dim] (PLE only)
  Tensor post_ple_norm;            // [d_model] (PLE only)
  MoeLayer moe;                    // MoE only
  Tensor router_scale;             // [d_model] (MoE only)
  Tensor pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2;  // [d_model] (MoE only)
  float layer_scalar = 1.0f;
  std::vector<float> inv_freq;  // [head_dim / 2] host: this layer kind's RoPE frequencies
};

struct Gemma4Weights {
  std::string prefix;            // "model.", "model.language_model." or "language_model.model."
  Embedding embed;               // [vocab_size, d_model]
  Embedding embed_ple;           // [ple_vocab, n_layers * ple_dim] (PLE only)
  Linear ple_model_proj;         // [n_layers * ple_dim, d_model] (PLE only)
  Tensor ple_proj_norm;          // [ple_dim] (PLE only)
  Tensor final_norm;             // [d_model]
  Linear lm_head;                // [vocab_size, d_model] (the embedding when tied)
  Tensor ones;                   // [max head_dim] f32 of 1: the weightless v-norm
  kernels::DeviceMemory ones_memory;  // CUDA: backs `ones`
  OwnedTensor ones_host;              // CPU: backs `ones`
  std::vector<Gemma4LayerWeights> layers;
};

// The prefix the checkpoint keeps the text model under (see above); Error("weights") when none matches.
std::string gemma4_prefix(const WeightStore& ws, const ModelConfig& cfg);
Gemma4Weights load_gemma4_weights(const WeightStore& ws, const ModelConfig& cfg, const Gemma4Params& p);
size_t gemma4_weight_bytes_per_token(const Gemma4Weights& w);

}  // namespace bunsen::model::arch
