// Device helpers shared by the linear-attention kernels (linear_attn.cu: conv1d, recurrent delta rule,
// gated RMSNorm; linear_attn_fused.cu: the three fused for decode steps): the activations, the l2-norm of
// one head into shared memory and the recurrent kernel's tile geometry. Not a kernel. Invariants: the fused
// kernel uses these same functions and constants so its f32 math (conv, l2-norm, state update) is the
// three-launch path's, operation for operation.
#pragma once
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/linear_attn_ops.h"

namespace bunsen::kernels::cuda::linear_attn {

constexpr int kMaxConvKernel = 8;

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

constexpr int kDeltaTile = 32;  // state columns per block: one per lane
constexpr int kDeltaWarps = 8;  // warps per block, each holding a slice of the columns' rows
constexpr int kDeltaRows = (kMaxDeltaHeadDim + kDeltaWarps - 1) / kDeltaWarps;  // state rows per thread

// dst[0:d] = v * scale / sqrt(sum v^2 + 1e-6) for thread i's element v (threads >= d pass 0 and store
// nothing); all threads call it. The sum is block_sum's order, so equal inputs give equal bits.
__device__ __forceinline__ void l2_store(float v, int d, float scale, float* dst, float* red) {
  const float ss = block_sum(v * v, red);
  if (static_cast<int>(threadIdx.x) < d) dst[threadIdx.x] = v * scale * rsqrtf(ss + 1e-6f);
}

// One token of the gated delta rule on this thread's state rows i = warp + kDeltaWarps r (< dk) of its column:
// S *= decay, then the thread's partial sum of (S^T k) over those rows.
__device__ __forceinline__ float decay_rows(float (&S)[kDeltaRows], const float* k, int warp, int dk, float decay) {
  float pm = 0.0f;
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    if (i < dk) {
      S[r] *= decay;
      pm += S[r] * k[i];
    }
  }
  return pm;
}

// The rest of the token's update: S += k delta on the same rows, then the thread's partial sum of (S^T q).
__device__ __forceinline__ float update_rows(float (&S)[kDeltaRows], const float* q, const float* k, int warp, int dk,
                                             float delta) {
  float po = 0.0f;
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    if (i < dk) {
      S[r] += k[i] * delta;
      po += S[r] * q[i];
    }
  }
  return po;
}

// The column's total of the warps' partial sums part[w][lane], in warp order (every block sums alike).
__device__ __forceinline__ float sum_warps(const float (&part)[kDeltaWarps][kDeltaTile], int lane) {
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kDeltaWarps; ++w) s += part[w][lane];
  return s;
}

}  // namespace bunsen::kernels::cuda::linear_attn
