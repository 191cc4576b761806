// CUDA kernels of the fused row-wise norms (rowwise_fused_ops.h): rms_norm_qkv (the q/k/v head norms of one
// attention layer in one launch, one warp per head row) and post_norm_residual (post-norm + residual add +
// scale + next norm, one block per row with the row in registers, structured like rowwise.cu's
// rms_norm_vec_kernel). Not the unfused ops (rowwise.cu) and not a validator (dispatch_rowwise.cpp).
// Invariants: same formulas as rms_norm (x * (1 / sqrt(mean(x^2) + eps)) * (w + w_offset), mean in f32);
// every value the unfused ops would store is rounded to its tensor's dtype at the same point; a thread only
// ever rewrites elements it read itself (in-place q/k/v and x are safe); weights are read with their run-time
// dtype (load_any), activations through compile-time types; both kernels use programmatic dependent launch.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rowwise_fused_ops.h"
#include "kernels/cuda/vec8.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kPer = 8;  // elements per thread and access (vec8)

// 8 weight values from element c on (null: ones), plus w_offset.
__device__ __forceinline__ void load_w8(const DevNormWeight& w, int64_t c, float off, float (&v)[kPer]) {
  if (w.data == nullptr) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) v[i] = 1.0f + off;
    return;
  }
  if (w.dtype == DType::kF32)
    vec8::load8(static_cast<const float*>(w.data) + c, v);
  else if (w.dtype == DType::kBF16)
    vec8::load8(static_cast<const Bf16*>(w.data) + c, v);
  else
    vec8::load8(static_cast<const Half*>(w.data) + c, v);
#pragma unroll
  for (int i = 0; i < kPer; ++i) v[i] += off;
}

__device__ __forceinline__ float load_w1(const DevNormWeight& w, int64_t c, float off) {
  return (w.data == nullptr ? 1.0f : load_any(w.data, w.dtype, c)) + off;
}

// ---- rms_norm_qkv: a flat list of head rows (v rows unless v_from_k, then k rows, then q rows), one warp
// each. A k row with v_from_k also writes its v row from the same raw values. ----

constexpr int kQkvWarps = 4;

struct QkvSeg {
  char* x = nullptr;   // rows normalised in place
  int64_t stride = 0;  // elements
  int64_t rows = 0;
  DevNormWeight w;
  char* out2 = nullptr;  // v_from_k: v rows (same row index), else null
  int64_t stride2 = 0;
  DevNormWeight w2;
};

struct QkvArgs {
  QkvSeg seg[3];
  int n_seg = 0;
  int64_t head_dim = 0;
  float eps = 1e-6f;
};

// One head row: x = rms_norm(x) * w (and out2 = rms_norm(x) * w2 from the values read before the write).
template <bool kVec, typename XT>
__device__ __forceinline__ void qkv_row(const QkvSeg& s, int64_t r, int64_t d, float eps, int lane) {
  XT* x = reinterpret_cast<XT*>(s.x) + r * s.stride;
  XT* o2 = s.out2 ? reinterpret_cast<XT*>(s.out2) + r * s.stride2 : nullptr;
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = static_cast<int64_t>(lane) * kPer; c < d; c += 32 * kPer) {
      float v[kPer];
      vec8::load8(x + c, v);
#pragma unroll
      for (int i = 0; i < kPer; ++i) ss = fmaf(v[i], v[i], ss);
    }
  } else {
    for (int64_t c = lane; c < d; c += 32) {
      const float v = to_f32(x[c]);
      ss = fmaf(v, v, ss);
    }
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if constexpr (kVec) {
    for (int64_t c = static_cast<int64_t>(lane) * kPer; c < d; c += 32 * kPer) {
      float v[kPer], w[kPer], y[kPer];
      vec8::load8(x + c, v);
      if (o2) {
        load_w8(s.w2, c, 0.0f, w);
#pragma unroll
        for (int i = 0; i < kPer; ++i) y[i] = v[i] * inv * w[i];
        vec8::store8(o2 + c, y);
      }
      load_w8(s.w, c, 0.0f, w);
#pragma unroll
      for (int i = 0; i < kPer; ++i) y[i] = v[i] * inv * w[i];
      vec8::store8(x + c, y);
    }
  } else {
    for (int64_t c = lane; c < d; c += 32) {
      const float v = to_f32(x[c]);
      if (o2) o2[c] = from_f32<XT>(v * inv * load_w1(s.w2, c, 0.0f));
      x[c] = from_f32<XT>(v * inv * load_w1(s.w, c, 0.0f));
    }
  }
}

template <bool kVec, typename XT>
__global__ void __launch_bounds__(kQkvWarps * 32) rms_norm_qkv_kernel(QkvArgs a, int64_t total_rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kQkvWarps;
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kQkvWarps + (threadIdx.x >> 5); g < total_rows;
       g += warps) {
    int64_t r = g;
    int s = 0;
    while (s + 1 < a.n_seg && r >= a.seg[s].rows) r -= a.seg[s++].rows;  // warp-uniform
    qkv_row<kVec, XT>(a.seg[s], r, a.head_dim, a.eps, lane);
  }
}

// ---- post_norm_residual: one block per row; thread t owns elements t*8..t*8+7 (kVec) or t + i*blockDim ----

// v = this thread's elements of a d-long row, 0 past its end: eight(j, v) fills elements j..j+7 (kVec), one(j)
// returns element j.
template <bool kVec, typename Eight, typename One>
__device__ __forceinline__ void gather_mine(int64_t d, float (&v)[kPer], Eight eight, One one) {
  if constexpr (kVec) {
    const int64_t j = static_cast<int64_t>(threadIdx.x) * kPer;
    if (j < d) {
      eight(j, v);
    } else {
#pragma unroll
      for (int i = 0; i < kPer; ++i) v[i] = 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      v[i] = j < d ? one(j) : 0.0f;
    }
  }
}

template <bool kVec, typename T>
__device__ __forceinline__ void load_mine(const T* row, int64_t d, float (&v)[kPer]) {
  gather_mine<kVec>(
      d, v, [&](int64_t j, float(&e)[kPer]) { vec8::load8(row + j, e); }, [&](int64_t j) { return to_f32(row[j]); });
}

template <bool kVec, typename T>
__device__ __forceinline__ void store_mine(T* row, int64_t d, const float (&v)[kPer]) {
  if constexpr (kVec) {
    const int64_t j = static_cast<int64_t>(threadIdx.x) * kPer;
    if (j < d) vec8::store8(row + j, v);
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < d) row[j] = from_f32<T>(v[i]);
    }
  }
}

template <bool kVec>
__device__ __forceinline__ void load_w_mine(const DevNormWeight& w, int64_t d, float off, float (&v)[kPer]) {
  gather_mine<kVec>(
      d, v, [&](int64_t j, float(&e)[kPer]) { load_w8(w, j, off, e); }, [&](int64_t j) { return load_w1(w, j, off); });
}

constexpr int kPostMaxThreads = static_cast<int>(kPostNormMaxCols / kPer);  // 1024

template <bool kVec, bool kNext, typename XT, typename YT, typename OT>
__global__ void __launch_bounds__(kPostMaxThreads) post_norm_residual_kernel(DevPostNormResidual a) {
  __shared__ float red[32];
  const int64_t d = a.x.n_cols;
  pdl_launch_dependents();
  // The weights are no kernel's output: loaded before the wait; x and y together after it, so a row costs
  // one round trip to memory before its reductions.
  float w[kPer], wn[kPer];
  load_w_mine<kVec>(a.w_post, d, a.w_offset, w);
  if constexpr (kNext) load_w_mine<kVec>(a.w_next, d, a.w_offset, wn);
  pdl_wait();
  for (int64_t r = blockIdx.x; r < a.x.n_rows; r += gridDim.x) {
    XT* xr = static_cast<XT*>(a.x.data) + r * a.x.stride;
    float y[kPer], x[kPer];
    load_mine<kVec>(static_cast<const YT*>(a.y.data) + r * a.y.stride, d, y);
    load_mine<kVec>(xr, d, x);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) ss = fmaf(y[i], y[i], ss);  // out-of-row elements are 0
    ss = block_sum(ss, red);
    const float inv_y = 1.0f / sqrtf(ss / static_cast<float>(d) + a.eps);
    float ss2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      // The unfused ops store rms_norm(y) * w_post in y's dtype, add it to x (stored), then scale x (stored);
      // __fmul_rn keeps the compiler from contracting the product into the add.
      const float t = to_f32(from_f32<YT>(__fmul_rn(__fmul_rn(y[i], inv_y), w[i])));
      const float s = to_f32(from_f32<XT>(x[i] + t));
      x[i] = to_f32(from_f32<XT>(s * a.x_scale));
      ss2 = fmaf(x[i], x[i], ss2);
    }
    store_mine<kVec>(xr, d, x);
    if constexpr (kNext) {
      ss2 = block_sum(ss2, red);
      const float inv_x = 1.0f / sqrtf(ss2 / static_cast<float>(d) + a.eps);
#pragma unroll
      for (int i = 0; i < kPer; ++i) x[i] = x[i] * inv_x * wn[i];
      store_mine<kVec>(static_cast<OT*>(a.out.data) + r * a.out.stride, d, x);
    }
  }
}

bool aligned_rows(const DevRows& r) {
  return r.data == nullptr || r.n_rows == 0 || vec8::rows_ok(r);
}

bool aligned_weight(const DevNormWeight& w) {
  return w.data == nullptr || vec8::aligned16(w.data);
}

int64_t capped_blocks(int64_t want) {
  return want < (int64_t{1} << 16) ? want : (int64_t{1} << 16);
}

}  // namespace

void rms_norm_qkv(void* stream, const DevQkvNorm& a) {
  QkvArgs k;
  const DevRows* xs[3] = {&a.v, &a.k, &a.q};
  const DevNormWeight* ws[3] = {&a.v_w, &a.k_w, &a.q_w};
  int64_t total = 0, d = 0;
  DType dtype = DType::kF32;
  bool vec = true;
  for (int i = 0; i < 3; ++i) {
    const DevRows& x = *xs[i];
    if (x.data == nullptr || x.n_rows == 0 || x.n_cols == 0) continue;
    if (i == 0 && a.v_from_k) continue;  // written by the k rows
    QkvSeg& s = k.seg[k.n_seg++];
    s.x = static_cast<char*>(x.data);
    s.stride = x.stride;
    s.rows = x.n_rows;
    s.w = *ws[i];
    if (i == 1 && a.v_from_k) {
      s.out2 = static_cast<char*>(a.v.data);
      s.stride2 = a.v.stride;
      s.w2 = a.v_w;
      vec = vec && aligned_rows(a.v) && aligned_weight(a.v_w);
    }
    vec = vec && aligned_rows(x) && aligned_weight(*ws[i]);
    total += x.n_rows;
    d = x.n_cols;
    dtype = x.dtype;
  }
  if (total == 0) return;
  k.head_dim = d;
  k.eps = a.eps;
  vec = vec && d % kPer == 0;
  const auto blocks = static_cast<unsigned>(capped_blocks((total + kQkvWarps - 1) / kQkvWarps));
  auto detail = [&] { return rows_desc("q", a.q) + ", " + rows_desc("k", a.k) + ", " + rows_desc("v", a.v); };
  with_act_type(dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    const cudaError_t e = vec ? launch_pdl(rms_norm_qkv_kernel<true, XT>, dim3(blocks), dim3(kQkvWarps * 32),
                                           0, as_stream(stream), k, total)
                              : launch_pdl(rms_norm_qkv_kernel<false, XT>, dim3(blocks), dim3(kQkvWarps * 32),
                                           0, as_stream(stream), k, total);
    check_cuda(e, "rms_norm_qkv", detail);
  });
}

void post_norm_residual(void* stream, const DevPostNormResidual& a) {
  const int64_t n = a.x.n_rows, d = a.x.n_cols;
  if (n == 0 || d == 0) return;
  auto detail = [&] {
    return rows_desc("x", a.x) + ", " + rows_desc("y", a.y) + ", " + rows_desc("out", a.out);
  };
  if (d > kPostNormMaxCols)
    throw Error("cuda", "post_norm_residual: rows longer than " + std::to_string(kPostNormMaxCols) +
                            " are not supported: " + detail());
  const bool next = a.out.data != nullptr;
  const bool vec = d % kPer == 0 && vec8::rows_ok(a.x) && vec8::rows_ok(a.y) &&
                   (!next || vec8::rows_ok(a.out)) && aligned_weight(a.w_post) && aligned_weight(a.w_next);
  const int per_thread_rows = static_cast<int>((d + kPer - 1) / kPer);  // threads that own >= 1 element
  const int threads = vec ? (per_thread_rows + 31) / 32 * 32 : row_threads(per_thread_rows, kPostMaxThreads);
  const dim3 grid(static_cast<unsigned>(capped_blocks(n))), block(threads);
  with_act_type(a.x.dtype, [&](auto xt) {
    with_act_type(a.y.dtype, [&](auto yt) {
      with_act_type(next ? a.out.dtype : a.x.dtype, [&](auto ot) {
        using XT = typename decltype(xt)::type;
        using YT = typename decltype(yt)::type;
        using OT = typename decltype(ot)::type;
        cudaError_t e;
        if (vec && next)
          e = launch_pdl(post_norm_residual_kernel<true, true, XT, YT, OT>, grid, block, 0, as_stream(stream),
                         a);
        else if (vec)
          e = launch_pdl(post_norm_residual_kernel<true, false, XT, YT, OT>, grid, block, 0,
                         as_stream(stream), a);
        else if (next)
          e = launch_pdl(post_norm_residual_kernel<false, true, XT, YT, OT>, grid, block, 0,
                         as_stream(stream), a);
        else
          e = launch_pdl(post_norm_residual_kernel<false, false, XT, YT, OT>, grid, block, 0,
                         as_stream(stream), a);
        check_cuda(e, "post_norm_residual", detail);
      });
    });
  });
}

}  // namespace bunsen::kernels::cuda
