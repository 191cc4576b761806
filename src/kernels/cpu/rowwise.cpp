// Fast row-wise ops: embedding, rms_norm, add_scaled, scale, silu_mul, gelu_tanh_mul, softcap, softmax, argmax,
// gather_rows.
// Threaded over rows; inner loops are plain code for the compiler to vectorise (baseline ISA). Not
// validating. Invariants: same math as ref/ in f32 (rms_norm's sum of squares uses 8 f32 partial sums
// instead of a double); argmax keeps ref's tie and NaN rules.
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

// Rows per task so that one task touches at least ~kMinElems elements.
constexpr int64_t kMinElems = 1 << 14;

template <typename F>
void for_rows(ThreadPool& pool, int64_t n_rows, int64_t n_cols, F&& fn) {
  const int64_t grain = n_cols >= kMinElems ? 1 : kMinElems / (n_cols > 0 ? n_cols : 1);
  pool.parallel_for(n_rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

float sum_squares(const float* x, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[i + j] * x[i + j];
  for (; i < n; ++i) s[0] += x[i] * x[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace

void embedding(ThreadPool& pool, Tensor out, Tensor table, Tensor ids, float scale) {
  const Rows o = as_rows(out), t = as_rows(table);
  const int32_t* id = ids.ptr<int32_t>();
  for_rows(pool, o.n_rows, o.n_cols, [&](int64_t i) {
    float* dst = o.row<float>(i);
    widen_row(t.row<char>(id[i]), t.dtype, o.n_cols, dst);
    if (scale != 1.0f)
      for (int64_t j = 0; j < o.n_cols; ++j) dst[j] *= scale;
  });
}

void rms_norm(ThreadPool& pool, Tensor out, Tensor x, Tensor w, float eps, float w_offset) {
  const Rows o = as_rows(out), xr = as_rows(x);
  const int64_t d = xr.n_cols;
  const int64_t grain = d >= kMinElems ? 1 : kMinElems / (d > 0 ? d : 1);
  pool.parallel_for(xr.n_rows, grain, [&](int64_t b, int64_t e) {
    float* wf = thread_scratch(kScratchTable, static_cast<size_t>(d));
    widen_row(w.data, w.dtype, d, wf);
    for (int64_t j = 0; j < d; ++j) wf[j] += w_offset;
    for (int64_t i = b; i < e; ++i) {
      const float* xi = xr.row<float>(i);
      float* oi = o.row<float>(i);
      const float inv = 1.0f / std::sqrt(sum_squares(xi, d) / static_cast<float>(d) + eps);
      for (int64_t j = 0; j < d; ++j) oi[j] = xi[j] * inv * wf[j];
    }
  });
}

void add_scaled(ThreadPool& pool, Tensor x, Tensor y, float scale) {
  const Rows xr = as_rows(x), yr = as_rows(y);
  for_rows(pool, xr.n_rows, xr.n_cols, [&](int64_t i) {
    float* xi = xr.row<float>(i);
    const float* yi = yr.row<float>(i);
    for (int64_t j = 0; j < xr.n_cols; ++j) xi[j] += yi[j] * scale;
  });
}

void scale(ThreadPool& pool, Tensor x, float s) {
  const Rows xr = as_rows(x);
  for_rows(pool, xr.n_rows, xr.n_cols, [&](int64_t i) {
    float* xi = xr.row<float>(i);
    for (int64_t j = 0; j < xr.n_cols; ++j) xi[j] *= s;
  });
}

void silu_mul(ThreadPool& pool, Tensor out, Tensor gate, Tensor up) {
  const Rows o = as_rows(out), g = as_rows(gate), u = as_rows(up);
  for_rows(pool, o.n_rows, o.n_cols, [&](int64_t i) {
    float* oi = o.row<float>(i);
    const float* gi = g.row<float>(i);
    const float* ui = u.row<float>(i);
    for (int64_t j = 0; j < o.n_cols; ++j) oi[j] = gi[j] / (1.0f + std::exp(-gi[j])) * ui[j];
  });
}

void gelu_tanh_mul(ThreadPool& pool, Tensor out, Tensor gate, Tensor up) {
  const Rows o = as_rows(out), g = as_rows(gate), u = as_rows(up);
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;  // PyTorch's constants
  for_rows(pool, o.n_rows, o.n_cols, [&](int64_t i) {
    float* oi = o.row<float>(i);
    const float* gi = g.row<float>(i);
    const float* ui = u.row<float>(i);
    for (int64_t j = 0; j < o.n_cols; ++j) {
      const float x = gi[j], inner = beta * (x + kappa * (x * x * x));
      oi[j] = 0.5f * x * (1.0f + std::tanh(inner)) * ui[j];
    }
  });
}

void softcap(ThreadPool& pool, Tensor x, float cap) {
  const Rows xr = as_rows(x);
  for_rows(pool, xr.n_rows, xr.n_cols, [&](int64_t i) {
    float* r = xr.row<float>(i);
    for (int64_t j = 0; j < xr.n_cols; ++j) r[j] = cap * std::tanh(r[j] / cap);
  });
}

void softmax(ThreadPool& pool, Tensor x) {
  const Rows xr = as_rows(x);
  for_rows(pool, xr.n_rows, xr.n_cols, [&](int64_t i) {
    float* r = xr.row<float>(i);
    float mx = -INFINITY;
    for (int64_t j = 0; j < xr.n_cols; ++j) mx = r[j] > mx ? r[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < xr.n_cols; ++j) {
      r[j] = std::exp(r[j] - mx);
      sum += r[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < xr.n_cols; ++j) r[j] *= inv;
  });
}

void argmax(ThreadPool& pool, Tensor out, Tensor x) {
  const Rows xr = as_rows(x);
  int32_t* o = out.ptr<int32_t>();
  for_rows(pool, xr.n_rows, xr.n_cols, [&](int64_t i) {
    const float* r = xr.row<float>(i);
    int64_t best = 0;
    while (best < xr.n_cols && std::isnan(r[best])) ++best;
    if (best == xr.n_cols) {  // all NaN
      o[i] = -1;
      return;
    }
    float bv = r[best];
    for (int64_t j = best + 1; j < xr.n_cols; ++j)
      if (r[j] > bv) {  // false for NaN: NaN never wins
        bv = r[j];
        best = j;
      }
    o[i] = static_cast<int32_t>(best);
  });
}

void gather_rows(ThreadPool& pool, Tensor out, Tensor x, Tensor rows) {
  const Rows o = as_rows(out), xr = as_rows(x);
  const int32_t* idx = rows.ptr<int32_t>();
  const size_t row_bytes = static_cast<size_t>(o.n_cols) * sizeof(float);
  for_rows(pool, o.n_rows, o.n_cols,
           [&](int64_t i) { std::memcpy(o.row<float>(i), xr.row<float>(idx[i]), row_bytes); });
}

}  // namespace bunsen::kernels::cpu
