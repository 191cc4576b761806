// cuda::linear's small-m path and the fused decode projections (linear_multi, linear_swiglu): a
// bandwidth-bound GEMV. A warp (or a group of warps splitting k, for launches with few rows) owns a few
// weight rows of one matrix and streams them with 16-byte non-allocating loads, two iterations of 8
// chunks per lane in flight (double buffered; the first issued before the programmatic-dependent-launch
// wait), reusing every loaded chunk for all (<= 8) rows of x; f32 accumulation, warp-shuffle (and
// shared-memory) reduction, bias, SiLU or tanh-GELU gating and output conversion fused into the store. One
// launch covers up to kGemvMaxParts matrices that share x (q/k/v, gate/up): each warp group picks its matrix
// by row range. Unaligned rows go to a generic element-wise kernel with the same structure.
// Small launches (BUNSEN_GEMV_SMALL, default on: launches that one wave of resident blocks covers, e.g. the
// 1B/8B q/k/v, o and down projections) take 2 rows per warp at every m, a k split from choose_split_small
// (fewest dependent DRAM round trips) and issue both buffers of loads before the PDL wait.
// Not a GEMM: m > kGemvMaxM with n >= 16 goes to cuBLASLt (gemm.cu) unless forced. Invariants: every output
// element is written by exactly one lane; the path (default or small), chunks in flight and k split depend on
// the launch's (n, k, dtypes) and the GPU, never on m, and the rows per warp never change a lane's chunks, so
// a row's result is the same for any m <= kGemvMaxM (batch invariance). This file: the plain launches and the
// switches; the kernel body they share: gemv_body.cuh; the norm-prologue launches and the q/k/v + RoPE fold:
// gemv_fused.cu.
#include <atomic>

#include "core/env.h"
#include "kernels/cuda/gemv_body.cuh"

namespace bunsen::kernels::cuda {
namespace {

std::atomic<LinearPath> g_path{LinearPath::kAuto};
std::atomic<int> g_split{0};  // test hook: 0 = choose from the shapes
// Small-launch path: -1 = read BUNSEN_GEMV_SMALL once (unset or 1: one-wave launches; 0: never), 0 = never,
// 1 = launches one wave covers, 2 = every aligned launch (tests).
std::atomic<int> g_small{-1};
// The weight streams' L2 policy: -1 = read BUNSEN_L2_EVICT_FIRST once, 0 = evict_normal, 1 = evict_first
// everywhere, 2 = evict_first where the launch's weights fit the L2, -2 = the defaults
// (l2_weights_evict_first).
std::atomic<int> g_l2_first{-1};

// Any alignment: one weight row (gated: one gate and one up row) per warp, element loads strided by 32.
template <typename WT, typename XT, bool kGlu>
__global__ void __launch_bounds__(kThreads) gemv_generic_kernel(const __grid_constant__ GemvMultiArgs a) {
  constexpr int kRows = kGlu ? 2 : 1;
  const int lane = threadIdx.x & 31;
  const WT* rows[kRows];
  int part = 0;
  int64_t n0 = 0;
  const int64_t g = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) >> 5;
  pdl_wait();  // a no-op unless launched with launch_pdl
  if (!locate<WT, kRows, kGlu>(a, g, part, n0, rows)) return;  // uniform over the warp
  const XT* x = static_cast<const XT*>(a.x);
  float acc[kGemvMaxM][kRows] = {};
  for (int64_t k = lane; k < a.k; k += 32) {
    float wk[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wk[r] = to_f32(rows[r][k]);  // never null: one row per group
#pragma unroll
    for (int i = 0; i < kGemvMaxM; ++i) {
      if (i >= a.m) break;
      const float xk = to_f32(x[i * a.x_stride + k]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[i][r] = fmaf(wk[r], xk, acc[i][r]);
    }
  }
  float tot[kGemvMaxM][kRows];
#pragma unroll
  for (int i = 0; i < kGemvMaxM; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) tot[i][r] = warp_sum(acc[i][r]);
  store_outputs<kGemvMaxM, kRows, kGlu>(a, tot, part, n0, lane);
}

// Launches the vectorised kernel with the given k split.
template <typename WT, typename XT, int kM, int kRows, bool kGlu, bool kEarly>
cudaError_t launch_vec(cudaStream_t stream, const GemvMultiArgs& a, int split) {
  const int64_t groups = total_groups(a, kRows), groups_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block);
  return launch_pdl(gemv_vec_kernel<WT, XT, kM, kRows, kUnroll, kGlu, kEarly>, dim3(blocks), dim3(kThreads), 0,
                    stream, a, split);
}

template <typename WT, typename XT, bool kGlu>
cudaError_t launch_gemv(cudaStream_t stream, const GemvMultiArgs& a) {
  constexpr int kE = 16 / sizeof(WT);
  bool vec = aligned16(a.x, a.x_stride * static_cast<int64_t>(sizeof(XT))) && a.k % kE == 0;
  for (int p = 0; p < a.n_parts; ++p)
    vec = vec && aligned16(a.part[p].w, a.part[p].w_stride * static_cast<int64_t>(sizeof(WT)));
  if (!vec) {
    const int64_t groups = total_groups(a, kGlu ? 2 : 1);
    const unsigned blocks = static_cast<unsigned>((groups + kWarps - 1) / kWarps);
    gemv_generic_kernel<WT, XT, kGlu><<<blocks, kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  const int small = small_split<WT, XT, kGlu>(a);
  if (small > 0) {
    constexpr int kR = kRowsSmall;
    if (a.m == 1) return launch_vec<WT, XT, 1, kR, kGlu, true>(stream, a, small);
    if (a.m == 2) return launch_vec<WT, XT, 2, kR, kGlu, true>(stream, a, small);
    if (a.m <= 4) return launch_vec<WT, XT, 4, kR, kGlu, true>(stream, a, small);
    return launch_vec<WT, XT, 8, kR, kGlu, true>(stream, a, small);
  }
  const int split = launch_split<WT, XT, kGlu>(a);
  constexpr int kR1 = kGlu ? kRowsGlu : kRowsFew, kR2 = kRowsMany;
  if (a.m == 1) return launch_vec<WT, XT, 1, kR1, kGlu, false>(stream, a, split);
  if (a.m == 2) return launch_vec<WT, XT, 2, kR1, kGlu, false>(stream, a, split);
  if (a.m <= 4) return launch_vec<WT, XT, 4, kR2, kGlu, false>(stream, a, split);
  return launch_vec<WT, XT, 8, kR2, kGlu, false>(stream, a, split);
}

std::string linear_desc(const DevRows& out, const DevRows& x, const DevRows& w) {
  return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("w", w);
}

}  // namespace

namespace gemv_detail {
int small_mode() {
  int v = g_small.load();
  if (v < 0) {
    v = env_int("BUNSEN_GEMV_SMALL", 1);
    v = v == 0 || v == 2 ? v : 1;
    g_small.store(v);
  }
  return v;
}

int forced_split() {
  return g_split.load();
}
}  // namespace gemv_detail

bool l2_weights_evict_first(int bits, int64_t weight_bytes) {
  int v = g_l2_first.load(std::memory_order_relaxed);
  if (v == -1) {  // BUNSEN_L2_EVICT_FIRST once: 0 / 1 force a policy everywhere, 2 by size everywhere;
                  // unset (or another value): the defaults (-2)
    v = env_int("BUNSEN_L2_EVICT_FIRST", -2);
    v = v == 0 || v == 1 || v == 2 ? v : -2;
    g_l2_first.store(v, std::memory_order_relaxed);
  }
  if (v == 0 || v == 1) return v != 0;
  if (v == -2 && bits != 4) return true;  // the defaults: see l2_hint.cuh
  static const int64_t l2 = [] {
    int bytes = 0;
    return cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, current_device()) == cudaSuccess &&
                   bytes > 0
               ? int64_t{bytes}
               : int64_t{50} << 20;
  }();
  return weight_bytes <= l2;
}

void set_l2_evict_first_for_testing(int mode) {
  g_l2_first.store(mode < 0 ? -1 : mode == 2 ? 2 : mode != 0 ? 1 : 0);
}

void gemv_multi(cudaStream_t stream, const GemvMultiArgs& args) {
  const GemvMultiArgs a = with_l2_policy(args);
  if (a.m == 0 || total_groups(a, 2) == 0) return;
  const int64_t x_elem = dtype_size(a.x_dtype), out_elem = dtype_size(a.out_dtype);
  for (int64_t i0 = 0; i0 < a.m; i0 += kGemvMaxM) {
    GemvMultiArgs part = a;
    part.m = a.m - i0 < kGemvMaxM ? a.m - i0 : kGemvMaxM;
    part.x = static_cast<const char*>(a.x) + i0 * a.x_stride * x_elem;
    for (int p = 0; p < a.n_parts; ++p)
      part.part[p].out = static_cast<char*>(a.part[p].out) + i0 * a.part[p].out_stride * out_elem;
    with_float_type(a.w_dtype, [&](auto wt) {
      with_act_type(a.x_dtype, [&](auto xt) {
        using WT = typename decltype(wt)::type;
        using XT = typename decltype(xt)::type;
        const cudaError_t e = a.glu ? launch_gemv<WT, XT, true>(stream, part) : launch_gemv<WT, XT, false>(stream, part);
        check_cuda(e, "gemv", [&] {
          return strfmt("m %lld k %lld parts %d glu %d", (long long)a.m, (long long)a.k, a.n_parts, (int)a.glu);
        });
      });
    });
  }
}

void set_gemv_split_for_testing(int split) {
  g_split.store(split);
}

void set_gemv_small_for_testing(int mode) {
  g_small.store(mode);
}

void gemv(cudaStream_t stream, GemvArgs a) {
  GemvMultiArgs m;
  m.part[0] = {a.w, a.out, a.bias, a.n, a.w_stride, a.out_stride};
  m.n_parts = 1;
  m.x = a.x;
  m.x_stride = a.x_stride;
  m.m = a.m;
  m.k = a.k;
  m.w_dtype = a.w_dtype;
  m.x_dtype = a.x_dtype;
  m.out_dtype = a.out_dtype;
  m.bias_dtype = a.bias_dtype;
  gemv_multi(stream, m);
}

void set_linear_path_for_testing(LinearPath path) {
  g_path.store(path);
}

LinearPath linear_path() {
  return g_path.load();
}

void linear(void* stream, DevRows out, DevRows x, DevRows w, const void* bias, DType bias_dtype) {
  const int64_t m = x.n_rows, n = w.n_rows, k = x.n_cols;
  if (m == 0 || n == 0) return;
  cudaStream_t s = as_stream(stream);
  if (k == 0) {
    linear_epilogue(s, out, nullptr, 0, bias, bias_dtype);
    return;
  }
  const LinearPath path = g_path.load();
  const bool use_gemm = path == LinearPath::kGemm || (path == LinearPath::kAuto && gemm_pays(m, n));
  if (use_gemm && gemm_cublaslt(s, out, x, w, bias, bias_dtype)) return;
  gemv(s, GemvArgs{w.data, x.data, out.data, bias, w.stride, x.stride, out.stride, m, n, k, w.dtype, x.dtype,
                   out.dtype, bias_dtype});
  check_launch("linear", [&] { return linear_desc(out, x, w); });
}

}  // namespace bunsen::kernels::cuda
