// The rotation every CUDA rope path applies (rope_kv.cu's kernels and the q/k/v GEMV with the rope folded
// into its store, gemv_fused.cu), in one place so they round alike. Not the cos/sin table: callers compute
// sincosf((float)pos * inv_freq[i]) and multiply both by attention_scaling first.
// Invariants: explicit fmas, so a rotated pair has the same bits whichever kernel computes it.
#pragma once

namespace bunsen::kernels::cuda {

// The rotated pair (x1 c - x2 s, x2 c + x1 s); c and s already carry attention_scaling.
__device__ __forceinline__ float2 rotate_values(float x1, float x2, float c, float s) {
  return make_float2(fmaf(x1, c, -(x2 * s)), fmaf(x2, c, x1 * s));
}

}  // namespace bunsen::kernels::cuda
