// cuda::linear's entry point and its small-m path: a bandwidth-bound GEMV. A warp (or a group of warps
// splitting k, for matrices with few rows) owns 2-4 weight rows and streams them with 16-byte
// non-allocating loads (several chunks per lane in flight), reusing every loaded weight chunk for all
// (<= 8) rows of x; f32 accumulation, warp-shuffle (and shared-memory) reduction, bias and output
// conversion fused into the store. Rows or pointers that are not 16-byte aligned go to a
// generic element-wise kernel with the same structure. Not a GEMM: m > kGemvMaxM goes to cuBLASLt
// (gemm.cu) unless forced for tests. Invariant: every output element is written by exactly one lane.
#include <atomic>

#include "kernels/cuda/linear.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMinWarpsPerSm = 64;  // split k over warps until this many are in flight

std::atomic<LinearPath> g_path{LinearPath::kAuto};

// 16 bytes of weights, read once: bypass L1 (nothing else reads them in this kernel).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// The 16 bytes of a chunk as 16 / sizeof(WT) floats.
__device__ __forceinline__ void unpack(uint4 v, float (&f)[8], Bf16) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void unpack(uint4 v, float (&f)[8], Half) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ void unpack(uint4 v, float (&f)[4], float) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

// kE consecutive activations starting at a 16-byte aligned address, as floats.
template <int kE>
__device__ __forceinline__ void load_x(const float* p, float (&f)[kE]) {
#pragma unroll
  for (int i = 0; i < kE; i += 4) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p + i));
    f[i] = v.x;
    f[i + 1] = v.y;
    f[i + 2] = v.z;
    f[i + 3] = v.w;
  }
}

template <int kE>
__device__ __forceinline__ void load_x(const Bf16* p, float (&f)[kE]) {
  if constexpr (kE == 8) {
    unpack(__ldg(reinterpret_cast<const uint4*>(p)), f, Bf16{});
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
  }
}

// Writes the warp-reduced acc[i][r] (every lane holds all of them) from lane (i * kR + r) % 32.
template <int kM, int kR>
__device__ __forceinline__ void store_results(const GemvArgs& a, float (&acc)[kM][kR], int64_t n0, int lane) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float v = warp_sum(acc[i][r]);
      if (i < a.m && n0 + r < a.n && lane == (i * kR + r) % 32) {
        const float b = a.bias != nullptr ? load_any(a.bias, a.bias_dtype, n0 + r) : 0.0f;
        store_any(a.out, a.out_dtype, i * a.out_stride + n0 + r, v + b);
      }
    }
}

// Warps of a block form groups of `split` warps (1, 2, 4 or 8); a group owns kR weight rows and its
// warps take interleaved slices of k, so matrices with few rows still put enough loads in flight. The
// group's partial sums meet in shared memory.
template <typename WT, typename XT, int kM, int kR, int kU>
__global__ void __launch_bounds__(kThreads) gemv_vec_kernel(const GemvArgs a, int split) {
  constexpr int kE = 16 / sizeof(WT);
  __shared__ float partial[kWarps][kM][kR];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / split, part = warp % split;
  const int64_t n0 = (blockIdx.x * static_cast<int64_t>(kWarps / split) + group) * kR;
  const WT* w = static_cast<const WT*>(a.w);
  const XT* x = static_cast<const XT*>(a.x);
  const int64_t n_chunks = a.k / kE;
  float acc[kM][kR] = {};
  if (n0 < a.n) {
    for (int64_t c0 = part * 32 * kU; c0 < n_chunks; c0 += static_cast<int64_t>(split) * 32 * kU) {
      uint4 wv[kU][kR];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int64_t c = c0 + u * 32 + lane;
          wv[u][r] = c < n_chunks && n0 + r < a.n ? load_stream(w + (n0 + r) * a.w_stride + c * kE)
                                                  : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = c0 + u * 32 + lane;
        if (c >= n_chunks) break;
        float wf[kR][kE];
#pragma unroll
        for (int r = 0; r < kR; ++r) unpack(wv[u][r], wf[r], WT{});
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i >= a.m) break;
          float xf[kE];
          load_x<kE>(x + i * a.x_stride + c * kE, xf);
#pragma unroll
          for (int r = 0; r < kR; ++r)
#pragma unroll
            for (int e = 0; e < kE; ++e) acc[i][r] = fmaf(wf[r][e], xf[e], acc[i][r]);
        }
      }
    }
  }
  if (split == 1) {  // uniform over the block: no barrier needed
    store_results<kM, kR>(a, acc, n0, lane);
    return;
  }
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float v = warp_sum(acc[i][r]);
      if (lane == 0) partial[warp][i][r] = v;
    }
  __syncthreads();
  if (part != 0) return;
  for (int idx = lane; idx < kM * kR; idx += 32) {
    const int i = idx / kR, r = idx % kR;
    if (i >= a.m || n0 + r >= a.n) continue;
    float v = 0.0f;
    for (int p = 0; p < split; ++p) v += partial[warp + p][i][r];
    const float b = a.bias != nullptr ? load_any(a.bias, a.bias_dtype, n0 + r) : 0.0f;
    store_any(a.out, a.out_dtype, i * a.out_stride + n0 + r, v + b);
  }
}

// Any alignment: one weight row per warp, element loads strided by 32 (coalesced).
template <typename WT, typename XT>
__global__ void __launch_bounds__(kThreads) gemv_generic_kernel(const GemvArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) >> 5;
  if (n0 >= a.n) return;
  const WT* w = static_cast<const WT*>(a.w) + n0 * a.w_stride;
  const XT* x = static_cast<const XT*>(a.x);
  float acc[kGemvMaxM][1] = {};
  for (int64_t k = lane; k < a.k; k += 32) {
    const float wk = to_f32(w[k]);
#pragma unroll
    for (int i = 0; i < kGemvMaxM; ++i) {
      if (i >= a.m) break;
      acc[i][0] = fmaf(wk, to_f32(x[i * a.x_stride + k]), acc[i][0]);
    }
  }
  store_results<kGemvMaxM, 1>(a, acc, n0, lane);
}

bool aligned16(const void* p, int64_t stride_bytes) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride_bytes % 16 == 0;
}

// Launches the vectorised kernel with kR weight rows per warp group and kU chunks per lane in flight,
// splitting k over as many warps per group as fill the GPU while each warp keeps a full iteration.
template <typename WT, typename XT, int kM, int kR, int kU>
void launch_vec(cudaStream_t stream, const GemvArgs& a) {
  constexpr int kE = 16 / sizeof(WT);
  const int64_t groups = (a.n + kR - 1) / kR, iters = (a.k / kE + 32 * kU - 1) / (32 * kU);
  const int64_t target = static_cast<int64_t>(sm_count()) * kMinWarpsPerSm;
  int split = 1;
  while (split < kWarps && groups * split < target && iters >= 2 * split) split *= 2;
  const int64_t groups_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block);
  gemv_vec_kernel<WT, XT, kM, kR, kU><<<blocks, kThreads, 0, stream>>>(a, split);
}

template <typename WT, typename XT>
void launch_gemv(cudaStream_t stream, const GemvArgs& a) {
  constexpr int kE = 16 / sizeof(WT);
  const bool vec = aligned16(a.w, a.w_stride * static_cast<int64_t>(sizeof(WT))) &&
                   aligned16(a.x, a.x_stride * static_cast<int64_t>(sizeof(XT))) && a.k % kE == 0;
  if (!vec) {
    const unsigned blocks = static_cast<unsigned>((a.n + kWarps - 1) / kWarps);
    gemv_generic_kernel<WT, XT><<<blocks, kThreads, 0, stream>>>(a);
  } else if (a.m == 1) {
    launch_vec<WT, XT, 1, 2, 4>(stream, a);
  } else if (a.m == 2) {
    launch_vec<WT, XT, 2, 2, 4>(stream, a);
  } else if (a.m <= 4) {  // more rows per warp: each x chunk loaded is reused over 4 weight rows
    launch_vec<WT, XT, 4, 4, 2>(stream, a);
  } else {
    launch_vec<WT, XT, 8, 4, 2>(stream, a);
  }
}

std::string linear_desc(const DevRows& out, const DevRows& x, const DevRows& w) {
  return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("w", w);
}

}  // namespace

void gemv(cudaStream_t stream, GemvArgs a) {
  const int64_t m = a.m;
  for (int64_t i0 = 0; i0 < m; i0 += kGemvMaxM) {
    GemvArgs part = a;
    part.m = m - i0 < kGemvMaxM ? m - i0 : kGemvMaxM;
    part.x = static_cast<const char*>(a.x) + i0 * a.x_stride * static_cast<int64_t>(dtype_size(a.x_dtype));
    part.out = static_cast<char*>(a.out) + i0 * a.out_stride * static_cast<int64_t>(dtype_size(a.out_dtype));
    with_float_type(a.w_dtype, [&](auto wt) {
      with_act_type(a.x_dtype, [&](auto xt) {
        launch_gemv<typename decltype(wt)::type, typename decltype(xt)::type>(stream, part);
      });
    });
  }
}

void set_linear_path_for_testing(LinearPath path) {
  g_path.store(path);
}

void linear(void* stream, DevRows out, DevRows x, DevRows w, const void* bias, DType bias_dtype) {
  const int64_t m = x.n_rows, n = w.n_rows, k = x.n_cols;
  if (m == 0 || n == 0) return;
  cudaStream_t s = as_stream(stream);
  const char* op = "linear";
  if (k == 0) {
    linear_epilogue(s, out, nullptr, 0, bias, bias_dtype);
    return;
  }
  const LinearPath path = g_path.load();
  const bool use_gemm = path == LinearPath::kGemm || (path == LinearPath::kAuto && m > kGemvMaxM);
  if (use_gemm && gemm_cublaslt(s, out, x, w, bias, bias_dtype)) return;
  GemvArgs a;
  a.w = w.data;
  a.x = x.data;
  a.out = out.data;
  a.bias = bias;
  a.w_stride = w.stride;
  a.x_stride = x.stride;
  a.out_stride = out.stride;
  a.m = m;
  a.n = n;
  a.k = k;
  a.w_dtype = w.dtype;
  a.x_dtype = x.dtype;
  a.out_dtype = out.dtype;
  a.bias_dtype = bias_dtype;
  gemv(s, a);
  check_launch(op, [&] { return linear_desc(out, x, w); });
}

}  // namespace bunsen::kernels::cuda
