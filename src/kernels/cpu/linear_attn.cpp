// CPU linear-attention ops (see linear_attn_ops.h): the gated delta rule per (sequence, v-head), recurrent
// for short runs and chunked (WY form) for long ones, with the state row-major [k_head_dim, v_head_dim] so
// every inner loop runs over contiguous v columns; the causal conv per (sequence, channel block); row-wise
// gated norm and sigmoid gate.
// Invariants: no heap allocation per call in steady state (thread-local scratch, the attention slot); a sequence with slot < 0
// gets zero output and its (absent) state is never touched.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/linear_attn_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// dst[0:d] = head (t, h) of x widened to f32 and l2-normalised, times `scale`.
void load_l2_head(const Tensor& x, int64_t t, int64_t h, float scale, float* dst) {
  const int64_t d = x.shape[2];
  const char* p = static_cast<const char*>(x.data) +
                  (t * x.strides[0] + h * x.strides[1]) * static_cast<int64_t>(dtype_size(x.dtype));
  widen_row(p, x.dtype, d, dst);
  float ss = 0.0f;
  for (int64_t i = 0; i < d; ++i) ss += dst[i] * dst[i];
  const float inv = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) dst[i] *= inv;
}

struct DeltaJob {
  const DeltaRuleInputs* in;
  float* out;  // [n_tokens, n_v * dv]
  int64_t n_k, dk, n_v, dv;
  float q_scale;
};

// One (sequence, v-head): tokens [t0, t1) through the state S [dk, dv] (zeroed first when fresh).
void delta_head(const DeltaJob& j, float* S, bool fresh, int64_t h, int64_t t0, int64_t t1) {
  const int64_t dk = j.dk, dv = j.dv, kh = h / (j.n_v / j.n_k);
  if (fresh) std::memset(S, 0, static_cast<size_t>(dk * dv) * sizeof(float));
  float* buf = thread_scratch(kScratchAttention, static_cast<size_t>(2 * dk + 2 * dv));
  float *q = buf, *k = buf + dk, *v = buf + 2 * dk, *mem = buf + 2 * dk + dv;
  const float A = -std::exp(load_f(j.in->a_log.data, j.in->a_log.dtype, h));
  const float bias = load_f(j.in->dt_bias.data, j.in->dt_bias.dtype, h);
  const Rows ar = as_rows(j.in->a), br = as_rows(j.in->b);
  const Tensor& vt = j.in->v;
  for (int64_t t = t0; t < t1; ++t) {
    load_l2_head(j.in->q, t, kh, j.q_scale, q);
    load_l2_head(j.in->k, t, kh, 1.0f, k);
    widen_row(static_cast<const char*>(vt.data) +
                  (t * vt.strides[0] + h * vt.strides[1]) * static_cast<int64_t>(dtype_size(vt.dtype)),
              vt.dtype, dv, v);
    const float decay = std::exp(A * softplus(ar.row<float>(t)[h] + bias));
    const float beta = sigmoid(br.row<float>(t)[h]);
    for (int64_t c = 0; c < dv; ++c) mem[c] = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {  // decay S and read S^T k
      float* row = S + i * dv;
      const float ki = k[i];
      for (int64_t c = 0; c < dv; ++c) {
        row[c] *= decay;
        mem[c] += row[c] * ki;
      }
    }
    for (int64_t c = 0; c < dv; ++c) v[c] = (v[c] - mem[c]) * beta;  // v becomes delta
    float* o = j.out + t * j.n_v * dv + h * dv;
    for (int64_t c = 0; c < dv; ++c) o[c] = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {  // S += k delta^T, out = S^T q
      float* row = S + i * dv;
      const float ki = k[i], qi = q[i];
      for (int64_t c = 0; c < dv; ++c) {
        row[c] += ki * v[c];
        o[c] += row[c] * qi;
      }
    }
  }
}

// dst[0:d] += sign * sum_{j < n} w[j] * rows[j * d : j * d + d], four rows per pass over dst.
void mul_add_rows(float* dst, const float* w, const float* rows, int64_t n, int64_t d, float sign) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float w0 = sign * w[j], w1 = sign * w[j + 1], w2 = sign * w[j + 2], w3 = sign * w[j + 3];
    const float *r0 = rows + j * d, *r1 = r0 + d, *r2 = r1 + d, *r3 = r2 + d;
    for (int64_t c = 0; c < d; ++c) dst[c] += (w0 * r0[c] + w1 * r1[c]) + (w2 * r2[c] + w3 * r3[c]);
  }
  for (; j < n; ++j) {
    const float wj = sign * w[j];
    const float* rj = rows + j * d;
    for (int64_t c = 0; c < d; ++c) dst[c] += wj * rj[c];
  }
}

// delta_head in the chunked (WY) form, kDeltaRuleChunk tokens at a time. In a chunk of L tokens from the
// state S0, with gamma_r = g_0 + ... + g_r (cumulative log-decay inside the chunk, <= 0):
//   u_r = beta_r (v_r - e^{gamma_r} S0^T k_r) - sum_{j<r} A_rj u_j,  A_rj = beta_r e^{gamma_r - gamma_j} k_r.k_j
//   o_r = e^{gamma_r} S0^T q_r + sum_{j<=r} e^{gamma_r - gamma_j} (q_r.k_j) u_j
//   S   = e^{gamma_{L-1}} S0 + sum_r e^{gamma_{L-1} - gamma_r} k_r u_r^T
// u_r is the recurrent form's delta at token r (unrolling S_r). Every exponent is gamma_r - gamma_j with
// j <= r, so <= 0; gamma is summed in double so those differences keep f32 precision when |gamma| is large.
void delta_head_chunked(const DeltaJob& j, float* S, bool fresh, int64_t h, int64_t t0, int64_t t1) {
  constexpr int64_t C = kDeltaRuleChunk;
  const int64_t dk = j.dk, dv = j.dv, kh = h / (j.n_v / j.n_k);
  if (fresh) std::memset(S, 0, static_cast<size_t>(dk * dv) * sizeof(float));
  const int64_t floats = 5 * C + 3 * C * dk + 3 * C * dv + 2 * C * C;
  float* buf = thread_scratch(kScratchAttention, static_cast<size_t>(floats));
  double* gam = reinterpret_cast<double*>(buf);  // [C] (the scratch is 64-byte aligned)
  float* Q = buf + 2 * C;                        // [C, dk] l2-normalised, scaled
  float* K = Q + C * dk;                         // [C, dk] l2-normalised
  float* Kt = K + C * dk;                        // [dk, C] K transposed (the products below vectorise over j)
  float* U = Kt + C * dk;                        // [C, dv] v, then the deltas u
  float* KS = U + C * dv;                        // [C, dv] S0^T k_r
  float* QS = KS + C * dv;                       // [C, dv] S0^T q_r
  float* Am = QS + C * dv;                       // [C, C] A_rj (j < r)
  float* Pm = Am + C * C;                        // [C, C] e^{gamma_r - gamma_j} q_r.k_j (j <= r)
  float *beta = Pm + C * C, *eg = beta + C, *tail = eg + C;  // [C] each
  const float A = -std::exp(load_f(j.in->a_log.data, j.in->a_log.dtype, h));
  const float bias = load_f(j.in->dt_bias.data, j.in->dt_bias.dtype, h);
  const Rows ar = as_rows(j.in->a), br = as_rows(j.in->b);
  const Tensor& vt = j.in->v;
  for (int64_t c0 = t0; c0 < t1; c0 += C) {
    const int64_t L = std::min(C, t1 - c0);
    double cum = 0.0;
    for (int64_t r = 0; r < L; ++r) {
      const int64_t t = c0 + r;
      load_l2_head(j.in->q, t, kh, j.q_scale, Q + r * dk);
      load_l2_head(j.in->k, t, kh, 1.0f, K + r * dk);
      widen_row(static_cast<const char*>(vt.data) +
                    (t * vt.strides[0] + h * vt.strides[1]) * static_cast<int64_t>(dtype_size(vt.dtype)),
                vt.dtype, dv, U + r * dv);
      cum += static_cast<double>(A * softplus(ar.row<float>(t)[h] + bias));
      gam[r] = cum;
      beta[r] = sigmoid(br.row<float>(t)[h]);
    }
    for (int64_t r = 0; r < L; ++r) {
      eg[r] = std::exp(static_cast<float>(gam[r]));
      tail[r] = std::exp(static_cast<float>(gam[L - 1] - gam[r]));
      for (int64_t i = 0; i < dk; ++i) Kt[i * C + r] = K[r * dk + i];
    }
    for (int64_t r = 0; r < L; ++r) {  // S0^T k_r and S0^T q_r (4 state rows per pass over the columns)
      float *ks = KS + r * dv, *qs = QS + r * dv;
      const float *kr = K + r * dk, *qr = Q + r * dk;
      std::fill(ks, ks + dv, 0.0f);
      std::fill(qs, qs + dv, 0.0f);
      int64_t i = 0;
      for (; i + 4 <= dk; i += 4) {
        const float *s0 = S + i * dv, *s1 = s0 + dv, *s2 = s1 + dv, *s3 = s2 + dv;
        const float k0 = kr[i], k1 = kr[i + 1], k2 = kr[i + 2], k3 = kr[i + 3];  // locals: ks may alias kr
        const float q0 = qr[i], q1 = qr[i + 1], q2 = qr[i + 2], q3 = qr[i + 3];
        for (int64_t c = 0; c < dv; ++c) {
          ks[c] += (k0 * s0[c] + k1 * s1[c]) + (k2 * s2[c] + k3 * s3[c]);
          qs[c] += (q0 * s0[c] + q1 * s1[c]) + (q2 * s2[c] + q3 * s3[c]);
        }
      }
      for (; i < dk; ++i) {
        const float ki = kr[i], qi = qr[i];
        for (int64_t c = 0; c < dv; ++c) {
          ks[c] += ki * S[i * dv + c];
          qs[c] += qi * S[i * dv + c];
        }
      }
    }
    for (int64_t r = 0; r < L; ++r) {  // the decayed key-key and query-key products, j <= r
      float *arow = Am + r * C, *prow = Pm + r * C;
      std::fill(arow, arow + r + 1, 0.0f);
      std::fill(prow, prow + r + 1, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        const float ki = K[r * dk + i], qi = Q[r * dk + i];
        const float* kt = Kt + i * C;
        for (int64_t jj = 0; jj <= r; ++jj) {
          arow[jj] += ki * kt[jj];
          prow[jj] += qi * kt[jj];
        }
      }
      for (int64_t jj = 0; jj <= r; ++jj) {
        const float d = std::exp(static_cast<float>(gam[r] - gam[jj]));
        arow[jj] *= beta[r] * d;
        prow[jj] *= d;
      }
    }
    for (int64_t r = 0; r < L; ++r) {  // u by forward substitution through the unit lower-triangular I + A
      float* u = U + r * dv;
      const float* ks = KS + r * dv;
      for (int64_t c = 0; c < dv; ++c) u[c] = beta[r] * (u[c] - eg[r] * ks[c]);
      mul_add_rows(u, Am + r * C, U, r, dv, -1.0f);
    }
    for (int64_t r = 0; r < L; ++r) {
      float* o = j.out + (c0 + r) * j.n_v * dv + h * dv;
      const float* qs = QS + r * dv;
      for (int64_t c = 0; c < dv; ++c) o[c] = eg[r] * qs[c];
      mul_add_rows(o, Pm + r * C, U, r + 1, dv, 1.0f);
    }
    const float decay = eg[L - 1];
    for (int64_t i = 0; i < dk; ++i) {  // the new state: S = e^{gamma_{L-1}} S0 + k^T diag(tail) u
      float* row = S + i * dv;
      float* kt = Kt + i * C;
      for (int64_t r = 0; r < L; ++r) kt[r] *= tail[r];
      for (int64_t c = 0; c < dv; ++c) row[c] *= decay;
      mul_add_rows(row, kt, U, L, dv, 1.0f);
    }
  }
}

}  // namespace

void causal_conv1d(ThreadPool& pool, Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta) {
  const Rows o = as_rows(out), xr = as_rows(x), wr = as_rows(w);
  const int64_t channels = xr.n_cols, kernel = wr.n_cols, hist = kernel - 1;
  const int64_t n_seqs = meta.state_slots.numel();
  const int32_t* starts = meta.seq_starts.ptr<int32_t>();
  const int32_t* slots = meta.state_slots.ptr<int32_t>();
  const int32_t* pos = meta.positions.ptr<int32_t>();
  constexpr int64_t kBlock = 64;  // channels per task
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  pool.parallel_for(n_seqs * blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t s = task / blocks, c0 = task % blocks * kBlock, c1 = std::min(channels, c0 + kBlock);
      const int64_t t0 = starts[s], t1 = starts[s + 1];
      if (t0 == t1) continue;
      if (slots[s] < 0) {
        for (int64_t t = t0; t < t1; ++t) std::memset(o.row<float>(t) + c0, 0, static_cast<size_t>(c1 - c0) * 4);
        continue;
      }
      float* st = state.ptr<float>() + slots[s] * state.strides[0];
      const bool fresh = pos[t0] == 0;
      float* buf = thread_scratch(kScratchAttention, static_cast<size_t>(2 * kernel + hist + (t1 - t0)));
      float *wf = buf, *xx = buf + kernel;
      for (int64_t c = c0; c < c1; ++c) {
        float* sc = st + c * hist;
        widen_row(wr.row<char>(c), wr.dtype, kernel, wf);
        for (int64_t j = 0; j < hist; ++j) xx[j] = fresh ? 0.0f : sc[j];
        for (int64_t t = t0; t < t1; ++t) xx[hist + t - t0] = xr.row<float>(t)[c];
        for (int64_t t = t0; t < t1; ++t) {
          float acc = 0.0f;
          for (int64_t j = 0; j < kernel; ++j) acc += wf[j] * xx[t - t0 + j];
          o.row<float>(t)[c] = silu(acc);
        }
        for (int64_t j = 0; j < hist; ++j) sc[j] = xx[t1 - t0 + j];
      }
    }
  });
}

void gated_delta_rule(ThreadPool& pool, Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta,
                      float q_scale, int64_t chunk_min) {
  const DeltaJob job{&in, out.ptr<float>(), in.q.shape[1], in.q.shape[2], in.v.shape[1], in.v.shape[2], q_scale};
  const int64_t n_seqs = meta.state_slots.numel(), n_v = job.n_v, dv = job.dv;
  const int32_t* starts = meta.seq_starts.ptr<int32_t>();
  const int32_t* slots = meta.state_slots.ptr<int32_t>();
  const int32_t* pos = meta.positions.ptr<int32_t>();
  pool.parallel_for(n_seqs * n_v, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t s = task / n_v, h = task % n_v, t0 = starts[s], t1 = starts[s + 1];
      if (t0 == t1) continue;
      if (slots[s] < 0) {
        for (int64_t t = t0; t < t1; ++t) std::memset(job.out + t * n_v * dv + h * dv, 0, static_cast<size_t>(dv) * 4);
        continue;
      }
      float* S = state.ptr<float>() + slots[s] * state.strides[0] + h * state.strides[1];
      (t1 - t0 >= chunk_min ? delta_head_chunked : delta_head)(job, S, pos[t0] == 0, h, t0, t1);
    }
  });
}

void rms_norm_gated(ThreadPool& pool, Tensor out, Tensor x, Tensor z, Tensor w, float eps) {
  const Rows o = as_rows(out), xr = as_rows(x), zr = as_rows(z);
  const int64_t d = xr.n_cols;
  pool.parallel_for(xr.n_rows, 64, [&](int64_t b, int64_t e) {
    float* wf = thread_scratch(kScratchTable, static_cast<size_t>(d));
    widen_row(w.data, w.dtype, d, wf);
    for (int64_t i = b; i < e; ++i) {
      const float* xi = xr.row<float>(i);
      const float* zi = zr.row<float>(i);
      float ss = 0.0f;
      for (int64_t j = 0; j < d; ++j) ss += xi[j] * xi[j];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      float* oi = o.row<float>(i);
      for (int64_t j = 0; j < d; ++j) oi[j] = xi[j] * inv * wf[j] * silu(zi[j]);
    }
  });
}

void sigmoid_mul(ThreadPool& pool, Tensor out, Tensor x, Tensor gate) {
  const Rows o = as_rows(out), xr = as_rows(x), g = as_rows(gate);
  pool.parallel_for(xr.n_rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = xr.row<float>(i);
      const float* gi = g.row<float>(i);
      float* oi = o.row<float>(i);
      const int64_t gstep = g.n_cols == 1 ? 0 : 1;  // [m, 1]: one gate per row
      for (int64_t j = 0; j < xr.n_cols; ++j) oi[j] = xi[j] * sigmoid(gi[j * gstep]);
    }
  });
}

}  // namespace bunsen::kernels::cpu
