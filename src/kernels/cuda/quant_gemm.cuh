// Internal interface between the two halves of cuda::linear_q: the GEMV (gemv_q.cu, small m, and the
// fallback for any m) and the dequantize-then-cuBLASLt path for large m (dequant_q.cu).
// Not public: quant_ops.h's linear_q (in gemv_q.cu) chooses the path. Invariant: out = x · dequant(w)ᵀ
// (+ bias) on both paths; rows of out that a path reports done are complete, bias included.
#pragma once
#include "kernels/cuda/quant_common.cuh"

namespace bunsen::kernels::cuda {

// Rows [begin, rows) of w: a view, no copy.
inline DevQuant quant_rows_from(const DevQuant& w, int64_t begin) {
  DevQuant s = w;
  const int64_t sb = static_cast<int64_t>(dtype_size(w.sb_dtype));
  s.packed = w.packed + begin * w.packed_stride;
  s.scales = static_cast<const char*>(w.scales) + begin * w.sb_stride * sb;
  s.biases = static_cast<const char*>(w.biases) + begin * w.sb_stride * sb;
  s.rows = w.rows - begin;
  return s;
}

// Large-m linear_q: chunks of weight rows dequantized to bf16 in the stream's scratch arena, each
// multiplied by cuBLASLt into its columns of out (bias added per chunk). Returns how many leading weight
// rows (columns of out) are done: w.rows, or fewer when cuBLASLt offered no algorithm for a chunk (the
// caller finishes the rest with the GEMV). Throws Error("cuda", ...) on a failed call.
int64_t linear_q_gemm(cudaStream_t stream, DevRows out, DevRows x, const DevQuant& w, const void* bias,
                      DType bias_dtype);

}  // namespace bunsen::kernels::cuda
