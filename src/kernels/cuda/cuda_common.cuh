// Shared pieces of the CUDA backend's .cu files: error checks that name the op, element conversions
// between storage dtypes and f32, host-side dtype -> template dispatch, warp reductions, the per-stream
// scratch arena and device properties. Not public (cuda_ops.h is). Invariants: messages are built only
// on failure (the decode loop allocates nothing); every kernel launch is followed by check_launch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

using Bf16 = __nv_bfloat16;
using Half = __half;

// ---- errors ----

[[noreturn]] void throw_cuda(const char* op, cudaError_t e, const std::string& detail);

// Throws Error("cuda", "<op>: <cuda error> <detail()>") when e is not cudaSuccess.
template <typename Detail>
inline void check_cuda(cudaError_t e, const char* op, Detail&& detail) {
  if (e != cudaSuccess) throw_cuda(op, e, detail());
}

// Checks the launch just made (configuration errors; asynchronous faults surface at the next sync).
template <typename Detail>
inline void check_launch(const char* op, Detail&& detail) {
  check_cuda(cudaGetLastError(), op, detail);
}

std::string rows_desc(const char* name, const DevRows& r);    // "x [3, 64] bf16 (stride 64)"
std::string heads_desc(const char* name, const DevHeads& h);  // "q [5, 8, 128] f32"

inline cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// ---- scratch arena (memory.cu) ----

// At least `bytes` bytes of device memory, 256-byte aligned, owned by (current device, stream) and
// valid for work enqueued on that stream until the next scratch() call on it that grows the arena.
void* scratch(void* stream, size_t bytes, const char* op);

inline size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// ---- device properties (memory.cu), cached per device ----
int sm_count();
// Raises a kernel's dynamic shared memory limit once per (kernel, device).
void allow_dynamic_smem(const void* kernel, size_t bytes, const char* op);

// ---- element conversions ----

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(Bf16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(Half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ Bf16 from_f32<Bf16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ Half from_f32<Half>(float v) {
  return __float2half_rn(v);
}

// Element i of an array whose dtype is known only at run time (f32, f16 or bf16).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(p)[i];
  if (t == DType::kBF16) return __bfloat162float(static_cast<const Bf16*>(p)[i]);
  return __half2float(static_cast<const Half*>(p)[i]);
}

__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
  if (t == DType::kF32)
    static_cast<float*>(p)[i] = v;
  else if (t == DType::kBF16)
    static_cast<Bf16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<Half*>(p)[i] = __float2half_rn(v);
}

// ---- host-side dtype -> type dispatch ----

template <typename T>
struct Tag {
  using type = T;
};

// f(Tag<float>) or f(Tag<Bf16>): the activation dtypes the CUDA backend accepts.
template <typename F>
inline void with_act_type(DType t, F&& f) {
  if (t == DType::kF32)
    f(Tag<float>{});
  else if (t == DType::kBF16)
    f(Tag<Bf16>{});
  else
    throw Error("cuda", std::string("activation dtype ") + dtype_name(t) + " is not f32 or bf16");
}

// f(Tag<float>), f(Tag<Half>) or f(Tag<Bf16>): the weight dtypes.
template <typename F>
inline void with_float_type(DType t, F&& f) {
  if (t == DType::kF32)
    f(Tag<float>{});
  else if (t == DType::kF16)
    f(Tag<Half>{});
  else if (t == DType::kBF16)
    f(Tag<Bf16>{});
  else
    throw Error("cuda", std::string("dtype ") + dtype_name(t) + " is not f32, f16 or bf16");
}

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Max that ignores NaN (as fmaxf does), so a NaN score poisons the sum, not the max.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 and <= 1024; every thread gets the result.
// `red` is __shared__ float[32]; callers may reuse it only after the call returns.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : -INFINITY;
  return warp_max(v);
}

// Threads per block for a row of n elements: a multiple of 32 in [32, 1024].
inline int row_threads(int64_t n, int max_threads = 256) {
  int t = 32;
  while (t < max_threads && t < n) t *= 2;
  return t;
}

}  // namespace bunsen::kernels::cuda
