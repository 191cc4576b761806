// Internal to arch/qwen3_5*.cpp: the hybrid family's hyper-parameters (parsed from ModelConfig::hparams_json),
// its per-layer weight structs and the loader that resolves checkpoint quirks. Not a public API.
// Invariants after load_hybrid(): every Linear/Tensor has the shape the config implies; `linear[i]` layers
// hold a DeltaNet, the others a GatedAttention; norm_offset is what the zero-centred norms add to their weight.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/registry.h"
#include "model/weights.h"

namespace bunsen::model::arch::qwen3_5 {

struct HybridParams {
  std::vector<bool> linear;  // [n_layers]: gated DeltaNet (true) or gated full attention
  int64_t conv_kernel = 4;   // linear_conv_kernel_dim
  int64_t n_k = 0, n_v = 0;  // linear_num_key_heads, linear_num_value_heads
  int64_t dk = 0, dv = 0;    // linear_key_head_dim, linear_value_head_dim
  bool fused_in_proj = false;  // qwen3_next: in_proj_qkvz + in_proj_ba grouped per key head
  bool attention_bias = false;  // q/k/v/o biases of the full-attention layers
  // qwen3_next mixture of experts (n_experts 0: dense MLP everywhere)
  int64_t n_experts = 0, top_k = 0, d_expert = 0, d_shared = 0, sparse_step = 1;
  bool norm_topk = true;
  std::vector<int64_t> mlp_only_layers;

  int64_t key_dim() const { return n_k * dk; }
  int64_t value_dim() const { return n_v * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  bool moe_layer(int64_t i) const;
  MoeSpec moe_spec(int64_t d_model) const;
};

HybridParams parse_hybrid(const ModelConfig& cfg);

struct DeltaNet {
  Linear qkv;      // [conv_dim, d_model]: q (n_k * dk), k (n_k * dk), v (n_v * dv) rows
  Linear z;        // [n_v * dv, d_model]
  Linear b, a;     // [n_v, d_model]
  Linear out;      // [d_model, n_v * dv]
  Tensor conv_w;   // [conv_dim, conv_kernel] any float
  Tensor a_log;    // [n_v]
  Tensor dt_bias;  // [n_v]
  Tensor norm;     // [dv] (plain weight, not zero-centred)
};

struct GatedAttention {
  Linear q;  // [n_heads * 2 * head_dim, d_model]: per head, head_dim query rows then head_dim gate rows
  Linear k, v;  // [n_kv_heads * head_dim, d_model]
  Linear o;     // [d_model, n_heads * head_dim]
  Tensor q_norm, k_norm;  // [head_dim] zero-centred
};

struct Mlp {
  Linear gate, up, down;  // [f, d], [f, d], [d, f]
};

struct Layer {
  bool linear = false;
  DeltaNet dn;
  GatedAttention at;
  Tensor in_norm, post_norm;  // [d_model] zero-centred
  Mlp mlp;                    // dense MLP (or the shared expert of a MoE layer)
  std::shared_ptr<MoeLayer> moe;  // qwen3_next sparse layers: router + experts (model/moe.h)
  Linear shared_gate;             // [1, d_model] (MoE layers): sigmoid gate of the shared expert
};

// Weights of one checkpoint, with the buffers that own permuted copies (fused qwen3_next projections).
struct HybridWeights {
  std::string root;   // text model prefix: "model.", "model.language_model." or "language_model.model."
  Embedding embed;    // [vocab, d_model]
  Tensor final_norm;  // [d_model]
  Linear lm_head;     // [vocab, d_model]
  std::vector<Layer> layers;
  float norm_offset = 1.0f;  // 0 for mlx-lm-sanitised checkpoints (their norms are stored shifted)
  std::vector<std::shared_ptr<void>> owned;  // storage of weights rearranged at load
};

HybridWeights load_hybrid(const WeightStore& ws, const ModelConfig& cfg, const HybridParams& hp);
std::vector<TensorSpec> hybrid_tensors(const ModelConfig& cfg, const HybridParams& hp);

}  // namespace bunsen::model::arch::qwen3_5
