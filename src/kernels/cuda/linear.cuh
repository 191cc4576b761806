// Internal interface between the two halves of cuda::linear: the hand-written GEMV (gemv.cu, small m,
// also the fallback for any m) and the cuBLASLt GEMM (gemm.cu, larger m), plus the shared epilogue.
// Not public: cuda_ops.h's linear() (in gemv.cu) chooses the path. Invariant: out = x · wᵀ (+ bias)
// with f32 accumulation on both paths; x, w, out are row-major with contiguous rows.
#pragma once
#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

// One GEMV launch: at most kGemvMaxM rows of x.
struct GemvArgs {
  const void* w = nullptr;  // [n, k] f32|f16|bf16, row stride w_stride
  const void* x = nullptr;  // [m, k] f32|bf16, row stride x_stride
  void* out = nullptr;      // [m, n] f32|bf16, row stride out_stride
  const void* bias = nullptr;
  int64_t w_stride = 0, x_stride = 0, out_stride = 0;
  int64_t m = 0, n = 0, k = 0;
  DType w_dtype = DType::kBF16, x_dtype = DType::kF32, out_dtype = DType::kF32, bias_dtype = DType::kF32;
};

// Runs the GEMV kernels over all rows of x (chunks of kGemvMaxM rows).
void gemv(cudaStream_t stream, GemvArgs a);

// out[i, j] = src[i, j] (0 when src is null) + bias[j] (when bias is not null), converted to out's
// dtype. src may be out itself (same dtype f32 and stride).
void linear_epilogue(cudaStream_t stream, DevRows out, const float* src, int64_t src_stride, const void* bias,
                     DType bias_dtype);

// out = x · wᵀ (+ bias) through cuBLASLt. False when cuBLASLt offers no algorithm for these shapes and
// alignments (the caller then uses the GEMV kernels); throws Error("cuda", ...) on a failed call.
bool gemm_cublaslt(cudaStream_t stream, DevRows out, DevRows x, DevRows w, const void* bias,
                   DType bias_dtype);

}  // namespace bunsen::kernels::cuda
