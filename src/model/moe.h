// The mixture-of-experts block shared by the MoE families (qwen3_moe, gemma4 26B-A4B, qwen3_next):
// router linear [n_experts, d_model] -> kernels::moe_route (softmax|sigmoid, top-k, optional renorm and
// per-expert scale) -> kernels::moe_experts (gated FFN per chosen expert, weighted sum in top-k order).
// Not a decoder layer: norms, residuals, a dense MLP beside the experts and a shared expert's combination
// are the family's (a shared expert's weights can be loaded here with load_linear; its sigmoid gate is the
// caller's). Invariants: expert weights are never copied at load (kernels read them through per-expert
// address tables owned by MoeLayer, on the weights' device); routing never leaves the device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"

namespace bunsen::model {

struct MoeSpec {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t d_model = 0;
  int64_t d_expert = 0;  // moe_intermediate_size
  kernels::MoeScoring scoring = kernels::MoeScoring::kSoftmax;
  bool norm_topk = false;  // norm_topk_prob
  float routed_scale = 1.0f;
  kernels::MoeActivation act = kernels::MoeActivation::kSilu;
};

// Where one MoE block's tensors are, relative to its prefix P (e.g. "model.layers.3.mlp"). The experts are
// found in whichever of these layouts the checkpoint holds (resolved at load, no copy):
//   P.<experts>.gate_up_proj [E, 2*d_expert, d] (gate rows first) + P.<experts>.down_proj [E, d, d_expert]
//       (transformers 5.x in-memory names; the golden fixtures' layout)
//   P.<experts>.<e>.{gate,up,down}_proj.weight [d_expert, d] / [d, d_expert]   (Hub per-expert checkpoints)
//   P.<mlx>.{gate,up,down}_proj.weight [E, d_expert, d] / [E, d, d_expert], float or MLX-quantized with
//       .scales/.biases (mlx-lm SwitchGLU)
// The router is P.<router>.weight [E, d] (quantized when the config and checkpoint say so).
struct MoeNames {
  std::string router = "gate";
  std::string experts = "experts";
  std::string mlx = "switch_mlp";
};

struct MoeLayer {
  MoeSpec spec;
  Linear router;        // [n_experts, d_model]
  Tensor expert_scale;  // [n_experts] or empty (Gemma 4 per_expert_scale; set by the caller)
  kernels::MoeExperts experts;
  std::shared_ptr<kernels::DeviceMemory> tables;  // owns the address tables of `experts`
  size_t expert_bytes = 0;                        // weight bytes of one expert (gate + up + down)

  // Weight bytes one token reads: router + top_k experts (+ expert_scale).
  size_t active_bytes() const;
  // Weight bytes of the whole block (every expert).
  size_t total_bytes() const;
};

// Loads the block under `prefix` (names above). Errors name the prefix and the layouts looked for.
MoeLayer load_moe(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix, const MoeSpec& spec,
                  const MoeNames& names = {});

// The transformers 5.x names and shapes of the block (expected_tensors manifests).
void append_moe_tensors(std::vector<TensorSpec>& out, const std::string& prefix, const MoeSpec& spec,
                        const MoeNames& names = {});

// Per-step buffers of moe_forward, from the workspace.
struct MoeBuffers {
  Tensor logits;   // [n_tokens, n_experts] f32
  Tensor ids;      // [n_tokens, top_k] i32
  Tensor weights;  // [n_tokens, top_k] f32
};
// Their sizes, for Model::workspace_bytes (append to the family's list).
void append_moe_workspace(std::vector<WorkspaceSpec>& out, const MoeSpec& spec, int64_t n_tokens);
MoeBuffers alloc_moe_buffers(Arena& ws, const MoeSpec& spec, int64_t n_tokens);

// out = sum over the top-k experts of weight * expert(x), routed on router_x (x when empty; Gemma 4 routes
// on another normalization of the residual).   out, x [n_tokens, d_model] (f32 on the CPU, f32|bf16 on
// CUDA); router_x [n_tokens, d_model] like x. Overwrites out.
void moe_forward(kernels::Context& ctx, const MoeLayer& l, Tensor out, Tensor x, const MoeBuffers& buf,
                 Tensor router_x = {});

// Hands one MoE layer's routing to `hook` (nothing when it is null): "router_logits" [n_tokens, n_experts] f32,
// then "router_ids" [n_tokens, top_k] i32 (the experts moe_forward chose, descending score), both for decoder
// layer `layer`. Call right after that layer's moe_forward, while `buf` still holds its routing. The names
// are read by RoutingTrace (routing_trace.h); other hooks ignore them.
inline void hook_routing(ActivationHook* hook, int layer, const MoeBuffers& buf) {
  if (!hook) return;
  hook->on("router_logits", layer, buf.logits);
  hook->on("router_ids", layer, buf.ids);
}

}  // namespace bunsen::model
