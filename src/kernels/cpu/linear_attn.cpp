// CPU linear-attention ops (see linear_attn_ops.h): the recurrent gated delta rule per (sequence, v-head)
// with the state row-major [k_head_dim, v_head_dim] so every inner loop runs over contiguous v columns;
// the causal conv per (sequence, channel block); row-wise gated norm and sigmoid gate.
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
                      float q_scale) {
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
      delta_head(job, S, pos[t0] == 0, h, t0, t1);
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
