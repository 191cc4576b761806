// Fast CPU MoE ops. moe_route: moe_row.h's routing, threaded over tokens. moe_experts: the (token, slot)
// pairs are grouped by expert (stable counting sort), each used expert runs its gate/up/down projections
// once over its gathered tokens through cpu::linear / cpu::linear_q, and each token sums its top_k results
// in slot order. Not validating. Invariants: cpu::linear gives a row the same result whatever the number
// of rows (GEMV per row), and the final sum runs in slot order, so a token's output does not depend on the
// other tokens of the step (batch invariance); scratch is per calling thread and only grows.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe_row.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

// Step scratch of the calling thread: grows, never shrinks (no allocation in steady state).
struct MoeScratch {
  std::vector<float> xg, g, u, y;         // [pairs, d], [pairs, f], [pairs, f], [pairs, d]
  std::vector<int32_t> order, slot_of;    // sorted pair -> pair, pair -> sorted position
  std::vector<int64_t> offsets;           // [n_experts + 1]
  void grow(size_t pairs, size_t d, size_t f, size_t n_experts) {
    auto at_least = [](auto& v, size_t n) { if (v.size() < n) v.resize(n); };
    at_least(xg, pairs * d), at_least(g, pairs * f), at_least(u, pairs * f), at_least(y, pairs * d);
    at_least(order, pairs), at_least(slot_of, pairs), at_least(offsets, n_experts + 1);
  }
};

// out [m, rows] = in [m, cols] · W_eᵀ, m rows at contiguous f32 buffers.
void expert_linear(ThreadPool& pool, const ExpertWeights& w, int64_t e, float* out, float* in, int64_t m) {
  Tensor o = Tensor::view(out, DType::kF32, {m, w.rows});
  Tensor i = Tensor::view(in, DType::kF32, {m, w.cols});
  if (w.quantized())
    linear_q(pool, o, i, expert_quant(w, e), Tensor{});
  else
    linear(pool, o, i, expert_float(w, e), Tensor{});
}

// Stable counting sort of the pairs p = t * top_k + j by expert id.
void group_pairs(const Rows& ir, int64_t n_experts, MoeScratch& s) {
  const int64_t k = ir.n_cols, pairs = ir.n_rows * k;
  std::fill(s.offsets.begin(), s.offsets.begin() + n_experts + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) ++s.offsets[ir.row<int32_t>(p / k)[p % k] + 1];
  for (int64_t e = 0; e < n_experts; ++e) s.offsets[e + 1] += s.offsets[e];
  std::vector<int64_t>& next = s.offsets;  // filled front to back, then shifted back below
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = ir.row<int32_t>(p / k)[p % k];
    const int64_t pos = next[e]++;
    s.order[pos] = static_cast<int32_t>(p);
    s.slot_of[p] = static_cast<int32_t>(pos);
  }
  for (int64_t e = n_experts; e > 0; --e) next[e] = next[e - 1];  // next[e] is now the end of e
  next[0] = 0;
}

}  // namespace

void moe_route(ThreadPool& pool, Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p) {
  const Rows l = as_rows(logits), ir = as_rows(ids), wr = as_rows(weights);
  pool.parallel_for(l.n_rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(l.n_cols));
    for (int64_t t = b; t < e; ++t)
      moe_route_row(l.row<float>(t), l.n_cols, p, scores.data(), ir.row<int32_t>(t), wr.row<float>(t));
  });
}

void moe_experts(ThreadPool& pool, Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& ex) {
  static thread_local MoeScratch tls;
  MoeScratch& s = tls;  // the lambdas below run on pool threads: they must see this thread's scratch
  const Rows o = as_rows(out), xr = as_rows(x), ir = as_rows(ids), wr = as_rows(weights);
  const int64_t n = xr.n_rows, k = ir.n_cols, d = xr.n_cols, f = ex.gate.rows, n_experts = ex.gate.n_experts();
  const int64_t pairs = n * k;
  s.grow(static_cast<size_t>(pairs), static_cast<size_t>(d), static_cast<size_t>(f), static_cast<size_t>(n_experts));
  group_pairs(ir, n_experts, s);
  for (int64_t pos = 0; pos < pairs; ++pos)
    std::copy_n(xr.row<float>(s.order[pos] / k), d, s.xg.data() + pos * d);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t b = s.offsets[e], m = s.offsets[e + 1] - b;
    if (m == 0) continue;
    float *g = s.g.data() + b * f, *u = s.u.data() + b * f;
    expert_linear(pool, ex.gate, e, g, s.xg.data() + b * d, m);
    expert_linear(pool, ex.up, e, u, s.xg.data() + b * d, m);
    for (int64_t i = 0; i < m * f; ++i) g[i] = moe_act(ex.act, g[i], u[i]);
    expert_linear(pool, ex.down, e, s.y.data() + b * d, g, m);
  }
  pool.parallel_for(n, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* ot = o.row<float>(t);
      std::fill(ot, ot + d, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = wr.row<float>(t)[j];
        const float* y = s.y.data() + static_cast<int64_t>(s.slot_of[t * k + j]) * d;
        for (int64_t c = 0; c < d; ++c) ot[c] += w * y[c];
      }
    }
  });
}

}  // namespace bunsen::kernels::cpu
