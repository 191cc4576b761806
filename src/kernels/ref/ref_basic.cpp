// Reference row-wise ops: embedding, rms_norm, add_scaled, scale, silu_mul, gelu_tanh_mul, softcap, softmax,
// argmax, gather_rows.
// Not fast: one element at a time, single-threaded. Invariants: f32 math except rms_norm's sum of
// squares (double); argmax returns the first maximum and ranks NaN below every number (-1 for a row
// that is all NaN, so callers can tell a broken row from a real token 0).
#include <cmath>

#include "kernels/float_io.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {

void embedding(Tensor out, Tensor table, Tensor ids, float scale) {
  Rows o = as_rows(out), t = as_rows(table);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < o.n_rows; ++i)
    for (int64_t j = 0; j < o.n_cols; ++j)
      o.row<float>(i)[j] = load_f(t.row<char>(id[i]), t.dtype, j) * scale;
}

void rms_norm(Tensor out, Tensor x, Tensor w, float eps, float w_offset) {
  Rows o = as_rows(out), xr = as_rows(x);
  for (int64_t i = 0; i < xr.n_rows; ++i) {
    const float* xi = xr.row<float>(i);
    double ss = 0.0;
    for (int64_t j = 0; j < xr.n_cols; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(xr.n_cols)) + eps);
    float* oi = o.row<float>(i);
    for (int64_t j = 0; j < xr.n_cols; ++j) oi[j] = xi[j] * inv * (load_f(w.data, w.dtype, j) + w_offset);
  }
}

void add_scaled(Tensor x, Tensor y, float scale) {
  Rows xr = as_rows(x), yr = as_rows(y);
  for (int64_t i = 0; i < xr.n_rows; ++i)
    for (int64_t j = 0; j < xr.n_cols; ++j) xr.row<float>(i)[j] += yr.row<float>(i)[j] * scale;
}

void scale(Tensor x, float s) {
  Rows xr = as_rows(x);
  for (int64_t i = 0; i < xr.n_rows; ++i)
    for (int64_t j = 0; j < xr.n_cols; ++j) xr.row<float>(i)[j] *= s;
}

void silu_mul(Tensor out, Tensor gate, Tensor up) {
  Rows o = as_rows(out), g = as_rows(gate), u = as_rows(up);
  for (int64_t i = 0; i < o.n_rows; ++i)
    for (int64_t j = 0; j < o.n_cols; ++j) {
      float gv = g.row<float>(i)[j];
      o.row<float>(i)[j] = gv / (1.0f + std::exp(-gv)) * u.row<float>(i)[j];
    }
}

void gelu_tanh_mul(Tensor out, Tensor gate, Tensor up) {
  Rows o = as_rows(out), g = as_rows(gate), u = as_rows(up);
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
  for (int64_t i = 0; i < o.n_rows; ++i)
    for (int64_t j = 0; j < o.n_cols; ++j) {
      const float x = g.row<float>(i)[j];
      const float gelu = 0.5f * x * (1.0f + std::tanh(beta * (x + kappa * (x * x * x))));
      o.row<float>(i)[j] = gelu * u.row<float>(i)[j];
    }
}

void softcap(Tensor x, float cap) {
  Rows xr = as_rows(x);
  for (int64_t i = 0; i < xr.n_rows; ++i)
    for (int64_t j = 0; j < xr.n_cols; ++j) xr.row<float>(i)[j] = cap * std::tanh(xr.row<float>(i)[j] / cap);
}

void softmax(Tensor x) {
  Rows xr = as_rows(x);
  for (int64_t i = 0; i < xr.n_rows; ++i) {
    float* r = xr.row<float>(i);
    float mx = -INFINITY;
    for (int64_t j = 0; j < xr.n_cols; ++j) mx = std::fmax(mx, r[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < xr.n_cols; ++j) {
      r[j] = std::exp(r[j] - mx);
      sum += r[j];
    }
    for (int64_t j = 0; j < xr.n_cols; ++j) r[j] /= sum;
  }
}

void argmax(Tensor out, Tensor x) {
  Rows xr = as_rows(x);
  for (int64_t i = 0; i < xr.n_rows; ++i) {
    const float* r = xr.row<float>(i);
    int64_t best = -1;
    for (int64_t j = 0; j < xr.n_cols; ++j) {
      if (std::isnan(r[j])) continue;
      if (best < 0 || r[j] > r[best]) best = j;
    }
    out.ptr<int32_t>()[i * out.strides[0]] = static_cast<int32_t>(best);  // -1: every entry is NaN
  }
}

void gather_rows(Tensor out, Tensor x, Tensor rows) {
  Rows o = as_rows(out), xr = as_rows(x);
  for (int64_t i = 0; i < o.n_rows; ++i) {
    const float* src = xr.row<float>(rows.ptr<int32_t>()[i]);
    float* dst = o.row<float>(i);
    for (int64_t j = 0; j < o.n_cols; ++j) dst[j] = src[j];
  }
}

}  // namespace bunsen::kernels::ref
