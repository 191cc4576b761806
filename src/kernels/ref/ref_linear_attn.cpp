// Reference linear-attention ops (see ref_linear_attn.h). Invariants: f32 math (double only for the
// rms_norm_gated sum of squares); the per-sequence state is read before and written after the
// sequence's tokens, in token order, exactly as the recurrent form in ops.h says.
#include "kernels/ref/ref_linear_attn.h"

#include <cmath>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20

// Element (t, h, i) of a [n, heads, dim] tensor with a contiguous last dim.
float at3(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  const char* p = static_cast<const char*>(t.data) +
                  (i0 * t.strides[0] + i1 * t.strides[1] + i2) * static_cast<int64_t>(dtype_size(t.dtype));
  return load_f(p, t.dtype, 0);
}

// l2-normalised copy of head (t, h) of q or k.
std::vector<float> l2_head(const Tensor& x, int64_t t, int64_t h) {
  const int64_t d = x.shape[2];
  std::vector<float> v(static_cast<size_t>(d));
  float ss = 0.0f;
  for (int64_t i = 0; i < d; ++i) {
    v[static_cast<size_t>(i)] = at3(x, t, h, i);
    ss += v[static_cast<size_t>(i)] * v[static_cast<size_t>(i)];
  }
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (float& e : v) e *= inv;
  return v;
}

}  // namespace

void causal_conv1d(Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta) {
  const Rows o = as_rows(out), xr = as_rows(x), wr = as_rows(w);
  const int64_t channels = xr.n_cols, kernel = wr.n_cols, hist = kernel - 1;
  const int32_t* starts = meta.seq_starts.ptr<int32_t>();
  const int32_t* slots = meta.state_slots.ptr<int32_t>();
  const int32_t* pos = meta.positions.ptr<int32_t>();
  for (int64_t s = 0; s < meta.state_slots.numel(); ++s) {
    const int64_t t0 = starts[s], t1 = starts[s + 1];
    if (t0 == t1) continue;
    if (slots[s] < 0) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t c = 0; c < channels; ++c) o.row<float>(t)[c] = 0.0f;
      continue;
    }
    float* st = state.ptr<float>() + slots[s] * state.strides[0];
    const bool fresh = pos[t0] == 0;
    for (int64_t c = 0; c < channels; ++c) {
      float* sc = st + c * hist;
      std::vector<float> xx(static_cast<size_t>(hist + t1 - t0));
      for (int64_t j = 0; j < hist; ++j) xx[static_cast<size_t>(j)] = fresh ? 0.0f : sc[j];
      for (int64_t t = t0; t < t1; ++t) xx[static_cast<size_t>(hist + t - t0)] = xr.row<float>(t)[c];
      for (int64_t t = t0; t < t1; ++t) {
        float acc = 0.0f;
        for (int64_t j = 0; j < kernel; ++j)
          acc += load_f(wr.row<char>(c), wr.dtype, j) * xx[static_cast<size_t>(t - t0 + j)];
        o.row<float>(t)[c] = silu(acc);
      }
      for (int64_t j = 0; j < hist; ++j) sc[j] = xx[xx.size() - static_cast<size_t>(hist) + static_cast<size_t>(j)];
    }
  }
}

void gated_delta_rule(Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta, float q_scale) {
  const int64_t n_k = in.q.shape[1], dk = in.q.shape[2], n_v = in.v.shape[1], dv = in.v.shape[2];
  const int64_t group = n_v / n_k;
  const Rows ar = as_rows(in.a), br = as_rows(in.b), o = as_rows(out.reshape({out.shape[0], n_v * dv}));
  const int32_t* starts = meta.seq_starts.ptr<int32_t>();
  const int32_t* slots = meta.state_slots.ptr<int32_t>();
  const int32_t* pos = meta.positions.ptr<int32_t>();
  for (int64_t s = 0; s < meta.state_slots.numel(); ++s) {
    const int64_t t0 = starts[s], t1 = starts[s + 1];
    for (int64_t h = 0; h < n_v; ++h) {
      if (slots[s] < 0) {
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t j = 0; j < dv; ++j) o.row<float>(t)[h * dv + j] = 0.0f;
        continue;
      }
      if (t0 == t1) continue;
      float* S = state.ptr<float>() + slots[s] * state.strides[0] + h * state.strides[1];  // [dk, dv]
      if (pos[t0] == 0)
        for (int64_t e = 0; e < dk * dv; ++e) S[e] = 0.0f;
      const float A = -std::exp(load_f(in.a_log.data, in.a_log.dtype, h));
      const float bias = load_f(in.dt_bias.data, in.dt_bias.dtype, h);
      for (int64_t t = t0; t < t1; ++t) {
        std::vector<float> q = l2_head(in.q, t, h / group), k = l2_head(in.k, t, h / group);
        const float decay = std::exp(A * softplus(ar.row<float>(t)[h] + bias));
        const float beta = sigmoid(br.row<float>(t)[h]);
        for (int64_t e = 0; e < dk * dv; ++e) S[e] *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          float mem = 0.0f;
          for (int64_t i = 0; i < dk; ++i) mem += S[i * dv + j] * k[static_cast<size_t>(i)];
          const float delta = (at3(in.v, t, h, j) - mem) * beta;
          for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[static_cast<size_t>(i)] * delta;
        }
        for (int64_t j = 0; j < dv; ++j) {
          float acc = 0.0f;
          for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * q[static_cast<size_t>(i)] * q_scale;
          o.row<float>(t)[h * dv + j] = acc;
        }
      }
    }
  }
}

void rms_norm_gated(Tensor out, Tensor x, Tensor z, Tensor w, float eps) {
  const Rows o = as_rows(out), xr = as_rows(x), zr = as_rows(z);
  for (int64_t i = 0; i < xr.n_rows; ++i) {
    const float* xi = xr.row<float>(i);
    double ss = 0.0;
    for (int64_t j = 0; j < xr.n_cols; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(xr.n_cols)) + eps);
    for (int64_t j = 0; j < xr.n_cols; ++j)
      o.row<float>(i)[j] = xi[j] * inv * load_f(w.data, w.dtype, j) * silu(zr.row<float>(i)[j]);
  }
}

void sigmoid_mul(Tensor out, Tensor x, Tensor gate) {
  const Rows o = as_rows(out), xr = as_rows(x), g = as_rows(gate);
  for (int64_t i = 0; i < xr.n_rows; ++i)
    for (int64_t j = 0; j < xr.n_cols; ++j)
      o.row<float>(i)[j] = xr.row<float>(i)[j] * sigmoid(g.row<float>(i)[g.n_cols == 1 ? 0 : j]);
}

}  // namespace bunsen::kernels::ref
