// The mixture-of-experts block shared by the MoE families (qwen3_moe, gemma4 26B-A4B, qwen3_next):
// router linear [n_experts, d_model] -> kernels::moe_route (softmax|sigmoid, top-k, optional renorm and
// per-expert scale) -> kernels::moe_experts (gated FFN per chosen expert, weighted sum in top-k order).
// Not a decoder layer: norms, residuals, a dense MLP beside the experts and a shared expert's combination
// are the family's (a shared expert's weights can be loaded here with load_linear; its sigmoid gate is the
// caller's). Invariants: expert weights are never copied at load (kernels read them through per-expert
// address tables owned by MoeLayer, on the weights' device); routing never leaves the device; a
// RoutingOverride (tests only) acts on CPU models alone and costs nothing while none is installed.
#pragma once
#include <memory>
#include <span>
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
  int layer = -1;       // decoder layer index: the "layers.<i>" of load_moe's prefix (-1: the prefix names none)
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

// Forces the experts of chosen tokens on the CPU MoE path: the golden tests impose a device's routing on the
// CPU reference where the two chose differently at a near-tie, so that every later token is compared against
// the same computation. moe_forward on a CPU model, while one is installed on the calling thread
// (RoutingOverrideScope), asks choose() for every token after moe_route; forced experts are weighed from the
// same router logits exactly as moe_route weighs its own choice (kernels/moe_row.h: moe_score_row, then
// moe_weigh_row: softmax|sigmoid, norm_topk, routed scale, expert_scale). CUDA models never consult it.
// Tokens are numbered per MoE layer as RoutingTrace numbers them: the rows of each step, appended step after
// step (token t of layer L is the t-th row moe_forward routed at L since construction or rewind()).
// Installed per thread rather than passed in ForwardArgs: the families call moe_forward from their own blocks
// without the forward's arguments, and the CPU forward runs on its caller's thread.
class RoutingOverride {
 public:
  virtual ~RoutingOverride() = default;
  // `logits` [n_experts] the token's router logits; `ids` [top_k] the model's own choice (descending score).
  // Return true after writing the experts to use into `ids` (top_k distinct ids in [0, n_experts), any order:
  // moe_experts sums in that order); false keeps the model's choice untouched.
  virtual bool choose(int layer, int64_t token, std::span<const float> logits, std::span<int32_t> ids) = 0;

  // Called by moe_forward once per (MoE layer, step) with the step's n_tokens rows: numbers them, asks
  // choose(), validates and re-weighs the forced rows.   ids [n, top_k] i32, weights [n, top_k] f32, logits
  // [n, n_experts] f32, all on the CPU. Errors name the layer and token.
  void apply(int layer, Tensor ids, Tensor weights, const Tensor& logits, const kernels::MoeRouteParams& p);
  // Token numbering restarts at 0 at every layer (a new sequence from position 0).
  void rewind() { seen_.clear(); }

 private:
  std::vector<int64_t> seen_;    // [layer] tokens routed so far at that decoder layer
  std::vector<float> scores_;    // [n_experts] scratch
};

// Installs `o` for moe_forward calls on this thread until destruction (then restores the previous one).
class RoutingOverrideScope {
 public:
  explicit RoutingOverrideScope(RoutingOverride* o);
  ~RoutingOverrideScope();
  RoutingOverrideScope(const RoutingOverrideScope&) = delete;
  RoutingOverrideScope& operator=(const RoutingOverrideScope&) = delete;

 private:
  RoutingOverride* previous_;
};

// Hands one MoE layer's routing to `hook` (nothing when it is null): "router_logits" [n_tokens, n_experts] f32,
// then "router_ids" [n_tokens, top_k] i32 (the experts moe_forward used: its choice, descending score, or the
// ones a RoutingOverride forced), both for decoder
// layer `layer`. Call right after that layer's moe_forward, while `buf` still holds its routing. The names
// are read by RoutingTrace (routing_trace.h); other hooks ignore them.
inline void hook_routing(ActivationHook* hook, int layer, const MoeBuffers& buf) {
  if (!hook) return;
  hook->on("router_logits", layer, buf.logits);
  hook->on("router_ids", layer, buf.ids);
}

}  // namespace bunsen::model
