// The chunked (WY) form of the gated delta rule on CUDA, for the runs of >= chunk_min tokens of a step
// (prefill); linear_attn.cu launches it beside the recurrent kernel. One block per (long run, v-head,
// 32-column tile of the state S [dk, dv]): a column of S evolves independently of the others given k, so
// each block owns its slice of S (in shared memory) across all chunks of its sequence. Per chunk of
// kChunk tokens, SIMT from shared-memory tiles: q/k l2-normalised and transposed, the cumulative log-decay
// gamma in double, k.k and q.k with their decays, S0^T k and S0^T q, the deltas u by forward substitution,
// then the outputs and the new S (the math is in delta_head_chunked of cpu/linear_attn.cpp). Invariants:
// f32 math; every exp takes gamma_r - gamma_j with j <= r (<= 0); slot < 0 writes zero output; no host
// sync and no allocation (graph-capturable).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/linear_attn_ops.h"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kChunk = 64;  // tokens per chunk (= kernels::kDeltaRuleChunk)
constexpr int kTileV = 32;  // state columns per block
constexpr int kThreads = 256;
constexpr int kQkStride = kChunk + 4;  // row stride of the transposed q/k tiles: float4 rows, few conflicts
static_assert(kMaxDeltaHeadDim <= 4 * 32, "the S update gives each thread 4 rows 32 apart");

__device__ __forceinline__ float sigmoid_c(float x) {
  return 1.0f / (1.0f + __expf(-x));
}
__device__ __forceinline__ float softplus_c(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

// Shared memory, in floats, for k_head_dim dk (the double gamma [kChunk] first keeps 8-byte alignment).
constexpr int64_t smem_floats(int64_t dk) {
  return 2 * kChunk + 2 * dk * kQkStride + dk * kTileV + 2 * kChunk * kTileV + 2 * kChunk * kChunk +
         3 * kChunk;
}

struct Smem {
  double* gam;              // [kChunk] cumulative log-decay inside the chunk
  float* qt;                // [dk, kQkStride] q^T (l2-normalised, scaled; zero past the chunk's tokens)
  float* kt;                // [dk, kQkStride] k^T (l2-normalised)
  float* s;                 // [dk, kTileV] this block's columns of S
  float* u;                 // [kChunk, kTileV] v, then beta (v - e^gamma S0^T k), then the deltas u
  float* qs;                // [kChunk, kTileV] S0^T q
  float* am;                // [kChunk, kChunk] A[r][j] = beta_r e^{gamma_r - gamma_j} k_r.k_j (j < r), else 0
  float* pt;                // [kChunk, kChunk] P^T: pt[j][r] = e^{gamma_r - gamma_j} q_r.k_j (j <= r), else 0
  float *beta, *eg, *tail;  // [kChunk]: beta_r, e^{gamma_r}, e^{gamma_{L-1} - gamma_r} (0 past L)

  __device__ Smem(float* base, int dk) {
    gam = reinterpret_cast<double*>(base);
    qt = base + 2 * kChunk;
    kt = qt + dk * kQkStride;
    s = kt + dk * kQkStride;
    u = s + dk * kTileV;
    qs = u + kChunk * kTileV;
    am = qs + kChunk * kTileV;
    pt = am + kChunk * kChunk;
    beta = pt + kChunk * kChunk;
    eg = beta + kChunk;
    tail = eg + kChunk;
  }
};

struct Block {
  int64_t h, kh;
  int dk, c_lo, n_cols;  // this block's state columns [c_lo, c_lo + n_cols)
  float A, bias;
};

// Gate values, q/k (warp per row), the v tile; then gamma (warp 0, double scan) and its exponentials.
__device__ void load_chunk(const DevDeltaRule& a, const Block& b, const Smem& m, int32_t c0, int L) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* g = m.tail;  // raw g until the scan below
  if (tid < kChunk) {
    float gv = 0.0f, bv = 0.0f;
    if (tid < L) {
      const int64_t t = c0 + tid;
      gv = b.A * softplus_c(load_any(a.a.data, a.a.dtype, t * a.a.stride + b.h) + b.bias);
      bv = sigmoid_c(load_any(a.b.data, a.b.dtype, t * a.b.stride + b.h));
    }
    g[tid] = gv;
    m.beta[tid] = bv;
  }
  constexpr int kRowsAtOnce = 4;  // rows per warp whose loads are in flight together
  for (int row0 = warp * kRowsAtOnce; row0 < 2 * kChunk; row0 += kThreads / 32 * kRowsAtOnce) {
    float v[kRowsAtOnce][4];
#pragma unroll
    for (int w = 0; w < kRowsAtOnce; ++w) {  // rows [0, kChunk) are q, [kChunk, 2 kChunk) k
      const int row = row0 + w, r = row % kChunk;
      const DevHeads& x = row < kChunk ? a.q : a.k;
      const int64_t base = (c0 + r) * x.token_stride + b.kh * x.head_stride;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = lane + 32 * j;
        v[w][j] = (r < L && i < b.dk) ? load_any(x.data, x.dtype, base + i) : 0.0f;
      }
    }
#pragma unroll
    for (int w = 0; w < kRowsAtOnce; ++w) {
      const int row = row0 + w, r = row % kChunk;
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += v[w][j] * v[w][j];
      const float sc = (row < kChunk ? a.q_scale : 1.0f) * rsqrtf(warp_sum(ss) + 1e-6f);
      float* dst = row < kChunk ? m.qt : m.kt;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (lane + 32 * j < b.dk) dst[(lane + 32 * j) * kQkStride + r] = v[w][j] * sc;
    }
  }
  for (int e = tid; e < kChunk * kTileV; e += kThreads) {
    const int r = e / kTileV, c = e % kTileV;
    m.u[e] =
        (r < L && c < b.n_cols)
            ? load_any(a.v.data, a.v.dtype, (c0 + r) * a.v.token_stride + b.h * a.v.head_stride + b.c_lo + c)
            : 0.0f;
  }
  __syncthreads();
  if (warp == 0) {  // inclusive scan of g over the chunk in double: gamma_r - gamma_j stays exact enough
    double x0 = g[lane], x1 = g[lane + 32];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y0 = __shfl_up_sync(0xffffffffu, x0, o), y1 = __shfl_up_sync(0xffffffffu, x1, o);
      if (lane >= o) {
        x0 += y0;
        x1 += y1;
      }
    }
    x1 += __shfl_sync(0xffffffffu, x0, 31);
    const double last = L <= 32 ? __shfl_sync(0xffffffffu, x0, L - 1) : __shfl_sync(0xffffffffu, x1, L - 33);
    __syncwarp();  // every lane has read g (aliased by tail) before it is overwritten
    m.gam[lane] = x0;
    m.gam[lane + 32] = x1;
    m.eg[lane] = expf(static_cast<float>(x0));
    m.eg[lane + 32] = expf(static_cast<float>(x1));
    m.tail[lane] = lane < L ? expf(static_cast<float>(last - x0)) : 0.0f;
    m.tail[lane + 32] = lane + 32 < L ? expf(static_cast<float>(last - x1)) : 0.0f;
  }
  __syncthreads();
}

// The decayed k.k / q.k products (4 x 4 tiles; tiles above the diagonal only write zeros), and in the
// same phase S0^T k (threads 0..127, turned into beta (v - e^gamma S0^T k) in place in u) and S0^T q.
__device__ void chunk_products(const Block& b, const Smem& m, int L) {
  const int tid = threadIdx.x;
  {
    const int r0 = (tid / 16) * 4, j0 = (tid % 16) * 4;
    float kk[4][4] = {}, qk[4][4] = {};
    if (j0 <= r0 + 3 && r0 < L)
      for (int i = 0; i < b.dk; ++i) {
        const float4 qr = *reinterpret_cast<const float4*>(m.qt + i * kQkStride + r0);
        const float4 kr = *reinterpret_cast<const float4*>(m.kt + i * kQkStride + r0);
        const float4 kj = *reinterpret_cast<const float4*>(m.kt + i * kQkStride + j0);
        const float qa[4] = {qr.x, qr.y, qr.z, qr.w}, ka[4] = {kr.x, kr.y, kr.z, kr.w},
                    ja[4] = {kj.x, kj.y, kj.z, kj.w};
#pragma unroll
        for (int x = 0; x < 4; ++x)
#pragma unroll
          for (int y = 0; y < 4; ++y) {
            kk[x][y] += ka[x] * ja[y];
            qk[x][y] += qa[x] * ja[y];
          }
      }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int r = r0 + x, j = j0 + y;
        const float d = (j <= r && r < L) ? expf(static_cast<float>(m.gam[r] - m.gam[j])) : 0.0f;
        m.am[r * kChunk + j] = j < r ? m.beta[r] * d * kk[x][y] : 0.0f;
        m.pt[j * kChunk + r] = d * qk[x][y];
      }
  }
  const int half = tid / 128, w = tid % 128;
  const int r0 = (w / 8) * 4, c0 = (w % 8) * 4;
  const float* xt = half ? m.qt : m.kt;
  float acc[4][4] = {};
  if (r0 < L)
    for (int i = 0; i < b.dk; ++i) {
      const float4 xr = *reinterpret_cast<const float4*>(xt + i * kQkStride + r0);
      const float4 sr = *reinterpret_cast<const float4*>(m.s + i * kTileV + c0);
      const float xa[4] = {xr.x, xr.y, xr.z, xr.w}, sa[4] = {sr.x, sr.y, sr.z, sr.w};
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) acc[x][y] += xa[x] * sa[y];
    }
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int r = r0 + x, e = r * kTileV + c0 + y;
      if (half == 0)
        m.u[e] = m.beta[r] * (m.u[e] - m.eg[r] * acc[x][y]);  // rows past L: beta 0
      else
        m.qs[e] = acc[x][y];
    }
}

// u = (I + A)^-1 (beta (v - e^gamma S0^T k)): forward substitution, one lane per column (warp 0).
__device__ void solve_deltas(const Smem& m, int L) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  for (int r = 1; r < L; ++r) {
    const float* arow = m.am + r * kChunk;
    float acc[4] = {m.u[r * kTileV + lane], 0.0f, 0.0f, 0.0f};
    int j = 0;
    for (; j + 4 <= r; j += 4) {
      const float4 w = *reinterpret_cast<const float4*>(arow + j);
      acc[0] -= w.x * m.u[j * kTileV + lane];
      acc[1] -= w.y * m.u[(j + 1) * kTileV + lane];
      acc[2] -= w.z * m.u[(j + 2) * kTileV + lane];
      acc[3] -= w.w * m.u[(j + 3) * kTileV + lane];
    }
    for (; j < r; ++j) acc[0] -= arow[j] * m.u[j * kTileV + lane];
    m.u[r * kTileV + lane] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

// out = e^gamma S0^T q + P u (2 x 4 per thread) and S = e^{gamma_{L-1}} S0 + k^T diag(tail) u (rows
// ib + 32 j, 4 columns per thread).
__device__ void chunk_outputs(const DevDeltaRule& a, const Block& b, const Smem& m, int32_t c0, int L) {
  const int tid = threadIdx.x;
  {
    const int r0 = (tid / 8) * 2, cc = (tid % 8) * 4;
    if (r0 < L) {
      float o[2][4];
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) o[x][y] = m.eg[r0 + x] * m.qs[(r0 + x) * kTileV + cc + y];
      for (int j = 0; j <= r0 + 1; ++j) {
        const float2 p = *reinterpret_cast<const float2*>(m.pt + j * kChunk + r0);
        const float4 u = *reinterpret_cast<const float4*>(m.u + j * kTileV + cc);
        const float ua[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          o[0][y] += p.x * ua[y];
          o[1][y] += p.y * ua[y];
        }
      }
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y)
          if (r0 + x < L && cc + y < b.n_cols)
            store_any(a.out.data, a.out.dtype,
                      (c0 + r0 + x) * a.out.token_stride + b.h * a.out.head_stride + b.c_lo + cc + y,
                      o[x][y]);
    }
  }
  const int ib = tid / 8, cc = (tid % 8) * 4;
  const float decay = m.eg[L - 1];
  float acc[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = ib + 32 * j;
#pragma unroll
    for (int y = 0; y < 4; ++y) acc[j][y] = i < b.dk ? m.s[i * kTileV + cc + y] * decay : 0.0f;
  }
  for (int r = 0; r < L; ++r) {
    const float4 u = *reinterpret_cast<const float4*>(m.u + r * kTileV + cc);
    const float ua[4] = {u.x, u.y, u.z, u.w}, w = m.tail[r];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = ib + 32 * j;
      const float kv = i < b.dk ? m.kt[i * kQkStride + r] * w : 0.0f;
#pragma unroll
      for (int y = 0; y < 4; ++y) acc[j][y] += kv * ua[y];
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = ib + 32 * j;
    if (i < b.dk)
#pragma unroll
      for (int y = 0; y < 4; ++y) m.s[i * kTileV + cc + y] = acc[j][y];
  }
}

// The index of the rank-th sequence (in order) whose run has >= chunk_min tokens, or -1 (whole block).
__device__ int64_t find_long_seq(const DevStateMeta& m, int32_t chunk_min, int64_t rank) {
  __shared__ int warp_counts[kThreads / 32];
  __shared__ int64_t found;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) found = -1;
  int64_t before = 0;  // long runs in the earlier batches (the same in every thread)
  for (int64_t s0 = 0; s0 < m.n_seqs; s0 += kThreads) {
    const int64_t s = s0 + threadIdx.x;
    const bool is_long = s < m.n_seqs && m.seq_starts[s + 1] - m.seq_starts[s] >= chunk_min;
    const unsigned ballot = __ballot_sync(0xffffffffu, is_long);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int64_t mine = before + __popc(ballot & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      mine += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (is_long && mine == rank) found = s;
    __syncthreads();  // found is visible; warp_counts may be rewritten
    if (found >= 0 || before + total > rank) break;
    before += total;
  }
  return found;
}

// Block (v-head, column tile, rank): the rank-th long run of the step, so the working blocks come first
// in launch order and a step without long runs costs one short scan per block.
__global__ void __launch_bounds__(kThreads) delta_chunked_kernel(DevDeltaRule a) {
  extern __shared__ __align__(16) float smem[];
  const int64_t s = find_long_seq(a.meta, a.chunk_min, blockIdx.z);
  if (s < 0) return;
  const int32_t t0 = a.meta.seq_starts[s], t1 = a.meta.seq_starts[s + 1];
  Block b;
  b.h = blockIdx.x;
  b.kh = b.h / (a.v.n_heads / a.q.n_heads);
  b.dk = static_cast<int>(a.q.head_dim);
  b.c_lo = static_cast<int>(blockIdx.y) * kTileV;
  const int dv = static_cast<int>(a.v.head_dim);
  b.n_cols = dv - b.c_lo < kTileV ? dv - b.c_lo : kTileV;
  const int32_t slot = a.meta.state_slots[s];
  if (slot < 0) {
    for (int64_t e = threadIdx.x; e < static_cast<int64_t>(t1 - t0) * b.n_cols; e += kThreads) {
      const int64_t t = t0 + e / b.n_cols, c = b.c_lo + e % b.n_cols;
      store_any(a.out.data, a.out.dtype, t * a.out.token_stride + b.h * a.out.head_stride + c, 0.0f);
    }
    return;
  }
  const Smem m(smem, b.dk);
  float* gs = a.state + (static_cast<int64_t>(slot) * a.v.n_heads + b.h) * b.dk * dv + b.c_lo;
  const bool fresh = a.meta.positions[t0] == 0;
  for (int e = threadIdx.x; e < b.dk * kTileV; e += kThreads) {
    const int i = e / kTileV, c = e % kTileV;
    m.s[e] = (fresh || c >= b.n_cols) ? 0.0f : gs[static_cast<int64_t>(i) * dv + c];
  }
  b.A = -expf(load_any(a.a_log, a.a_log_dtype, b.h));
  b.bias = load_any(a.dt_bias, a.dt_bias_dtype, b.h);
  for (int32_t c0 = t0; c0 < t1; c0 += kChunk) {
    const int L = t1 - c0 < kChunk ? t1 - c0 : kChunk;
    load_chunk(a, b, m, c0, L);  // ends with a barrier
    chunk_products(b, m, L);
    __syncthreads();
    solve_deltas(m, L);
    __syncthreads();
    chunk_outputs(a, b, m, c0, L);
    __syncthreads();  // the next chunk overwrites q, k, u
  }
  for (int e = threadIdx.x; e < b.dk * kTileV; e += kThreads) {
    const int i = e / kTileV, c = e % kTileV;
    if (c < b.n_cols) gs[static_cast<int64_t>(i) * dv + c] = m.s[e];
  }
}

}  // namespace

void gated_delta_rule_chunked(void* stream, const DevDeltaRule& a) {
  if (a.meta.n_seqs == 0 || a.v.n_heads == 0 || a.q.n_tokens < a.chunk_min) return;
  const size_t smem = static_cast<size_t>(smem_floats(a.q.head_dim)) * sizeof(float);
  allow_dynamic_smem(reinterpret_cast<const void*>(delta_chunked_kernel),
                     static_cast<size_t>(smem_floats(kMaxDeltaHeadDim)) * sizeof(float), "gated_delta_rule");
  // At most n_tokens / chunk_min runs can be long: one rank of blocks each.
  const int64_t by_tokens = a.q.n_tokens / (a.chunk_min > 1 ? a.chunk_min : 1);
  const int64_t ranks = a.meta.n_seqs < by_tokens ? a.meta.n_seqs : by_tokens;
  if (ranks > 65535) throw Error("cuda", "gated_delta_rule (chunked): more than 65535 sequences in one step");
  const dim3 grid(static_cast<unsigned>(a.v.n_heads),
                  static_cast<unsigned>((a.v.head_dim + kTileV - 1) / kTileV), static_cast<unsigned>(ranks));
  delta_chunked_kernel<<<grid, kThreads, smem, as_stream(stream)>>>(a);
  check_launch("gated_delta_rule (chunked)",
               [&] { return heads_desc("q", a.q) + ", " + heads_desc("v", a.v); });
}

}  // namespace bunsen::kernels::cuda
