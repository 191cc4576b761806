// Reference MoE ops: routing row by row (moe_row.h) and the routed experts token by token, pair by pair,
// through ref::linear / ref::linear_q on one-row views. Not fast and not threaded. Invariant: a token's
// output is the sum over j = 0..top_k-1 of weights[t, j] * y_{ids[t, j]}(x[t]), accumulated in that order.
#include <vector>

#include "kernels/moe_row.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {
namespace {

// out_row [1, rows] = in_row [1, cols] · W_eᵀ.
void expert_linear(const ExpertWeights& w, int64_t e, float* out_row, float* in_row) {
  Tensor out = Tensor::view(out_row, DType::kF32, {1, w.rows});
  Tensor in = Tensor::view(in_row, DType::kF32, {1, w.cols});
  if (w.quantized())
    linear_q(out, in, expert_quant(w, e), Tensor{});
  else
    linear(out, in, expert_float(w, e), Tensor{});
}

}  // namespace

void moe_route(Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p) {
  const Rows l = as_rows(logits), ir = as_rows(ids), wr = as_rows(weights);
  std::vector<float> scores(static_cast<size_t>(l.n_cols));
  for (int64_t t = 0; t < l.n_rows; ++t)
    moe_route_row(l.row<float>(t), l.n_cols, p, scores.data(), ir.row<int32_t>(t), wr.row<float>(t));
}

void moe_experts(Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& ex) {
  const Rows o = as_rows(out), xr = as_rows(x), ir = as_rows(ids), wr = as_rows(weights);
  const int64_t d = xr.n_cols, f = ex.gate.rows;
  std::vector<float> xi(static_cast<size_t>(d)), g(static_cast<size_t>(f)), u(static_cast<size_t>(f)),
      y(static_cast<size_t>(d));
  for (int64_t t = 0; t < xr.n_rows; ++t) {
    float* ot = o.row<float>(t);
    for (int64_t c = 0; c < d; ++c) ot[c] = 0.0f;
    for (int64_t c = 0; c < d; ++c) xi[static_cast<size_t>(c)] = xr.row<float>(t)[c];
    for (int64_t j = 0; j < ir.n_cols; ++j) {
      const int64_t e = ir.row<int32_t>(t)[j];
      expert_linear(ex.gate, e, g.data(), xi.data());
      expert_linear(ex.up, e, u.data(), xi.data());
      for (int64_t c = 0; c < f; ++c) g[static_cast<size_t>(c)] = moe_act(ex.act, g[c], u[c]);
      expert_linear(ex.down, e, y.data(), g.data());
      const float w = wr.row<float>(t)[j];
      for (int64_t c = 0; c < d; ++c) ot[c] += w * y[static_cast<size_t>(c)];
    }
  }
}

}  // namespace bunsen::kernels::ref
