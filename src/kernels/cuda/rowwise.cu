// CUDA row-wise ops: embedding, rms_norm, add_scaled, scale, silu_mul, softmax, argmax, gather_rows. One
// block per row for the reductions and gathers (grid-stride over rows); the element-wise ops run 8
// columns per thread with 16-byte accesses (vec8.cuh) when every row is 16-byte aligned, else a flat
// grid-stride loop; all math in f32, storage in each tensor's own dtype (activations f32|bf16,
// weights f32|f16|bf16). Both element-wise paths apply one functor, so they store the same bits.
// rms_norm and add_rms_norm take a vectorised path for rows of d % 8 == 0 and d <= 8192 with 16-byte
// aligned rows (the model widths): one block of d / 8 threads per row, 8 elements per thread in registers,
// one block reduction; the rest is scalar (coalesced). Invariants: same formulas as ref/ (rms_norm's mean
// in f32; argmax: first maximum, NaN never wins). argmax spreads a long row (a vocabulary: 128k-262k logits)
// over several blocks and merges their candidates in a second launch (BUNSEN_ARGMAX_SPLIT=0: one block per
// row, which took 14.9 us for a 128k row between two decode steps on the H200).
#include <algorithm>
#include <atomic>

#include "core/env.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec8.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBlocks = 1 << 16;

int64_t row_blocks(int64_t n_rows) {
  return n_rows < kMaxRowBlocks ? n_rows : kMaxRowBlocks;
}

int flat_blocks(int64_t total) {
  const int64_t want = (total + kThreads - 1) / kThreads, cap = static_cast<int64_t>(sm_count()) * 32;
  return static_cast<int>(want < cap ? want : cap);
}

template <typename OT, typename TT>
__global__ void embedding_kernel(OT* out, int64_t out_stride, const TT* table, int64_t table_stride,
                                 int64_t vocab, const int32_t* ids, int64_t n, int64_t d, float scale) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int32_t id = ids[r];
    const bool ok = id >= 0 && id < vocab;
    const TT* src = table + (ok ? id : 0) * table_stride;
    OT* dst = out + r * out_stride;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      dst[j] = from_f32<OT>(ok ? to_f32(src[j]) * scale : NAN);
  }
}

template <typename OT, typename XT, typename WT>
__global__ void rms_norm_kernel(OT* out, int64_t out_stride, const XT* x, int64_t x_stride, const WT* w,
                                int64_t n_rows, int64_t d, float eps, float w_offset) {
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const XT* xr = x + r * x_stride;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float v = to_f32(xr[j]);
      ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    OT* o = out + r * out_stride;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      o[j] = from_f32<OT>(to_f32(xr[j]) * inv * (to_f32(w[j]) + w_offset));
  }
}

// x = x_in + y * y_scale (x_in: x itself, or a buffer of x's stride not overlapping it); out = x *
// rsqrt(mean(x^2) + eps) * (w + w_offset). Each thread keeps its (<= kPer) elements of the row in registers
// between the two halves, so x is read once and written once.
constexpr int kAddNormPer = 8;
constexpr int kAddNormThreads = 1024;

template <typename OT, typename XT, typename YT, typename WT>
__global__ void __launch_bounds__(kAddNormThreads)
    add_rms_norm_kernel(OT* out, int64_t os, XT* x, const XT* x_in, int64_t xs, const YT* y, int64_t ys,
                        const WT* w, int64_t n_rows, int64_t d, float eps, float y_scale, float w_offset) {
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    XT* xr = x + r * xs;
    const XT* xir = x_in + r * xs;
    const YT* yr = y + r * ys;
    float v[kAddNormPer];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kAddNormPer; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      v[i] = 0.0f;
      if (j < d) {
        v[i] = to_f32(xir[j]) + to_f32(yr[j]) * y_scale;
        xr[j] = from_f32<XT>(v[i]);
        v[i] = to_f32(xr[j]);  // what the stored x holds (bf16 x rounds)
        ss = fmaf(v[i], v[i], ss);
      }
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    OT* o = out + r * os;
#pragma unroll
    for (int i = 0; i < kAddNormPer; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < d) o[j] = from_f32<OT>(v[i] * inv * (to_f32(w[j]) + w_offset));
    }
  }
}

// ---- vectorised rms_norm / add_rms_norm: 8 elements per thread, 16-byte (f32: 2 x 16-byte) accesses ----
constexpr int kVecPer = 8;
constexpr int kVecMaxThreads = 1024;

using vec8::load8;
using vec8::store8;

// out = x * rsqrt(mean(x^2) + eps) * (w + w_offset) for one row per block; with kAdd, first
// x = x_in + y * y_scale (x stored rounded to XT, the norm taken over the stored values; x_in is x itself or
// a buffer of its stride not overlapping it). gemv_norm.cuh's prologue (the GEMV's norm prologue) reproduces
// this kernel's arithmetic and reduction tree for x f32: keep the two in step.
template <bool kAdd, typename OT, typename XT, typename YT, typename WT>
__global__ void __launch_bounds__(kVecMaxThreads)
    rms_norm_vec_kernel(OT* out, int64_t os, XT* x, const XT* x_in, int64_t xs, const YT* y, int64_t ys,
                        const WT* w, int64_t n_rows, int64_t d, float eps, float y_scale, float w_offset) {
  __shared__ float red[32];
  const int64_t j = static_cast<int64_t>(threadIdx.x) * kVecPer;
  const bool mine = j < d;
  pdl_launch_dependents();
  // The weights are no kernel's output: loaded before the wait, off the step's critical path.
  float wv[kVecPer];
  if (mine) load8(w + j, wv);
  pdl_wait();
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    float v[kVecPer] = {};
    float ss = 0.0f;
    if (mine) {
      load8(x_in + r * xs + j, v);
      if constexpr (kAdd) {
        float yv[kVecPer];
        load8(y + r * ys + j, yv);
#pragma unroll
        for (int i = 0; i < kVecPer; ++i) v[i] = to_f32(from_f32<XT>(fmaf(yv[i], y_scale, v[i])));
        store8(x + r * xs + j, v);
      }
#pragma unroll
      for (int i = 0; i < kVecPer; ++i) ss = fmaf(v[i], v[i], ss);
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    if (mine) {
#pragma unroll
      for (int i = 0; i < kVecPer; ++i) v[i] = v[i] * inv * (wv[i] + w_offset);
      store8(out + r * os + j, v);
    }
  }
}

// embedding_kernel for rows of d % 8 == 0, d <= 8192, 16-byte aligned: one row per block, 8 elements per
// thread in 16-byte accesses, the same bits. A decode step's one-row gather is then one trip to memory per
// thread instead of d / blockDim.x dependent ones (the plain kernel's stores may alias its loads): H200, 8B,
// 7.3 us as the first kernel of the step. Launched with PDL, so the input norm after it starts early.
template <typename OT, typename TT>
__global__ void __launch_bounds__(kVecMaxThreads)
    embedding_vec_kernel(OT* out, int64_t os, const TT* table, int64_t ts, int64_t vocab, const int32_t* ids,
                         int64_t n, int64_t d, float scale) {
  const int64_t j = static_cast<int64_t>(threadIdx.x) * kVecPer;
  pdl_launch_dependents();
  pdl_wait();  // the ids may be an earlier kernel's output (a fed decode step)
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    if (j >= d) continue;
    const int32_t id = ids[r];
    float v[kVecPer];
    if (id >= 0 && id < vocab) {
      load8(table + id * ts + j, v);
#pragma unroll
      for (int i = 0; i < kVecPer; ++i) v[i] = v[i] * scale;
    } else {
#pragma unroll
      for (int i = 0; i < kVecPer; ++i) v[i] = NAN;
    }
    store8(out + r * os + j, v);
  }
}

bool vec_row_ok(const void* p, int64_t stride, DType t) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (stride * static_cast<int64_t>(dtype_size(t))) % 16 == 0;
}

// A row tensor the vectorised norms can take: d % 8 == 0, d <= 8192, 16-byte aligned rows.
bool vec_norm_ok(const DevRows& r) {
  return r.n_cols % kVecPer == 0 && r.n_cols <= static_cast<int64_t>(kVecPer) * kVecMaxThreads &&
         vec_row_ok(r.data, r.stride, r.dtype);
}

int vec_norm_threads(int64_t d) {
  return static_cast<int>((d / kVecPer + 31) / 32 * 32);
}

// Element-wise over an [n_rows, n_cols] grid: f(row, col) for every element.
template <typename F>
__device__ __forceinline__ void for_each_elem(int64_t n_rows, int64_t n_cols, F&& f) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols;
    f(r, i - r * n_cols);
  }
}

struct AddScaled {
  float scale;
  __device__ __forceinline__ float operator()(float x, float y) const { return x + y * scale; }
};

struct Scale {
  float s;
  __device__ __forceinline__ float operator()(float x) const { return x * s; }
};

template <typename XT, typename YT>
__global__ void add_scaled_kernel(XT* x, int64_t xs, const YT* y, int64_t ys, int64_t n_rows, int64_t n_cols,
                                  float scale) {
  for_each_elem(n_rows, n_cols, [&](int64_t r, int64_t c) {
    XT* p = x + r * xs + c;
    *p = from_f32<XT>(AddScaled{scale}(to_f32(*p), to_f32(y[r * ys + c])));
  });
}

template <typename XT>
__global__ void scale_kernel(XT* x, int64_t xs, int64_t n_rows, int64_t n_cols, float s) {
  for_each_elem(n_rows, n_cols, [&](int64_t r, int64_t c) {
    XT* p = x + r * xs + c;
    *p = from_f32<XT>(Scale{s}(to_f32(*p)));
  });
}

// silu(g) * u: the decode GEMV's fused epilogue (gemv.cu, gemv_qmma.cu) uses the same expression.
struct SiluMul {
  __device__ __forceinline__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};

template <typename OT, typename GT, typename UT>
__global__ void silu_mul_kernel(OT* out, int64_t os, const GT* gate, int64_t gs, const UT* up, int64_t us,
                                int64_t n_rows, int64_t n_cols) {
  for_each_elem(n_rows, n_cols, [&](int64_t r, int64_t c) {
    out[r * os + c] = from_f32<OT>(SiluMul{}(to_f32(gate[r * gs + c]), to_f32(up[r * us + c])));
  });
}

template <typename XT>
__global__ void softmax_kernel(XT* x, int64_t xs, int64_t n_rows, int64_t n_cols) {
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    XT* xr = x + r * xs;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x) mx = fmaxf(mx, to_f32(xr[j]));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x) sum += expf(to_f32(xr[j]) - mx);
    sum = block_sum(sum, red);
    for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x)
      xr[j] = from_f32<XT>(expf(to_f32(xr[j]) - mx) / sum);
  }
}

// (value, index) with index < 0 meaning "nothing yet"; a beats b when larger, or equal and earlier.
__device__ __forceinline__ void arg_better(float& v, int64_t& i, float ov, int64_t oi) {
  if (oi < 0) return;
  if (i < 0 || ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// One block per row. A 128k-vocabulary row read with one load in flight per thread took 36 us (H200, a
// latency chain of 128 loads); each thread now keeps kArgmaxLoads loads in flight (16-byte ones for
// 16-byte-aligned f32 rows). Any visiting order gives the same result: ties go to the smaller index.
constexpr int kArgmaxLoads = 8;

template <typename XT>
__device__ __forceinline__ void argmax_scan(float& v, int64_t& idx, const XT* xr, int64_t n_cols) {
  int64_t start = 0;
  if constexpr (sizeof(XT) == 4) {
    if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0) {
      const auto* x4 = reinterpret_cast<const float4*>(xr);
      const int64_t n4 = n_cols / 4, stride = int64_t{blockDim.x} * kArgmaxLoads;
      for (int64_t q0 = threadIdx.x; q0 < n4; q0 += stride) {
        float4 e[kArgmaxLoads];
#pragma unroll
        for (int u = 0; u < kArgmaxLoads; ++u) {
          const int64_t q = q0 + int64_t{u} * blockDim.x;
          e[u] = q < n4 ? x4[q] : make_float4(NAN, NAN, NAN, NAN);
        }
#pragma unroll
        for (int u = 0; u < kArgmaxLoads; ++u) {
          const int64_t j = 4 * (q0 + int64_t{u} * blockDim.x);
          if (!isnan(e[u].x)) arg_better(v, idx, e[u].x, j);
          if (!isnan(e[u].y)) arg_better(v, idx, e[u].y, j + 1);
          if (!isnan(e[u].z)) arg_better(v, idx, e[u].z, j + 2);
          if (!isnan(e[u].w)) arg_better(v, idx, e[u].w, j + 3);
        }
      }
      start = 4 * n4;
    }
  }
  const int64_t stride = int64_t{blockDim.x} * kArgmaxLoads;
  for (int64_t j0 = start + threadIdx.x; j0 < n_cols; j0 += stride) {
    float e[kArgmaxLoads];
#pragma unroll
    for (int u = 0; u < kArgmaxLoads; ++u) {
      const int64_t j = j0 + int64_t{u} * blockDim.x;
      e[u] = j < n_cols ? to_f32(xr[j]) : NAN;
    }
#pragma unroll
    for (int u = 0; u < kArgmaxLoads; ++u)
      if (!isnan(e[u])) arg_better(v, idx, e[u], j0 + int64_t{u} * blockDim.x);
  }
}

// The block's best (v, idx) by arg_better, at thread 0.
__device__ __forceinline__ void block_arg_better(float& v, int64_t& idx) {
  __shared__ float red_v[32];
  __shared__ int64_t red_i[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    arg_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  __syncthreads();  // red_* of a previous call have been read
  if (lane == 0) {
    red_v[warp] = v;
    red_i[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) arg_better(v, idx, red_v[w], red_i[w]);
}

template <typename XT>
__global__ void argmax_kernel(int32_t* out, int32_t* host_out, const XT* x, int64_t xs, int64_t n_rows,
                              int64_t n_cols) {
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    float v = -INFINITY;
    int64_t idx = -1;
    argmax_scan(v, idx, x + r * xs, n_cols);
    block_arg_better(v, idx);
    if (threadIdx.x == 0) {
      out[r] = static_cast<int32_t>(idx);  // -1: the row is all NaN
      if (host_out != nullptr) host_out[r] = static_cast<int32_t>(idx);
    }
  }
}

// ---- argmax of long rows over several blocks per row: blockIdx.x takes columns [p * chunk, (p + 1) * chunk)
// of row blockIdx.y and writes its best as an arg_key; argmax_merge_kernel takes each row's largest key. ----

// (v, j) as one u64 whose unsigned order is arg_better's: the order-preserving bits of v (-0 as +0, so equal
// values give equal keys; v is never NaN) above the complement of j (the smaller index wins a tie). No
// candidate is 0: every non-NaN value's key is >= that of -inf, 0x007fffff << 32.
__device__ __forceinline__ uint64_t arg_key(float v, int64_t j) {
  uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  b ^= (b >> 31) != 0u ? 0xffffffffu : 0x80000000u;
  return (static_cast<uint64_t>(b) << 32) | (0xffffffffu - static_cast<uint32_t>(j));
}

template <typename XT>
__global__ void argmax_parts_kernel(uint64_t* keys, const XT* x, int64_t xs, int64_t n_cols, int64_t chunk) {
  pdl_launch_dependents();  // the merge's block may wait on the SMs meanwhile
  const int64_t r = blockIdx.y, c0 = static_cast<int64_t>(blockIdx.x) * chunk;
  float v = -INFINITY;
  int64_t idx = -1;
  if (c0 < n_cols) argmax_scan(v, idx, x + r * xs + c0, n_cols - c0 < chunk ? n_cols - c0 : chunk);
  block_arg_better(v, idx);
  if (threadIdx.x == 0) keys[r * gridDim.x + blockIdx.x] = idx < 0 ? 0 : arg_key(v, c0 + idx);
}

constexpr int kMergeWarps = 4;

__global__ void __launch_bounds__(kMergeWarps * 32)
    argmax_merge_kernel(int32_t* out, int32_t* host_out, const uint64_t* keys, int64_t n_rows, int parts) {
  pdl_wait();  // launched with PDL after argmax_parts_kernel: its keys
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kMergeWarps + (threadIdx.x >> 5);
  if (r >= n_rows) return;
  const int lane = threadIdx.x & 31;
  uint64_t best = 0;
  for (int p = lane; p < parts; p += 32) {
    const uint64_t k = keys[r * parts + p];
    best = k > best ? k : best;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t k = __shfl_xor_sync(0xffffffffu, best, o);
    best = k > best ? k : best;
  }
  if (lane == 0) {
    const int32_t id = best == 0 ? -1 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
    out[r] = id;
    if (host_out != nullptr) host_out[r] = id;
  }
}

template <typename OT, typename XT>
__global__ void gather_rows_kernel(OT* out, int64_t os, const XT* x, int64_t xs, int64_t n_x, const int32_t* rows,
                                   int64_t n_out, int64_t d) {
  for (int64_t r = blockIdx.x; r < n_out; r += gridDim.x) {
    const int32_t src = rows[r];
    const bool ok = src >= 0 && src < n_x;
    const XT* xr = x + (ok ? src : 0) * xs;
    OT* o = out + r * os;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = from_f32<OT>(ok ? to_f32(xr[j]) : NAN);
  }
}

}  // namespace

void embedding(void* stream, DevRows out, DevRows table, const int32_t* ids, float scale) {
  if (out.n_rows == 0 || out.n_cols == 0) return;
  with_act_type(out.dtype, [&](auto ot) {
    with_float_type(table.dtype, [&](auto tt) {
      using OT = typename decltype(ot)::type;
      using TT = typename decltype(tt)::type;
      if (vec_norm_ok(out) && vec_norm_ok(table)) {
        const cudaError_t e =
            launch_pdl(embedding_vec_kernel<OT, TT>, dim3(static_cast<unsigned>(row_blocks(out.n_rows))),
                       dim3(vec_norm_threads(out.n_cols)), 0, as_stream(stream), static_cast<OT*>(out.data),
                       out.stride, static_cast<const TT*>(table.data), table.stride, table.n_rows, ids,
                       out.n_rows, out.n_cols, scale);
        check_cuda(e, "embedding", [&] { return rows_desc("out", out) + ", " + rows_desc("table", table); });
        return;
      }
      embedding_kernel<OT, TT><<<row_blocks(out.n_rows), row_threads(out.n_cols), 0, as_stream(stream)>>>(
          static_cast<OT*>(out.data), out.stride, static_cast<const TT*>(table.data), table.stride,
          table.n_rows, ids, out.n_rows, out.n_cols, scale);
    });
  });
  check_launch("embedding", [&] { return rows_desc("out", out) + ", " + rows_desc("table", table); });
}

void rms_norm(void* stream, DevRows out, DevRows x, const void* w, DType w_dtype, float eps, float w_offset) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  const bool vec = vec_norm_ok(x) && vec_norm_ok(out) && vec_row_ok(w, 0, w_dtype);
  with_act_type(out.dtype, [&](auto ot) {
    with_act_type(x.dtype, [&](auto xt) {
      with_float_type(w_dtype, [&](auto wt) {
        using OT = typename decltype(ot)::type;
        using XT = typename decltype(xt)::type;
        using WT = typename decltype(wt)::type;
        if (vec) {
          const cudaError_t e = launch_pdl(
              rms_norm_vec_kernel<false, OT, XT, XT, WT>, dim3(static_cast<unsigned>(row_blocks(x.n_rows))),
              dim3(vec_norm_threads(x.n_cols)), 0, as_stream(stream), static_cast<OT*>(out.data), out.stride,
              static_cast<XT*>(x.data), static_cast<const XT*>(x.data), x.stride,
              static_cast<const XT*>(nullptr), int64_t{0}, static_cast<const WT*>(w), x.n_rows, x.n_cols, eps,
              1.0f, w_offset);
          check_cuda(e, "rms_norm", [&] { return rows_desc("x", x); });
          return;
        }
        rms_norm_kernel<OT, XT, WT>
            <<<row_blocks(x.n_rows), row_threads(x.n_cols, 1024), 0, as_stream(stream)>>>(
                static_cast<OT*>(out.data), out.stride, static_cast<const XT*>(x.data), x.stride,
                static_cast<const WT*>(w), x.n_rows, x.n_cols, eps, w_offset);
      });
    });
  });
  check_launch("rms_norm", [&] { return rows_desc("out", out) + ", " + rows_desc("x", x); });
}

void add_scaled(void* stream, DevRows x, DevRows y, float scale) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  const bool vec = vec8::rows_ok(x) && vec8::rows_ok(y);
  with_act_type(x.dtype, [&](auto xt) {
    with_act_type(y.dtype, [&](auto yt) {
      using XT = typename decltype(xt)::type;
      using YT = typename decltype(yt)::type;
      if (vec) {  // x is both the gate and the out of the element-wise kernel: each thread reads, then writes
        const vec8::Grid g = vec8::grid_for(x.n_rows, x.n_cols);
        vec8::gated_kernel<<<g.blocks, g.threads, 0, as_stream(stream)>>>(
            static_cast<XT*>(x.data), x.stride, static_cast<const XT*>(x.data), x.stride,
            static_cast<const YT*>(y.data), y.stride, x.n_rows, x.n_cols, AddScaled{scale});
        return;
      }
      add_scaled_kernel<XT, YT><<<flat_blocks(x.n_rows * x.n_cols), kThreads, 0, as_stream(stream)>>>(
          static_cast<XT*>(x.data), x.stride, static_cast<const YT*>(y.data), y.stride, x.n_rows, x.n_cols,
          scale);
    });
  });
  check_launch("add_scaled", [&] { return rows_desc("x", x) + ", " + rows_desc("y", y); });
}

void add_rms_norm(void* stream, DevRows out, DevRows x, DevRows y, const void* w, DType w_dtype, float eps,
                  float y_scale, float w_offset, const void* x_in) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  auto detail = [&] { return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("y", y); };
  if (x.n_cols > static_cast<int64_t>(kAddNormPer) * kAddNormThreads)
    throw Error("cuda", "add_rms_norm: rows longer than " + std::to_string(kAddNormPer * kAddNormThreads) +
                            " are not supported: " + detail());
  const int threads = row_threads(x.n_cols, kAddNormThreads);  // d <= kAddNormPer * threads
  const bool vec = vec_norm_ok(x) && vec_norm_ok(y) && vec_norm_ok(out) && vec_row_ok(w, 0, w_dtype) &&
                   vec_row_ok(x_in, 0, x.dtype);
  with_act_type(out.dtype, [&](auto ot) {
    with_act_type(x.dtype, [&](auto xt) {
      with_act_type(y.dtype, [&](auto yt) {
        with_float_type(w_dtype, [&](auto wt) {
          using OT = typename decltype(ot)::type;
          using XT = typename decltype(xt)::type;
          using YT = typename decltype(yt)::type;
          using WT = typename decltype(wt)::type;
          if (vec) {
            const cudaError_t e = launch_pdl(
                rms_norm_vec_kernel<true, OT, XT, YT, WT>, dim3(static_cast<unsigned>(row_blocks(x.n_rows))),
                dim3(vec_norm_threads(x.n_cols)), 0, as_stream(stream), static_cast<OT*>(out.data),
                out.stride, static_cast<XT*>(x.data), static_cast<const XT*>(x_in), x.stride,
                static_cast<const YT*>(y.data), y.stride, static_cast<const WT*>(w), x.n_rows, x.n_cols, eps,
                y_scale, w_offset);
            check_cuda(e, "add_rms_norm", detail);
            return;
          }
          add_rms_norm_kernel<OT, XT, YT, WT><<<row_blocks(x.n_rows), threads, 0, as_stream(stream)>>>(
              static_cast<OT*>(out.data), out.stride, static_cast<XT*>(x.data), static_cast<const XT*>(x_in),
              x.stride, static_cast<const YT*>(y.data), y.stride, static_cast<const WT*>(w), x.n_rows,
              x.n_cols, eps, y_scale, w_offset);
        });
      });
    });
  });
  check_launch("add_rms_norm", detail);
}

void scale(void* stream, DevRows x, float s) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  const bool vec = vec8::rows_ok(x);
  with_act_type(x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    if (vec) {
      const vec8::Grid g = vec8::grid_for(x.n_rows, x.n_cols);
      vec8::map_kernel<<<g.blocks, g.threads, 0, as_stream(stream)>>>(static_cast<XT*>(x.data), x.stride, x.n_rows,
                                                                       x.n_cols, Scale{s});
      return;
    }
    scale_kernel<XT><<<flat_blocks(x.n_rows * x.n_cols), kThreads, 0, as_stream(stream)>>>(
        static_cast<XT*>(x.data), x.stride, x.n_rows, x.n_cols, s);
  });
  check_launch("scale", [&] { return rows_desc("x", x); });
}

void silu_mul(void* stream, DevRows out, DevRows gate, DevRows up) {
  if (out.n_rows == 0 || out.n_cols == 0) return;
  const bool vec = vec8::rows_ok(out) && vec8::rows_ok(gate) && vec8::rows_ok(up);
  with_act_type(out.dtype, [&](auto ot) {
    with_act_type(gate.dtype, [&](auto gt) {
      with_act_type(up.dtype, [&](auto ut) {
        using OT = typename decltype(ot)::type;
        using GT = typename decltype(gt)::type;
        using UT = typename decltype(ut)::type;
        if (vec) {
          const vec8::Grid g = vec8::grid_for(out.n_rows, out.n_cols);
          vec8::gated_kernel<<<g.blocks, g.threads, 0, as_stream(stream)>>>(
              static_cast<OT*>(out.data), out.stride, static_cast<const GT*>(gate.data), gate.stride,
              static_cast<const UT*>(up.data), up.stride, out.n_rows, out.n_cols, SiluMul{});
          return;
        }
        silu_mul_kernel<OT, GT, UT><<<flat_blocks(out.n_rows * out.n_cols), kThreads, 0, as_stream(stream)>>>(
            static_cast<OT*>(out.data), out.stride, static_cast<const GT*>(gate.data), gate.stride,
            static_cast<const UT*>(up.data), up.stride, out.n_rows, out.n_cols);
      });
    });
  });
  check_launch("silu_mul", [&] { return rows_desc("out", out) + ", " + rows_desc("gate", gate); });
}

void softmax(void* stream, DevRows x) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  with_act_type(x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    softmax_kernel<XT><<<row_blocks(x.n_rows), row_threads(x.n_cols, 1024), 0, as_stream(stream)>>>(
        static_cast<XT*>(x.data), x.stride, x.n_rows, x.n_cols);
  });
  check_launch("softmax", [&] { return rows_desc("x", x); });
}

namespace {

std::atomic<int> g_argmax_parts{0};  // set_argmax_parts_for_testing

// Blocks per row for argmax: unless BUNSEN_ARGMAX_SPLIT=0 (read once), long rows (a vocabulary) are spread
// over blocks of ~kArgmaxPartCols columns, no more than fill about two waves of blocks over all rows; 1 keeps
// one block per row (argmax_kernel). H200 batch-1 decode, split vs one block: 1B +0.9 %, 8B 4-bit +0.7 %,
// e4b +0.5 %, 8B +0.1 %.
constexpr int64_t kArgmaxPartCols = 4096, kArgmaxSplitMin = 16384, kArgmaxMaxParts = 256;
int argmax_parts(int64_t rows, int64_t cols) {
  static const bool env_split = env_flag("BUNSEN_ARGMAX_SPLIT", true);
  const int forced = g_argmax_parts.load();
  if (forced == 0 && !env_split) return 1;
  if (forced > 0 && rows <= 65535)
    return static_cast<int>(std::min<int64_t>({forced, kArgmaxMaxParts, std::max<int64_t>(cols, 1)}));
  if (cols < kArgmaxSplitMin || rows > 65535) return 1;  // gridDim.y holds the rows
  const int64_t by_cols = (cols + kArgmaxPartCols - 1) / kArgmaxPartCols;
  const int64_t by_grid = std::max<int64_t>(1, 2 * sm_count() / std::max<int64_t>(rows, 1));
  return static_cast<int>(std::min<int64_t>({by_cols, by_grid, kArgmaxMaxParts}));
}

}  // namespace

void set_argmax_parts_for_testing(int parts) {
  g_argmax_parts.store(parts);
}

// One block per row, or argmax_parts blocks per row and a merge launch (candidate keys in the stream's
// scratch arena; the argmax runs outside the decode graphs, and the Runner recaptures them if the arena
// grows).
void argmax(void* stream, int32_t* out, DevRows x, int32_t* host_out) {
  if (x.n_rows == 0) return;
  const int parts = argmax_parts(x.n_rows, x.n_cols);
  with_act_type(x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    if (parts <= 1) {
      argmax_kernel<XT><<<row_blocks(x.n_rows), row_threads(x.n_cols, 1024), 0, as_stream(stream)>>>(
          out, host_out, static_cast<const XT*>(x.data), x.stride, x.n_rows, x.n_cols);
      return;
    }
    auto* keys = static_cast<uint64_t*>(scratch(
        stream, static_cast<size_t>(x.n_rows) * static_cast<size_t>(parts) * sizeof(uint64_t), "argmax"));
    // Chunks of whole 16-byte groups keep every block's f32 slice aligned as the row is.
    const int64_t chunk = ((x.n_cols + parts - 1) / parts + 3) / 4 * 4;
    argmax_parts_kernel<XT>
        <<<dim3(static_cast<unsigned>(parts), static_cast<unsigned>(x.n_rows)), 256, 0, as_stream(stream)>>>(
            keys, static_cast<const XT*>(x.data), x.stride, x.n_cols, chunk);
    // With PDL: the merge's launch overlaps the parts (a 2.1 us gap between them on the H100 8B trace).
    const cudaError_t e = launch_pdl(
        argmax_merge_kernel, dim3(static_cast<unsigned>((x.n_rows + kMergeWarps - 1) / kMergeWarps)),
        dim3(kMergeWarps * 32), 0, as_stream(stream), out, host_out, keys, x.n_rows, parts);
    check_cuda(e, "argmax", [&] { return rows_desc("x", x) + " (merge)"; });
  });
  check_launch("argmax", [&] { return rows_desc("x", x); });
}

void gather_rows(void* stream, DevRows out, DevRows x, const int32_t* rows) {
  if (out.n_rows == 0 || out.n_cols == 0) return;
  with_act_type(out.dtype, [&](auto ot) {
    with_act_type(x.dtype, [&](auto xt) {
      using OT = typename decltype(ot)::type;
      using XT = typename decltype(xt)::type;
      gather_rows_kernel<OT, XT><<<row_blocks(out.n_rows), row_threads(out.n_cols), 0, as_stream(stream)>>>(
          static_cast<OT*>(out.data), out.stride, static_cast<const XT*>(x.data), x.stride, x.n_rows, rows,
          out.n_rows, out.n_cols);
    });
  });
  check_launch("gather_rows", [&] { return rows_desc("out", out) + ", " + rows_desc("x", x); });
}

}  // namespace bunsen::kernels::cuda
