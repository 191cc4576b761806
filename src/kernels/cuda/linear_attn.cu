// CUDA linear-attention ops (linear_attn_ops.h): the causal depthwise conv1d with state (one thread per
// (sequence, channel), sequential in time with the kernel-1 window in registers), the recurrent gated delta
// rule for decode rows and short runs (one block per (sequence, v-head); the state S [dk, dv] in shared
// memory for the whole token range, thread j owning column j; q and k l2-normalised in shared memory per
// token; runs of >= chunk_min tokens go to delta_rule_chunked.cu), the gated RMSNorm (one block per row)
// and the sigmoid gate (flat). Invariants: same formulas as ref/ in f32; a sequence with slot < 0
// writes zero output and touches no state; a sequence whose first position is 0 starts from zero state.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/linear_attn_common.cuh"
#include "kernels/cuda/linear_attn_ops.h"

namespace bunsen::kernels::cuda {
namespace {

using namespace linear_attn;  // the activations, l2_store, the delta tile geometry (shared with the fused kernel)

__global__ void conv1d_kernel(DevConv1d a, int kernel) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, s = blockIdx.y;
  const int64_t channels = a.x.n_cols, hist = kernel - 1;
  if (c >= channels) return;
  const int32_t t0 = a.meta.seq_starts[s], t1 = a.meta.seq_starts[s + 1];
  if (t0 >= t1) return;
  const int32_t slot = a.meta.state_slots[s];
  if (slot < 0) {
    for (int32_t t = t0; t < t1; ++t) store_any(a.out.data, a.out.dtype, t * a.out.stride + c, 0.0f);
    return;
  }
  float* st = a.state + (static_cast<int64_t>(slot) * channels + c) * hist;
  const bool fresh = a.meta.positions[t0] == 0;
  float win[kMaxConvKernel], w[kMaxConvKernel];
  for (int j = 0; j < kernel; ++j) w[j] = load_any(a.w.data, a.w.dtype, c * a.w.stride + j);
  for (int j = 0; j < hist; ++j) win[j] = fresh ? 0.0f : st[j];
  for (int32_t t = t0; t < t1; ++t) {
    const float xt = load_any(a.x.data, a.x.dtype, t * a.x.stride + c);
    float acc = w[hist] * xt;
    for (int j = 0; j < hist; ++j) acc += w[j] * win[j];
    for (int j = 0; j + 1 < hist; ++j) win[j] = win[j + 1];
    win[hist - 1] = xt;
    store_any(a.out.data, a.out.dtype, t * a.out.stride + c, silu_f(acc));
  }
  for (int j = 0; j < hist; ++j) st[j] = win[j];
}

// Loads head (t, h) of x into dst[0:d] l2-normalised and times `scale` (all threads call it).
__device__ void load_l2(const DevHeads& x, int64_t t, int64_t h, float scale, float* dst, float* red) {
  const int d = static_cast<int>(x.head_dim);
  const int64_t base = t * x.token_stride + h * x.head_stride;
  float v = 0.0f;
  if (threadIdx.x < d) v = load_any(x.data, x.dtype, base + threadIdx.x);
  l2_store(v, d, scale, dst, red);
}

// Block (s, h, tile): columns j = tile * 32 + lane of head h's state S [dk, dv] (a column evolves
// independently of the others given k). Thread (warp, lane) keeps rows i = warp + 8 r of its column in
// registers for the whole token range; per token the two dot products over i (S^T k, S^T q) add the 8 warps'
// partial sums in warp order through shared memory. Decode rows spread over n_v * ceil(dv / 32) blocks of 8
// warps instead of n_v blocks of one thread per column (Qwen3.5-4B: 17 -> a few us per layer).
__global__ void __launch_bounds__(kDeltaWarps * 32) delta_rule_kernel(DevDeltaRule a) {
  __shared__ float qk[2][kMaxDeltaHeadDim];           // q, k of the current token (l2-normalised)
  __shared__ float part[2][kDeltaWarps][kDeltaTile];  // per-warp partial sums of S^T k, S^T q
  __shared__ float red[32];
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dk = static_cast<int>(a.q.head_dim), dv = static_cast<int>(a.v.head_dim);
  const int64_t n_v = a.v.n_heads, kh = h / (n_v / a.q.n_heads);
  const int j = static_cast<int>(blockIdx.z) * kDeltaTile + lane;
  const bool col = j < dv;
  const int32_t t0 = a.meta.seq_starts[s], t1 = a.meta.seq_starts[s + 1];
  if (t0 >= t1 || t1 - t0 >= a.chunk_min) return;  // long runs: the chunked kernel's
  const int32_t slot = a.meta.state_slots[s];
  if (slot < 0) {
    if (warp == 0 && col)
      for (int32_t t = t0; t < t1; ++t) store_any(a.out.data, a.out.dtype, t * a.out.token_stride + h * a.out.head_stride + j, 0.0f);
    return;
  }
  float* gs = a.state + (static_cast<int64_t>(slot) * n_v + h) * dk * dv;
  const bool fresh = a.meta.positions[t0] == 0;
  float S[kDeltaRows];
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    S[r] = !fresh && col && i < dk ? gs[i * dv + j] : 0.0f;
  }
  const float A = -expf(load_any(a.a_log, a.a_log_dtype, h));
  const float bias = load_any(a.dt_bias, a.dt_bias_dtype, h);
  for (int32_t t = t0; t < t1; ++t) {
    __syncthreads();  // the previous token's q, k and partial sums are no longer read
    load_l2(a.q, t, kh, a.q_scale, qk[0], red);
    load_l2(a.k, t, kh, 1.0f, qk[1], red);
    __syncthreads();
    const float decay = expf(A * softplus_f(load_any(a.a.data, a.a.dtype, t * a.a.stride + h) + bias));
    const float beta = sigmoid_f(load_any(a.b.data, a.b.dtype, t * a.b.stride + h));
    part[0][warp][lane] = decay_rows(S, qk[1], warp, dk, decay);
    __syncthreads();
    const float mem = sum_warps(part[0], lane);
    const float vj = col ? load_any(a.v.data, a.v.dtype, t * a.v.token_stride + h * a.v.head_stride + j) : 0.0f;
    const float delta = (vj - mem) * beta;
    part[1][warp][lane] = update_rows(S, qk[0], qk[1], warp, dk, delta);
    __syncthreads();
    if (warp == 0 && col) {
      const float o = sum_warps(part[1], lane);
      store_any(a.out.data, a.out.dtype, t * a.out.token_stride + h * a.out.head_stride + j, o);
    }
  }
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    if (col && i < dk) gs[i * dv + j] = S[r];
  }
}

__global__ void rms_norm_gated_kernel(DevRows out, DevRows x, DevRows z, const void* w, DType w_dtype, float eps) {
  __shared__ float red[32];
  const int64_t d = x.n_cols;
  for (int64_t r = blockIdx.x; r < x.n_rows; r += gridDim.x) {
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const float v = load_any(x.data, x.dtype, r * x.stride + c);
      ss += v * v;
    }
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const float v = load_any(x.data, x.dtype, r * x.stride + c) * inv * load_any(w, w_dtype, c);
      store_any(out.data, out.dtype, r * out.stride + c, v * silu_f(load_any(z.data, z.dtype, r * z.stride + c)));
    }
  }
}

__global__ void sigmoid_mul_kernel(DevRows out, DevRows x, DevRows g) {
  const int64_t total = x.n_rows * x.n_cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / x.n_cols, c = e % x.n_cols;
    const int64_t gc = g.n_cols == 1 ? 0 : c;  // [m, 1]: one gate per row
    const float v = load_any(x.data, x.dtype, r * x.stride + c) * sigmoid_f(load_any(g.data, g.dtype, r * g.stride + gc));
    store_any(out.data, out.dtype, r * out.stride + c, v);
  }
}

}  // namespace

void causal_conv1d(void* stream, const DevConv1d& a) {
  const int kernel = static_cast<int>(a.w.n_cols);
  if (kernel < 2 || kernel > kMaxConvKernel)
    throw Error("cuda", "causal_conv1d: kernel size " + std::to_string(kernel) + " is outside [2, 8]");
  if (a.meta.n_seqs == 0 || a.x.n_cols == 0) return;
  const int threads = 128;
  const dim3 grid(static_cast<unsigned>((a.x.n_cols + threads - 1) / threads), static_cast<unsigned>(a.meta.n_seqs));
  conv1d_kernel<<<grid, threads, 0, as_stream(stream)>>>(a, kernel);
  check_launch("causal_conv1d", [&] { return rows_desc("x", a.x) + ", " + rows_desc("w", a.w); });
}

void gated_delta_rule(void* stream, const DevDeltaRule& a) {
  if (a.meta.n_seqs == 0 || a.v.n_heads == 0) return;
  const int64_t tiles = (a.v.head_dim + kDeltaTile - 1) / kDeltaTile;
  const dim3 grid(static_cast<unsigned>(a.meta.n_seqs), static_cast<unsigned>(a.v.n_heads), static_cast<unsigned>(tiles));
  delta_rule_kernel<<<grid, kDeltaWarps * 32, 0, as_stream(stream)>>>(a);
  check_launch("gated_delta_rule", [&] { return heads_desc("q", a.q) + ", " + heads_desc("v", a.v); });
  gated_delta_rule_chunked(stream, a);  // launches nothing when the step has < chunk_min tokens
}

void rms_norm_gated(void* stream, DevRows out, DevRows x, DevRows z, const void* w, DType w_dtype, float eps) {
  if (x.n_rows == 0) return;
  const int threads = row_threads(x.n_cols);
  const unsigned blocks = static_cast<unsigned>(x.n_rows < 65536 ? x.n_rows : 65536);
  rms_norm_gated_kernel<<<blocks, threads, 0, as_stream(stream)>>>(out, x, z, w, w_dtype, eps);
  check_launch("rms_norm_gated", [&] { return rows_desc("x", x) + ", " + rows_desc("z", z); });
}

void sigmoid_mul(void* stream, DevRows out, DevRows x, DevRows gate) {
  const int64_t total = x.n_rows * x.n_cols;
  if (total == 0) return;
  const int threads = 256;
  const int64_t want = (total + threads - 1) / threads, cap = static_cast<int64_t>(sm_count()) * 32;
  sigmoid_mul_kernel<<<static_cast<unsigned>(want < cap ? want : cap), threads, 0, as_stream(stream)>>>(out, x, gate);
  check_launch("sigmoid_mul", [&] { return rows_desc("x", x) + ", " + rows_desc("gate", gate); });
}

}  // namespace bunsen::kernels::cuda
