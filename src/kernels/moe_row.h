// Plain-C++ pieces of the MoE ops shared by ref/ and the baseline cpu/ files: one token's routing
// (scoring, top-k, renormalization, scaling), the expert activations, and per-expert views of an
// ExpertWeights address table. Not for *_avx2.cpp / *_avx512.cpp files (see float_io.h). Invariants: the
// top-k order is descending by score with ties to the lower expert index and NaN scores never chosen over
// a number (the rule the CUDA kernel reproduces); all routing math is f32.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/float_io.h"
#include "kernels/ops.h"

namespace bunsen::kernels {

// Upper bounds of the MoE ops (the CUDA routing kernel keeps a token's scores and picks in registers).
constexpr int64_t kMoeMaxExperts = 1024;
constexpr int64_t kMoeMaxTopK = 32;

// One token's expert scores: scoring(logits) [n_experts] into `scores`.
inline void moe_score_row(const float* logits, int64_t n_experts, const MoeRouteParams& p, float* scores) {
  if (p.scoring == MoeScoring::kSoftmax) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < n_experts; ++e) mx = std::fmax(mx, logits[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_experts; ++e) sum += scores[e] = std::exp(logits[e] - mx);
    for (int64_t e = 0; e < n_experts; ++e) scores[e] /= sum;
  } else {
    for (int64_t e = 0; e < n_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
}

// The routing weights [top_k] of the experts `ids` [top_k] from their `scores` (moe_score_row): the chosen
// scores, optionally renormalized over the k, scaled, times expert_scale[id]. moe_route_row's last step,
// also used by model/moe.cpp to weigh experts a caller forces (RoutingOverride) exactly as its own choice.
inline void moe_weigh_row(const float* scores, const int32_t* ids, const MoeRouteParams& p, float* weights) {
  float total = 0.0f;
  for (int j = 0; j < p.top_k; ++j) total += weights[j] = scores[ids[j]];
  for (int j = 0; j < p.top_k; ++j) {
    float w = p.norm_topk ? weights[j] / total : weights[j];
    w *= p.scale;
    if (!p.expert_scale.empty()) w *= load_f(p.expert_scale.data, p.expert_scale.dtype, ids[j]);
    weights[j] = w;
  }
}

// Routes one token. logits [n_experts] f32 -> ids [top_k], weights [top_k]. `scores` is caller scratch of
// n_experts floats.
inline void moe_route_row(const float* logits, int64_t n_experts, const MoeRouteParams& p, float* scores,
                          int32_t* ids, float* weights) {
  moe_score_row(logits, n_experts, p, scores);
  for (int j = 0; j < p.top_k; ++j) {
    int64_t best = -1;
    float best_key = -INFINITY;
    for (int64_t e = 0; e < n_experts; ++e) {
      if (std::isnan(scores[e]) && best >= 0) continue;
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (taken) continue;
      const float key = std::isnan(scores[e]) ? -INFINITY : scores[e];
      if (best < 0 || key > best_key) best = e, best_key = key;
    }
    ids[j] = static_cast<int32_t>(best);
  }
  moe_weigh_row(scores, ids, p, weights);
}

// act(g) * u, the gated activation of an expert FFN (the formulas the CUDA kernels use).
inline float moe_act(MoeActivation act, float g, float u) {
  if (act == MoeActivation::kSilu) return g / (1.0f + std::exp(-g)) * u;
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + std::tanh(inner)) * u;
}

// Expert e's float weight [rows, cols] (host address table).
inline Tensor expert_float(const ExpertWeights& w, int64_t e) {
  void* p = reinterpret_cast<void*>(static_cast<intptr_t>(w.ptrs.ptr<int64_t>()[e]));
  return Tensor::view(p, w.dtype, {w.rows, w.cols});
}

// Expert e's quantized weight (host address tables).
inline QuantWeight expert_quant(const ExpertWeights& w, int64_t e) {
  auto at = [e](const Tensor& t) { return reinterpret_cast<void*>(static_cast<intptr_t>(t.ptr<int64_t>()[e])); };
  QuantWeight q;
  q.packed = Tensor::view(at(w.ptrs), DType::kU32, {w.rows, w.cols * w.bits / 32});
  q.scales = Tensor::view(at(w.scale_ptrs), w.dtype, {w.rows, w.cols / w.group_size});
  q.biases = Tensor::view(at(w.bias_ptrs), w.dtype, {w.rows, w.cols / w.group_size});
  q.bits = w.bits;
  q.group_size = w.group_size;
  return q;
}

}  // namespace bunsen::kernels
