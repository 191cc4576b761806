// 8-wide vector access for the memory-bound CUDA kernels (rowwise.cu, activation.cu, rope_kv.cu): 8
// elements through one 16-byte access (bf16/f16) or two (f32), and the vectorised element-wise kernels
// the activations share (gate/up -> out, in-place map). Not a dispatcher: callers check alignment
// (vec8::rows_ok) and keep their scalar kernel for the rest. Invariant: values are converted with
// to_f32/from_f32, so a vectorised kernel stores the same bits as an element-by-element one.
#pragma once
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda::vec8 {

constexpr int kVec = 8;

__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename T>  // Bf16 or Half
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = to_f32(h[i]);
}

__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&v)[8]) {
  uint4 u;
  T* h = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = from_f32<T>(v[i]);
  *reinterpret_cast<uint4*>(p) = u;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// A stride of `elems` elements of dtype t keeps 16-byte alignment.
inline bool stride_ok(int64_t elems, DType t) {
  return (elems * static_cast<int64_t>(dtype_size(t))) % 16 == 0;
}

// Every row of r starts 16-byte aligned (a single row needs no stride).
inline bool rows_ok(const DevRows& r) {
  return aligned16(r.data) && (r.n_rows == 1 || stride_ok(r.stride, r.dtype));
}

// ---- element-wise kernels over [n_rows, n_cols]: grid.x covers a row's ceil(n_cols / 8) column groups,
// grid.y strides over rows; a group is 8 columns through 16-byte accesses, or (the row's last, partial
// group) its columns one by one. No division in the loop; rows must satisfy rows_ok. ----

constexpr int kThreads = 256;

// out[r, c] = op(gate[r, c], up[r, c]) (f32 math), rounded to OT.
template <typename OT, typename GT, typename UT, typename Op>
__global__ void __launch_bounds__(kThreads)
    gated_kernel(OT* out, int64_t os, const GT* gate, int64_t gs, const UT* up, int64_t us, int64_t n_rows,
                 int64_t n_cols, Op op) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c0 >= n_cols) return;
  const int64_t left = n_cols - c0;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const GT* g = gate + r * gs + c0;
    const UT* u = up + r * us + c0;
    OT* o = out + r * os + c0;
    if (left >= kVec) {
      float gv[kVec], uv[kVec];
      load8(g, gv);
      load8(u, uv);
#pragma unroll
      for (int i = 0; i < kVec; ++i) gv[i] = op(gv[i], uv[i]);
      store8(o, gv);
    } else {
      for (int64_t i = 0; i < left; ++i) o[i] = from_f32<OT>(op(to_f32(g[i]), to_f32(u[i])));
    }
  }
}

// x[r, c] = op(x[r, c]) in place.
template <typename XT, typename Op>
__global__ void __launch_bounds__(kThreads) map_kernel(XT* x, int64_t xs, int64_t n_rows, int64_t n_cols, Op op) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c0 >= n_cols) return;
  const int64_t left = n_cols - c0;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    XT* p = x + r * xs + c0;
    if (left >= kVec) {
      float v[kVec];
      load8(p, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = op(v[i]);
      store8(p, v);
    } else {
      for (int64_t i = 0; i < left; ++i) p[i] = from_f32<XT>(op(to_f32(p[i])));
    }
  }
}

// The launch shape of gated_kernel / map_kernel: 256 threads per block when the grid fills the GPU
// (prefill), 64 when a few rows would leave most SMs idle (decode); at most 65535 row blocks.
struct Grid {
  dim3 blocks, threads;
};

inline Grid grid_for(int64_t n_rows, int64_t n_cols) {
  const int64_t groups = (n_cols + kVec - 1) / kVec;
  const int64_t row_blocks = n_rows < 65535 ? n_rows : 65535;
  int64_t threads = kThreads;
  if (row_blocks * ((groups + kThreads - 1) / kThreads) < 2 * static_cast<int64_t>(sm_count())) threads = 64;
  const int64_t fit = (groups + 31) / 32 * 32;  // no more threads than a row has groups
  if (fit < threads) threads = fit;
  const int64_t col_blocks = (groups + threads - 1) / threads;
  return {dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(row_blocks)),
          dim3(static_cast<unsigned>(threads))};
}

}  // namespace bunsen::kernels::cuda::vec8
