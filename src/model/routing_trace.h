// The routing of every MoE layer during forward, recorded through the ActivationHook names that moe.h's
// hook_routing emits: per MoE layer and per token (appended step after step, in row order), the experts
// chosen and the normalised routing margin (routing_margin below). Not a checker: the golden tests decide
// what a small margin means. Invariants: margins are >= 0; device tensors are copied to the host
// on the Context given (required for a CUDA model; the copy synchronizes, so trace eager steps only).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "model/model.h"

namespace bunsen::model {

// How close one token's top-k selection is to choosing differently: (l_k - l_{k+1}) / scale, where l are
// the token's router logits [n_experts], l_k the smallest logit among the chosen `ids` [top_k], l_{k+1} the
// largest among the others, and scale the population standard deviation sd(l) of the token's own logits when
// `scale` is 0, else the given scale (RoutingTrace passes its layer's: the root mean square of sd(l) over
// the layer's tokens).
// Why logits and why that scale: every scoring moe_route supports (softmax, sigmoid; expert_scale applies after
// the choice) is strictly increasing in the logit, so the logits rank the experts exactly as the selection does,
// and the router is linear (l = W x), so an error δx of relative size ε in its input moves each logit by
// about ε·|w_e|·|x|/sqrt(d) for the random-direction errors of low-precision arithmetic. The router's input is
// RMS-normalised, so |x| and with it that noise is about the same for every token of a layer: the layer's RMS
// of sd(l) estimates |w_e|·|x|/sqrt(d), and the gap divided by it is compared against ε directly, whatever the
// layer's logit scale, router norm, softmax temperature or expert count. A token's own sd(l) is a poor
// estimate with few experts (4 samples in the qwen3_next fixture: a token whose logits happen to be close
// together looked 3x safer than it was: position 75, layer 3, gap 0.014 against ~0.03 of bf16 noise per
// logit). Probabilities would not do: their gaps shrink with the softmax's saturation while the choice's
// sensitivity does not.
// 0 when the scale is 0 or any logit involved is not finite; never negative (ties and a device's own rounding
// are clamped to 0); +infinity when top_k = n_experts (no other choice exists).
double routing_margin(const float* logits, int64_t n_experts, const int32_t* ids, int64_t top_k, double scale = 0.0);

// How far the router logits [n_experts] of one token are from choosing `b` [top_k] instead of `a` [top_k]
// (either order): 0 when they are the same set, else the spread (max - min) of the logits of the experts in
// exactly one of the two sets, divided by `scale` (the token's own sd when 0). When `a` is the token's own
// top-k the spread is how far the logits must move for `b` to win, and it is >= routing_margin(a): a device
// that swaps the k-th expert for the (k+1)-th gets the margin, one that picks an expert far below the cut gets
// the larger gap. 0 for an exact tie; +infinity when the scale is 0 or a logit involved is not finite (never
// "ambiguous").
double routing_swap_gap(const float* logits, int64_t n_experts, const int32_t* a, const int32_t* b, int64_t top_k,
                        double scale = 0.0);

class RoutingTrace : public ActivationHook {
 public:
  struct Layer {
    int layer = -1;             // decoder layer index
    int64_t top_k = 0;
    std::vector<float> margin;  // [n_tokens] routing_margin of each token at the layer's scale (all tokens so far)
    std::vector<int32_t> ids;   // [n_tokens, top_k] the chosen experts, as moe_route ordered them
    int64_t n_experts = 0;
    std::vector<float> logits;  // [n_tokens, n_experts] the router logits
    double scale = 0.0;         // the layer's logit scale: RMS over its tokens of each token's logit sd
    int64_t n_tokens() const { return static_cast<int64_t>(margin.size()); }
  };

  // `ctx` copies device tensors to the host (may be null for a CPU model).
  explicit RoutingTrace(kernels::Context* ctx = nullptr) : ctx_(ctx) {}
  void on(std::string_view name, int layer, const Tensor& t) override;

  // MoE layers in the order first seen (decoder layer order).
  const std::vector<Layer>& layers() const { return layers_; }
  // Smallest margin over the MoE layers at token `token` (+infinity when no layer recorded it).
  double min_margin(int64_t token) const;
  void clear() { layers_.clear(); }

 private:
  Layer& layer_entry(int layer);
  // The rows of a 2-D tensor (f32 or i32, any device) packed on the host: [t.dim(0) * t.dim(1)] elements.
  template <typename T>
  std::vector<T> host_rows(const Tensor& t);

  kernels::Context* ctx_ = nullptr;
  int pending_layer_ = -1;
  int64_t pending_experts_ = 0;
  std::vector<float> pending_logits_;  // [n_tokens, n_experts] of pending_layer_'s "router_logits"
  std::vector<Layer> layers_;
};

}  // namespace bunsen::model
