// The norm prologue of the GEMV kernels (gemv_body.cuh, launched by gemv_fused.cu) (linear.cuh's GemvNorm):
// every block computes its x = bf16(rms_norm(x_in + y * y_scale) * (w + w_offset)) into dynamic shared memory
// with rms_norm_vec_kernel's arithmetic and reduction tree (rowwise.cu), so the same bits as add_rms_norm
// followed by the plain GEMV; block 0 also stores x_out = x_in + y * y_scale. The post-norm form
// (GemvNorm::y_w: Gemma's sandwich norms) adds y as post_norm_residual_kernel does (rowwise_fused.cu):
// rms_norm(y) * (y_w + w_offset) rounded to y's dtype, then the scale. Device code only, included by
// gemv_body.cuh. Invariants: keep in step with rms_norm_vec_kernel<kAdd, Bf16, float, YT, WT> and
// post_norm_residual_kernel<true, true, float, YT, Bf16>; d % 8 == 0, d <= kGemvNormMaxK, the x_in/y/w/y_w
// rows 16-byte aligned (gemv_fused.cu's norm_ok checks all of it).
#pragma once
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/vec8.cuh"

namespace bunsen::kernels::cuda::gemv_norm {

// Virtual threads of rms_norm_vec_kernel per thread: that kernel runs d / 8 threads (rounded up to whole
// warps) of 8 elements each; thread t of a kThreads block plays its threads t + s * kThreads, so its warps
// are this block's warps (warp + s * kThreads / 32) lane for lane. Dynamic shared memory: x [m, d] bf16,
// then the norm weights [d] in their dtype (copied before the PDL wait). Few registers on top of the GEMV's
// early weight loads (the small launches keep their occupancy): the sums of squares are taken first, then
// x_in and y are read again (L1) for the normalised values.
template <int kThreads>
constexpr int kVirt = static_cast<int>(kGemvNormMaxK / 8 / kThreads);

__device__ __forceinline__ void load8_any(const void* p, bool bf16, int64_t j, float (&v)[8]) {
  if (bf16)
    vec8::load8(static_cast<const Bf16*>(p) + j, v);
  else
    vec8::load8(static_cast<const float*>(p) + j, v);
}

// The norm weights' copy in shared memory (after x's m * d bf16 values).
__device__ __forceinline__ char* w_smem(char* smem, int64_t m, int64_t d) {
  return smem + m * d * static_cast<int64_t>(sizeof(Bf16));
}

// Issues the asynchronous copy of this thread's norm weights (its virtual threads' 8 elements each).
// Into dst (16-byte aligned shared memory of d elements of the weights' dtype).
template <int kThreads>
__device__ __forceinline__ void prefetch_w_to(const GemvNorm& nm, int64_t d, char* dst) {
  const int64_t wsz = nm.w_bf16 ? 2 : 4;
  const char* src = static_cast<const char*>(nm.w);
#pragma unroll
  for (int s = 0; s < kVirt<kThreads>; ++s) {
    const int64_t j = static_cast<int64_t>(threadIdx.x + s * kThreads) * 8;
    if (j >= d) continue;
    for (int64_t b = 0; b < 8 * wsz; b += 16) cp_async_16(dst + j * wsz + b, src + j * wsz + b);
  }
  cp_async_commit_group();
}

template <int kThreads>
__device__ __forceinline__ void prefetch_w(const GemvNorm& nm, int64_t m, int64_t d, char* smem) {
  prefetch_w_to<kThreads>(nm, d, w_smem(smem, m, d));
}

// x_out = x_in + y * y_scale of one virtual thread's 8 elements (row i, from column j).
__device__ __forceinline__ void sum8(const GemvNorm& nm, int i, int64_t j, float (&v)[8]) {
  float yv[8];
  vec8::load8(nm.x_in + i * nm.x_stride + j, v);
  load8_any(nm.y, nm.y_bf16, i * nm.y_stride + j, yv);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = fmaf(yv[e], nm.y_scale, v[e]);
}

// The post-norm form's x_out of one virtual thread's 8 elements (row i, from column j), given y's 1 / rms:
// (x_in + y_t(y * inv_y * (y_w + w_offset))) * x_scale with post_norm_residual_kernel's roundings (__fmul_rn:
// no contraction into the add).
__device__ __forceinline__ void post8(const GemvNorm& nm, int i, int64_t j, float inv_y, float (&v)[8]) {
  float yv[8], wv[8];
  vec8::load8(nm.x_in + i * nm.x_stride + j, v);
  load8_any(nm.y, nm.y_bf16, i * nm.y_stride + j, yv);
  load8_any(nm.y_w, nm.y_w_bf16, j, wv);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float t = __fmul_rn(__fmul_rn(yv[e], inv_y), wv[e] + nm.w_offset);
    if (nm.y_bf16) t = __bfloat162float(__float2bfloat16_rn(t));
    v[e] = (v[e] + t) * nm.x_scale;
  }
}

// The block's total of the virtual threads' values (each already a chain over its 8 elements): block_sum's
// tree over rms_norm_vec_kernel's warps. Every thread gets it.
template <int kThreads>
__device__ __forceinline__ float vsum(float (&ss)[kVirt<kThreads>], float* red, int n_vwarps) {
  constexpr int kWarps = kThreads / 32, kV = kVirt<kThreads>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int s = 0; s < kV; ++s) ss[s] = warp_sum(ss[s]);
  __syncthreads();  // red may still be read for the previous sum
  if (lane == 0)
#pragma unroll
    for (int s = 0; s < kV; ++s)
      if (warp + s * kWarps < n_vwarps) red[warp + s * kWarps] = ss[s];
  __syncthreads();
  return warp_sum(lane < n_vwarps ? red[lane] : 0.0f);
}

// x[i, :] = rms_norm(x_out[i, :]) * (w + w_offset) for the launch's m <= kM rows, x_out = x_in + y * y_scale
// (stored by block 0): rms_norm_vec_kernel's formulas, fma chain per virtual thread and block_sum's tree, so
// the same bits once rounded to bf16. Each thread hands its 8 values of row i from column j to store(i, j,
// v); those calls are uniform over a warp whenever d / 8 is a multiple of 32 (a store may shuffle then). The
// weights are read at wsm (this thread's copies complete). Ends with a barrier.
template <int kThreads, int kM, typename Store>
__device__ __forceinline__ void prologue_with(const GemvNorm& nm, int64_t m, int64_t d, const char* wsm,
                                              Store&& store) {
  constexpr int kWarps = kThreads / 32, kV = kVirt<kThreads>;
  __shared__ float red[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int n_vwarps = static_cast<int>((d / 8 + 31) / 32);
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    if (i >= m) break;
    float ss[kV];
#pragma unroll
    for (int s = 0; s < kV; ++s) {
      const int64_t j = static_cast<int64_t>(t + s * kThreads) * 8;
      ss[s] = 0.0f;
      if (j < d) {
        float v[8];
        sum8(nm, i, j, v);
        if (blockIdx.x == 0) vec8::store8(nm.x_out + i * nm.x_stride + j, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss[s] = fmaf(v[e], v[e], ss[s]);
      }
      ss[s] = warp_sum(ss[s]);
    }
    __syncthreads();  // red may still be read for the previous row
    if (lane == 0)
#pragma unroll
      for (int s = 0; s < kV; ++s)
        if (warp + s * kWarps < n_vwarps) red[warp + s * kWarps] = ss[s];
    __syncthreads();
    const float tot = warp_sum(lane < n_vwarps ? red[lane] : 0.0f);
    const float inv = 1.0f / sqrtf(tot / static_cast<float>(d) + nm.eps);
#pragma unroll
    for (int s = 0; s < kV; ++s) {
      const int64_t j = static_cast<int64_t>(t + s * kThreads) * 8;
      if (j >= d) continue;
      float v[8], wv[8];
      sum8(nm, i, j, v);
      load8_any(wsm, nm.w_bf16, j, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv * (wv[e] + nm.w_offset);
      store(i, j, v);
    }
  }
  __syncthreads();
}

// smem's x[i, :] = bf16(prologue_with's values), the weights copied by prefetch_w. Ends with a barrier.
template <int kThreads, int kM>
__device__ __forceinline__ void prologue(const GemvNorm& nm, int64_t m, int64_t d, char* smem) {
  Bf16* h = reinterpret_cast<Bf16*>(smem);
  cp_async_wait_group<0>();  // this thread's own weight copies (each thread reads only those)
  prologue_with<kThreads, kM>(nm, m, d, w_smem(smem, m, d),
                              [&](int i, int64_t j, const float(&v)[8]) { vec8::store8(h + i * d + j, v); });
}

// prologue's post-norm form (nm.y_w set; its own instances, so the plain form's kernels keep their
// registers): smem's x[i, :] = bf16(rms_norm(x_out[i, :]) * (w + w_offset)), x_out = post8's, stored by block
// 0, with post_norm_residual_kernel's two reductions (y's sum of squares, then x_out's). Ends with a barrier.
template <int kThreads, int kM>
__device__ __forceinline__ void post_prologue(const GemvNorm& nm, int64_t m, int64_t d, char* smem) {
  constexpr int kV = kVirt<kThreads>;
  __shared__ float red[32];
  const int t = threadIdx.x;
  const int n_vwarps = static_cast<int>((d / 8 + 31) / 32);
  Bf16* h = reinterpret_cast<Bf16*>(smem);
  const char* wsm = w_smem(smem, m, d);
  cp_async_wait_group<0>();  // this thread's own weight copies (each thread reads only those)
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    if (i >= m) break;
    float ss[kV];
#pragma unroll
    for (int s = 0; s < kV; ++s) {
      const int64_t j = static_cast<int64_t>(t + s * kThreads) * 8;
      ss[s] = 0.0f;
      if (j < d) {
        float yv[8];
        load8_any(nm.y, nm.y_bf16, i * nm.y_stride + j, yv);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss[s] = fmaf(yv[e], yv[e], ss[s]);
      }
    }
    const float inv_y = 1.0f / sqrtf(vsum<kThreads>(ss, red, n_vwarps) / static_cast<float>(d) + nm.eps);
#pragma unroll
    for (int s = 0; s < kV; ++s) {
      const int64_t j = static_cast<int64_t>(t + s * kThreads) * 8;
      ss[s] = 0.0f;
      if (j < d) {
        float v[8];
        post8(nm, i, j, inv_y, v);
        if (blockIdx.x == 0) vec8::store8(nm.x_out + i * nm.x_stride + j, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss[s] = fmaf(v[e], v[e], ss[s]);
      }
    }
    const float inv = 1.0f / sqrtf(vsum<kThreads>(ss, red, n_vwarps) / static_cast<float>(d) + nm.eps);
#pragma unroll
    for (int s = 0; s < kV; ++s) {
      const int64_t j = static_cast<int64_t>(t + s * kThreads) * 8;
      if (j >= d) continue;
      float v[8], wv[8];
      post8(nm, i, j, inv_y, v);
      load8_any(wsm, nm.w_bf16, j, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv * (wv[e] + nm.w_offset);
      vec8::store8(h + i * d + j, v);
    }
  }
  __syncthreads();
}

}  // namespace bunsen::kernels::cuda::gemv_norm
