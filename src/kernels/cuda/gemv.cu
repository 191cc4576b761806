// cuda::linear's small-m path and the fused decode projections (linear_multi, linear_swiglu): a
// bandwidth-bound GEMV. A warp (or a group of warps splitting k, for launches with few rows) owns a few
// weight rows of one matrix and streams them with 16-byte non-allocating loads, two iterations of 8
// chunks per lane in flight (double buffered; the first issued before the programmatic-dependent-launch
// wait), reusing every loaded chunk for all (<= 8) rows of x; f32 accumulation, warp-shuffle (and
// shared-memory) reduction, bias, SiLU or tanh-GELU gating and output conversion fused into the store. One launch
// covers up to kGemvMaxParts matrices that share x (q/k/v, gate/up): each warp group picks its matrix
// by row range. Unaligned rows go to a generic element-wise kernel with the same structure.
// Small launches (BUNSEN_GEMV_SMALL, default on: launches that one wave of resident blocks covers, e.g. the
// 1B/8B q/k/v, o and down projections) take 2 rows per warp at every m, a k split from choose_split_small
// (fewest dependent DRAM round trips) and issue both buffers of loads before the PDL wait.
// Not a GEMM: m > kGemvMaxM with n >= 16 goes to cuBLASLt (gemm.cu) unless forced. Invariants: every output element
// is written by exactly one lane; the path (default or small), chunks in flight and k split depend on the
// launch's (n, k, dtypes) and the GPU, never on m, and the rows per warp never change a lane's chunks, so a
// row's result is the same for any m <= kGemvMaxM (batch invariance).
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/gemv_norm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
// Weight rows per warp group and 16-byte chunks per lane and row in flight (per buffer). One kU for every
// launch: with the same k split, a lane then sums the same chunks in the same order whatever the rows per
// warp, so m <= 2 (4 rows: longer-lived warps) and m >= 3 (2 rows: fewer registers for 8 x-rows) agree.
constexpr int kUnroll = 2;
constexpr int kRowsFew = 4, kRowsMany = 2;  // plain launches with m <= 2 / m >= 3
// Gated launches with m <= 2: 2 gate rows + the 2 up rows of the same outputs; m >= 3 takes kRowsMany (1 + 1)
// like plain launches (4 rows x 8 x-rows measured 54.6 vs 45.1 us for gate/up + gelu_tanh_mul at m = 4 on
// Gemma-3-4B's shape, H200).
constexpr int kRowsGlu = 4;
// Small launches: 2 rows per warp (gated: 1 gate + 1 up row) at every m: twice the warps of kRowsFew, fewer
// registers (more resident blocks), so a one-wave launch spreads over all SMs.
constexpr int kRowsSmall = 2;

std::atomic<LinearPath> g_path{LinearPath::kAuto};
std::atomic<int> g_split{0};  // test hook: 0 = choose from the shapes
// Small-launch path: -1 = read BUNSEN_GEMV_SMALL once (unset or 1: one-wave launches; 0: never), 0 = never,
// 1 = launches one wave covers, 2 = every aligned launch (tests).
std::atomic<int> g_small{-1};
// The weight streams' L2 policy: -1 = read BUNSEN_L2_EVICT_FIRST once, 0 = evict_normal, 1 = evict_first
// everywhere, 2 = evict_first where the launch's weights fit the L2, -2 = the defaults
// (l2_weights_evict_first).
std::atomic<int> g_l2_first{-1};
std::atomic<int> g_stride{
    -1};  // set_gemv_stride_for_testing: -1 = BUNSEN_GEMV_STRIDE (read once), 0 off, 1 on

bool gemv_strided() {
  const int mode = g_stride.load();
  if (mode >= 0) return mode == 1;
  static const bool on = env_flag("BUNSEN_GEMV_STRIDE", false);  // A/B runs
  return on;
}

int small_mode() {
  int v = g_small.load();
  if (v < 0) {
    v = env_int("BUNSEN_GEMV_SMALL", 1);
    v = v == 0 || v == 2 ? v : 1;
    g_small.store(v);
  }
  return v;
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

// kE consecutive activations starting at a 16-byte (f32) or 8-byte (bf16, kE 4) aligned address.
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

// Warp group g's rows: plain launches walk the parts (ceil(n / kRows) groups each) and give kRows
// consecutive rows of one part; gated launches give kRows / 2 gate rows then the same up rows. A row
// past its part's end is null. False when g is past the last group.
template <typename WT, int kRows, bool kGlu>
__device__ __forceinline__ bool locate(const GemvMultiArgs& a, int64_t g, int& part, int64_t& n0,
                                       const WT* (&rows)[kRows]) {
  if constexpr (kGlu) {
    constexpr int kHalf = kRows / 2;
    const GemvPart &gate = a.part[0], &up = a.part[1];
    part = 0;
    n0 = g * kHalf;
    if (n0 >= gate.n) return false;
#pragma unroll
    for (int r = 0; r < kHalf; ++r) {
      const bool ok = n0 + r < gate.n;
      rows[r] = ok ? static_cast<const WT*>(gate.w) + (n0 + r) * gate.w_stride : nullptr;
      rows[kHalf + r] = ok ? static_cast<const WT*>(up.w) + (n0 + r) * up.w_stride : nullptr;
    }
    return true;
  } else {
    int p = 0;
    for (; p < a.n_parts; ++p) {
      const int64_t groups = (a.part[p].n + kRows - 1) / kRows;
      if (g < groups) break;
      g -= groups;
    }
    if (p >= a.n_parts) return false;
    const GemvPart& w = a.part[p];
    part = p;
    n0 = g * kRows;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      rows[r] = n0 + r < w.n ? static_cast<const WT*>(w.w) + (n0 + r) * w.w_stride : nullptr;
    return true;
  }
}

__device__ __forceinline__ float bias_of(const GemvPart& p, DType t, int64_t j) {
  return p.bias != nullptr ? load_any(p.bias, t, j) : 0.0f;
}

// tot[i][r] holds the complete sums in every lane of the calling warp; lane (i * kOut + r) % 32 adds
// the bias (and for gated launches applies silu(gate) * up or gelu_tanh(gate) * up) and stores output
// (i, n0 + r).
template <int kM, int kRows, bool kGlu>
__device__ __forceinline__ void store_outputs(const GemvMultiArgs& a, const float (&tot)[kM][kRows], int part,
                                              int64_t n0, int lane) {
  constexpr int kOut = kGlu ? kRows / 2 : kRows;
  const GemvPart& p = a.part[part];
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kOut; ++r) {
      if (i >= a.m || n0 + r >= p.n || lane != (i * kOut + r) % 32) continue;
      float v = tot[i][r] + bias_of(p, a.bias_dtype, n0 + r);
      if constexpr (kGlu) {
        const float up = tot[i][kOut + r] + bias_of(a.part[1], a.bias_dtype, n0 + r);
        v = a.gelu_tanh ? gelu_tanh(v) * up : v / (1.0f + expf(-v)) * up;  // gelu_tanh_mul's / silu_mul's formula
      }
      store_any(p.out, a.out_dtype, i * p.out_stride + n0 + r, v);
    }
}

// ---- q/k/v with rope_kv_write folded into the store (linear_qkv_rope_kv) ----
// Launch parameters of the fold beside GemvMultiArgs (parts 0, 1, 2 = q, k, v; bf16 everywhere).
struct RopeKvArgs {
  const int32_t* positions = nullptr;  // [m] of this launch's rows
  const int64_t* slots = nullptr;      // [m] cache slots (< 0 or past the cache: no write)
  Bf16* k_cache = nullptr;
  Bf16* v_cache = nullptr;
  int64_t k_s[3] = {}, v_s[3] = {};  // cache strides (elements): block, slot, kv head
  // 32-bit: the launcher takes only caches of < 2^31 slots and parts of < 2^31 rows, so the fold's index
  // arithmetic needs no 64-bit division (whose code, even where it never runs, is fetched: a latency-bound
  // launch's code size is time, docs/PERFORMANCE.md, twenty-seventh session).
  int n_slots = 0, block_size = 0;
  int head_dim = 0, half = 0;  // half = rotary_dim / 2 (0: no rotation, the write only)
  float scaling = 1.0f;
  float inv_freq[kMaxRotaryDim / 2] = {};
};

// Rows (first, second) of rotation pair q of a q or k part of n rows: pair j of a head is (j, j + half) for
// j < half, else the neighbours (2 half + 2 (j - half), + 1). False past the part.
__device__ __forceinline__ bool rope_pair(const RopeKvArgs& rk, int64_t q, int64_t n, int64_t& first,
                                          int64_t& second) {
  if (2 * q >= n) return false;
  const int qi = static_cast<int>(q), hp = rk.head_dim / 2, head = qi / hp, j = qi - head * hp;  // (n < 2^31)
  first = head * rk.head_dim + (j < rk.half ? j : 2 * rk.half + 2 * (j - rk.half));
  second = j < rk.half ? first + rk.half : first + 1;
  return true;
}

// Warp group g's rows in a fold launch: in q and k each group takes kRows / 2 rotation pairs (row j and
// j + half of a head; past rotary_dim, two neighbours), rows[r] and rows[r + kRows / 2] being pair r; in v
// kRows consecutive rows as locate() gives them. n0: the first pair (q, k) or row (v). Whole heads per
// group need head_dim % kRows == 0 (checked by the launcher). A row's sum does not depend on its partner
// (the lane's chunks and their order are the row's), so q/k/v are the bits of the plain launch.
template <int kRows>
__device__ __forceinline__ bool locate_rope(const GemvMultiArgs& a, const RopeKvArgs& rk, int64_t g, int& part,
                                            int64_t& n0, const Bf16* (&rows)[kRows]) {
  int p = 0;
  for (; p < a.n_parts; ++p) {
    const int64_t groups = (a.part[p].n + kRows - 1) / kRows;
    if (g < groups) break;
    g -= groups;
  }
  if (p >= a.n_parts) return false;
  const GemvPart& w = a.part[p];
  part = p;
  const Bf16* base = static_cast<const Bf16*>(w.w);
  if (p == 2) {
    n0 = g * kRows;
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = n0 + r < w.n ? base + (n0 + r) * w.w_stride : nullptr;
    return true;
  }
  constexpr int kPairs = kRows / 2;
  n0 = g * kPairs;
#pragma unroll
  for (int r = 0; r < kPairs; ++r) {
    int64_t first = 0, second = 0;
    const bool ok = rope_pair(rk, n0 + r, w.n, first, second);
    rows[r] = ok ? base + first * w.w_stride : nullptr;
    rows[kPairs + r] = ok ? base + second * w.w_stride : nullptr;
  }
  return true;
}

// The fold's store: q, k, v rounded to bf16 as linear_multi stores them; q and k pairs rotated as rope_kv.cu
// rotates the stored values (sincosf of (float)pos * inv_freq, times scaling; rotate_values) and rounded
// again; k and v also written to the cache slot of their row, as rope_kv_write does.
template <int kM, int kRows>
__device__ __forceinline__ void store_rope(const GemvMultiArgs& a, const RopeKvArgs& rk,
                                           const float (&tot)[kM][kRows], int part, int64_t n0, int lane) {
  const GemvPart& p = a.part[part];
  auto cache_row = [&](Bf16* cache, const int64_t(&st)[3], int i, int64_t row) -> Bf16* {
    const int64_t slot = rk.slots[i];
    if (slot < 0 || slot >= rk.n_slots) return nullptr;
    const int sl = static_cast<int>(slot), r32 = static_cast<int>(row);  // (< n_slots, < n: both < 2^31)
    const int block = sl / rk.block_size, off = sl - block * rk.block_size, head = r32 / rk.head_dim;
    return cache + block * st[0] + off * st[1] + head * st[2] + (r32 - head * rk.head_dim);
  };
  if (part == 2) {
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (i >= a.m || n0 + r >= p.n || lane != (i * kRows + r) % 32) continue;
        const Bf16 v = from_f32<Bf16>(tot[i][r] + bias_of(p, a.bias_dtype, n0 + r));
        static_cast<Bf16*>(p.out)[i * p.out_stride + n0 + r] = v;
        if (Bf16* c = cache_row(rk.v_cache, rk.v_s, i, n0 + r)) *c = v;
      }
    return;
  }
  constexpr int kPairs = kRows / 2;
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kPairs; ++r) {
      int64_t first = 0, second = 0;
      if (i >= a.m || lane != (i * kPairs + r) % 32 || !rope_pair(rk, n0 + r, p.n, first, second)) continue;
      float x1 = to_f32(from_f32<Bf16>(tot[i][r] + bias_of(p, a.bias_dtype, first)));
      float x2 = to_f32(from_f32<Bf16>(tot[i][kPairs + r] + bias_of(p, a.bias_dtype, second)));
      const int j = static_cast<int>(n0 + r) % (rk.head_dim / 2);
      if (j < rk.half) {
        float sn, cs;
        sincosf(static_cast<float>(rk.positions[i]) * rk.inv_freq[j], &sn, &cs);
        const float2 y = rotate_values(x1, x2, cs * rk.scaling, sn * rk.scaling);
        x1 = y.x;
        x2 = y.y;
      }
      const Bf16 b1 = from_f32<Bf16>(x1), b2 = from_f32<Bf16>(x2);
      Bf16* out = static_cast<Bf16*>(p.out) + i * p.out_stride;
      out[first] = b1;
      out[second] = b2;
      if (part == 1) {
        if (Bf16* c = cache_row(rk.k_cache, rk.k_s, i, first)) *c = b1;
        if (Bf16* c = cache_row(rk.k_cache, rk.k_s, i, second)) *c = b2;
      }
    }
}

// kU chunks of each of the kRows rows, starting at chunk c0 + lane (zeros past the row or for a null row),
// 16 bytes each, read once: bypass L1 (nothing else reads them in this kernel), L2 policy pol (l2_hint.cuh).
template <typename WT, int kRows, int kU>
__device__ __forceinline__ void load_chunks(uint4 (&wv)[kU][kRows], const WT* const (&rows)[kRows],
                                            int64_t c0, int64_t n_chunks, int lane, uint64_t pol) {
  constexpr int kE = 16 / sizeof(WT);
#pragma unroll
  for (int u = 0; u < kU; ++u)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t c = c0 + u * 32 + lane;
      wv[u][r] =
          c < n_chunks && rows[r] != nullptr ? ldg_weights16(rows[r] + c * kE, pol) : make_uint4(0, 0, 0, 0);
    }
}

// acc[i][r] += the chunks loaded by load_chunks(c0) times x row i, in chunk order. kSmemX: x is the norm
// prologue's bf16 rows in shared memory (bf16 weights).
template <typename WT, typename XT, int kM, int kRows, int kU, bool kSmemX>
__device__ __forceinline__ void fma_chunks(float (&acc)[kM][kRows], const uint4 (&wv)[kU][kRows], const XT* x,
                                           int64_t x_stride, int64_t m, int64_t c0, int64_t n_chunks,
                                           int lane) {
  constexpr int kE = 16 / sizeof(WT);
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t c = c0 + u * 32 + lane;
    if (c >= n_chunks) break;
    float wf[kRows][kE];
#pragma unroll
    for (int r = 0; r < kRows; ++r) unpack(wv[u][r], wf[r], WT{});
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (i >= m) break;
      float xf[kE];
      if constexpr (kSmemX)
        unpack(*reinterpret_cast<const uint4*>(x + i * x_stride + c * kE), xf, Bf16{});
      else
        load_x<kE>(x + i * x_stride + c * kE, xf);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int e = 0; e < kE; ++e) acc[i][r] = fmaf(wf[r][e], xf[e], acc[i][r]);
    }
  }
}

// Warps of a block form groups of `split` warps (1, 2, 4 or 8); a group owns kRows weight rows and its
// warps take interleaved slices of k, so launches with few rows still put enough loads in flight. Each
// warp keeps two iterations of loads in flight (double buffering); the first is issued before pdl_wait()
// (weights depend on no earlier kernel). The group's partial sums meet in shared memory, always summed in
// slice order. kEarly (small launches): both buffers are issued before pdl_wait(), so a warp with at most two
// iterations has all its weights requested while the previous kernel finishes; the loads move, the
// summation order does not.
// kRope (gemv_vec_rope_kernel): the q/k/v fold, rows from locate_rope and the store from store_rope.
// kNorm: x is computed by gemv_norm::prologue (gemv_norm.cuh; after pdl_wait, while the early weight loads
// fly) into dynamic shared memory ([m, k] bf16); bf16 weights only. kPost: by its post-norm form instead.
template <typename WT, typename XT, int kM, int kRows, int kU, bool kGlu, bool kEarly, bool kRope, bool kNorm,
          bool kPost = false>
__device__ __forceinline__ void gemv_vec_body(const GemvMultiArgs& a, int split, const RopeKvArgs* rk,
                                              const GemvNorm* nm) {
  static_assert(!kNorm || (std::is_same_v<WT, Bf16> && std::is_same_v<XT, Bf16>), "norm prologue: bf16 only");
  constexpr int kE = 16 / sizeof(WT);
  __shared__ float partial[kWarps][kM][kRows];
  extern __shared__ uint4 gemv_x_smem[];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / split, slice = warp % split;
  const WT* rows[kRows];
  int part = 0;
  int64_t n0 = 0;
  const int64_t g = blockIdx.x * static_cast<int64_t>(kWarps / split) + group;
  bool active;
  if constexpr (kRope)
    active = locate_rope<kRows>(a, *rk, g, part, n0, rows);
  else
    active = locate<WT, kRows, kGlu>(a, g, part, n0, rows);
  const XT* x = kNorm ? reinterpret_cast<const XT*>(gemv_x_smem) : static_cast<const XT*>(a.x);
  const int64_t x_stride = kNorm ? a.k : a.x_stride;
  const int64_t n_chunks = a.k / kE, step = static_cast<int64_t>(split) * 32 * kU;
  float acc[kM][kRows] = {};
  uint4 wa[kU][kRows], wb[kU][kRows];
  int64_t c0 = slice * 32 * kU;
  const uint64_t pol = weight_l2_policy(a.l2_evict_first);
  if (active) load_chunks<WT, kRows, kU>(wa, rows, c0, n_chunks, lane, pol);
  if constexpr (kEarly) {
    if (active) load_chunks<WT, kRows, kU>(wb, rows, c0 + step, n_chunks, lane, pol);
  }
  if constexpr (kNorm) gemv_norm::prefetch_w<kThreads>(*nm, a.m, a.k, reinterpret_cast<char*>(gemv_x_smem));
  pdl_wait();
  if constexpr (kPost)
    gemv_norm::post_prologue<kThreads, kM>(*nm, a.m, a.k, reinterpret_cast<char*>(gemv_x_smem));
  else if constexpr (kNorm)
    gemv_norm::prologue<kThreads, kM>(*nm, a.m, a.k, reinterpret_cast<char*>(gemv_x_smem));
  if constexpr (kEarly) {
    for (; active && c0 < n_chunks; c0 += 2 * step) {
      fma_chunks<WT, XT, kM, kRows, kU, kNorm>(acc, wa, x, x_stride, a.m, c0, n_chunks, lane);
      load_chunks<WT, kRows, kU>(wa, rows, c0 + 2 * step, n_chunks, lane, pol);
      fma_chunks<WT, XT, kM, kRows, kU, kNorm>(acc, wb, x, x_stride, a.m, c0 + step, n_chunks, lane);
      load_chunks<WT, kRows, kU>(wb, rows, c0 + 3 * step, n_chunks, lane, pol);
    }
  } else {
    for (; active && c0 < n_chunks; c0 += 2 * step) {
      load_chunks<WT, kRows, kU>(wb, rows, c0 + step, n_chunks, lane, pol);
      fma_chunks<WT, XT, kM, kRows, kU, kNorm>(acc, wa, x, x_stride, a.m, c0, n_chunks, lane);
      load_chunks<WT, kRows, kU>(wa, rows, c0 + 2 * step, n_chunks, lane, pol);
      fma_chunks<WT, XT, kM, kRows, kU, kNorm>(acc, wb, x, x_stride, a.m, c0 + step, n_chunks, lane);
    }
  }
  float tot[kM][kRows];
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) tot[i][r] = warp_sum(acc[i][r]);
  if (split > 1) {  // uniform over the block
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int r = 0; r < kRows; ++r) partial[warp][i][r] = tot[i][r];
    __syncthreads();
    if (slice != 0) return;
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float v = 0.0f;
        for (int p = 0; p < split; ++p) v += partial[warp + p][i][r];
        tot[i][r] = v;
      }
  }
  if constexpr (kRope) {
    if (active) store_rope<kM, kRows>(a, *rk, tot, part, n0, lane);
  } else {
    if (active) store_outputs<kM, kRows, kGlu>(a, tot, part, n0, lane);
  }
}

template <typename WT, typename XT, int kM, int kRows, int kU, bool kGlu, bool kEarly>
__global__ void __launch_bounds__(kThreads) gemv_vec_kernel(const __grid_constant__ GemvMultiArgs a, int split) {
  gemv_vec_body<WT, XT, kM, kRows, kU, kGlu, kEarly, false, false>(a, split, nullptr, nullptr);
}

// Small launches plan their waves with the plain kernel's occupancy (4 blocks per SM at <= 64 registers);
// the prologue's kernels are held to it.
constexpr int kSmallMinBlocks = 4;

// gemv_vec_kernel with the norm prologue (bf16 weights and x); kPost: its post-norm form (nm.y_w set).
template <int kM, int kRows, bool kGlu, bool kEarly, bool kPost>
__global__ void __launch_bounds__(kThreads, kEarly ? kSmallMinBlocks : 1)
    gemv_vec_norm_kernel(const __grid_constant__ GemvMultiArgs a, int split,
                         const __grid_constant__ GemvNorm nm) {
  gemv_vec_body<Bf16, Bf16, kM, kRows, kUnroll, kGlu, kEarly, false, true, kPost>(a, split, nullptr, &nm);
}

// gemv_vec_norm_kernel's m = 1, split = 1, pre-norm form over a grid of resident blocks
// (BUNSEN_GEMV_STRIDE=1, for A/B runs): a launch of more warp groups than resident warps (the 8B's gate/up:
// 7,168 groups of 4 rows over 2,112 warps at 2 blocks per SM, 3.4 rounds) walks them in rounds -- warp w of
// block b takes groups b + w * gridDim.x, then each further one the grid's warp count on -- so every SM keeps
// about the same number of warps streaming to the last round instead of the launch ending on a partial wave
// of whole blocks. Each group sums gemv_vec_body's chunks in its order: the same bits.
template <int kRows, bool kGlu>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_vec_norm_strided_kernel(const __grid_constant__ GemvMultiArgs a,
                                 const __grid_constant__ GemvNorm nm) {
  constexpr int kE = 16 / sizeof(Bf16), kU = kUnroll;
  extern __shared__ uint4 gemv_x_smem[];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t g = static_cast<int64_t>(warp) * gridDim.x + blockIdx.x;
  const Bf16* rows[kRows];
  int part = 0;
  int64_t n0 = 0;
  bool active = locate<Bf16, kRows, kGlu>(a, g, part, n0, rows);
  const int64_t n_chunks = a.k / kE, step = 32 * kU;
  const uint64_t pol = weight_l2_policy(a.l2_evict_first);
  uint4 wa[kU][kRows], wb[kU][kRows];
  if (active) load_chunks<Bf16, kRows, kU>(wa, rows, 0, n_chunks, lane, pol);
  char* smem = reinterpret_cast<char*>(gemv_x_smem);
  gemv_norm::prefetch_w<kThreads>(nm, 1, a.k, smem);
  pdl_wait();
  gemv_norm::prologue<kThreads, 1>(nm, 1, a.k, smem);
  const Bf16* x = reinterpret_cast<const Bf16*>(gemv_x_smem);
  while (active) {  // per warp: no block-wide step inside
    float acc[1][kRows] = {};
    for (int64_t c0 = 0; c0 < n_chunks; c0 += 2 * step) {
      load_chunks<Bf16, kRows, kU>(wb, rows, c0 + step, n_chunks, lane, pol);
      fma_chunks<Bf16, Bf16, 1, kRows, kU, true>(acc, wa, x, a.k, 1, c0, n_chunks, lane);
      load_chunks<Bf16, kRows, kU>(wa, rows, c0 + 2 * step, n_chunks, lane, pol);
      fma_chunks<Bf16, Bf16, 1, kRows, kU, true>(acc, wb, x, a.k, 1, c0 + step, n_chunks, lane);
    }
    float tot[1][kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) tot[0][r] = warp_sum(acc[0][r]);
    store_outputs<1, kRows, kGlu>(a, tot, part, n0, lane);
    g += stride;
    active = locate<Bf16, kRows, kGlu>(a, g, part, n0, rows);
    if (active) load_chunks<Bf16, kRows, kU>(wa, rows, 0, n_chunks, lane, pol);
  }
}

// The q/k/v fold (bf16 weights, x and outputs; plain launches of three parts), with or without the norm
// prologue.
template <int kM, int kRows, bool kEarly, bool kNorm>
__global__ void __launch_bounds__(kThreads, (kEarly && kNorm) ? kSmallMinBlocks : 1)
    gemv_vec_rope_kernel(const __grid_constant__ GemvMultiArgs a, int split,
                         const __grid_constant__ RopeKvArgs rk, const __grid_constant__ GemvNorm nm) {
  gemv_vec_body<Bf16, Bf16, kM, kRows, kUnroll, false, kEarly, true, kNorm>(a, split, &rk, &nm);
}

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


// Warp groups of kRows rows over all parts (gated: over the gate rows, kRows / 2 outputs each).
int64_t total_groups(const GemvMultiArgs& a, int rows) {
  if (a.glu) return (a.part[0].n + rows / 2 - 1) / (rows / 2);
  int64_t g = 0;
  for (int p = 0; p < a.n_parts; ++p) g += (a.part[p].n + rows - 1) / rows;
  return g;
}

// Launches the vectorised kernel with the given k split.
template <typename WT, typename XT, int kM, int kRows, bool kGlu, bool kEarly>
cudaError_t launch_vec(cudaStream_t stream, const GemvMultiArgs& a, int split) {
  const int64_t groups = total_groups(a, kRows), groups_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block);
  return launch_pdl(gemv_vec_kernel<WT, XT, kM, kRows, kUnroll, kGlu, kEarly>, dim3(blocks), dim3(kThreads), 0,
                    stream, a, split);
}

// The small-launch split for the launch (the test hook's split when forced), or 0 when the launch keeps the
// default path: from the m = 1 configuration and the mode, whatever m is (batch invariance).
template <typename WT, typename XT, bool kGlu>
int small_split(const GemvMultiArgs& a) {
  const int mode = small_mode();
  if (mode == 0) return 0;
  constexpr int kE = 16 / sizeof(WT);
  static const int blocks_per_sm = occupancy(gemv_vec_kernel<WT, XT, 1, kRowsSmall, kUnroll, kGlu, true>, kThreads);
  const int64_t iters = (a.k / kE + 32 * kUnroll - 1) / (32 * kUnroll);
  const SmallGemvPlan plan =
      choose_split_small(total_groups(a, kRowsSmall), iters, sm_count(), blocks_per_sm, kWarps, kWarps);
  if (mode == 1 && plan.waves > 1) return 0;
  const int forced = g_split.load();
  return forced == 1 || forced == 2 || forced == 4 || forced == 8 ? forced : plan.split;
}

// choose_split for the launch (or the test hook's split), from the m = 1 configuration whatever m is.
template <typename WT, typename XT, bool kGlu>
int launch_split(const GemvMultiArgs& a) {
  constexpr int kE = 16 / sizeof(WT), kRows = kGlu ? kRowsGlu : kRowsFew;
  static const int blocks_per_sm = occupancy(gemv_vec_kernel<WT, XT, 1, kRows, kUnroll, kGlu, false>, kThreads);
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * blocks_per_sm;
  const int64_t iters = (a.k / kE + 32 * kUnroll - 1) / (32 * kUnroll);
  const int forced = g_split.load();
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return forced;
  return choose_split(total_groups(a, kRows), iters, resident, kWarps);
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

// x [m, k] bf16 and the norm weights [k].
size_t norm_smem(const GemvMultiArgs& a, const GemvNorm& n) {
  return static_cast<size_t>(a.m * a.k) * sizeof(Bf16) + static_cast<size_t>(a.k) * (n.w_bf16 ? 2 : 4);
}

// Whether a bf16 launch of a (weights already checked) can compute its x with n's prologue: see GemvNorm
// and kGemvNormMaxK.
bool norm_ok(const GemvMultiArgs& a, const GemvNorm& n) {
  constexpr size_t kMaxSmem = 48 * 1024;  // dynamic shared memory without an opt-in
  return a.w_dtype == DType::kBF16 && a.x_dtype == DType::kBF16 && a.m >= 1 && a.m <= kGemvNormMaxM &&
         a.k % 8 == 0 && a.k <= kGemvNormMaxK && norm_smem(a, n) <= kMaxSmem && gemv_norm_rows_ok(n, a.k);
}

// The fold's launch: the plain launch's path, rows per warp group and k split (so q/k/v keep its bits).
// False (nothing launched) when that would not be the vectorised kernel, head_dim does not hold whole
// groups of rows or n's prologue does not apply.
bool launch_rope(cudaStream_t stream, const GemvMultiArgs& a, const RopeKvArgs& rk, const GemvNorm* n) {
  bool vec = (n != nullptr || aligned16(a.x, a.x_stride * 2)) && a.k % 8 == 0;
  for (int p = 0; p < a.n_parts; ++p) vec = vec && aligned16(a.part[p].w, a.part[p].w_stride * 2);
  if (!vec || a.m < 1 || a.m > kGemvMaxM || (n != nullptr && (!norm_ok(a, *n) || n->y_w != nullptr)))
    return false;  // (the fold has no post-norm prologue)
  const int small = small_split<Bf16, Bf16, false>(a);
  const int rows = small > 0 ? kRowsSmall : a.m <= 2 ? kRowsFew : kRowsMany;
  if (rk.head_dim % rows != 0 || a.part[0].n % rk.head_dim != 0 || a.part[1].n % rk.head_dim != 0) return false;
  const int split = small > 0 ? small : launch_split<Bf16, Bf16, false>(a);
  const int64_t per = kWarps / split;
  const dim3 grid(static_cast<unsigned>((total_groups(a, rows) + per - 1) / per));
  const GemvNorm nm = n != nullptr ? *n : GemvNorm{};
  const size_t smem = n != nullptr ? norm_smem(a, *n) : 0;
  auto go = [&](auto kernel) {
    return launch_pdl(kernel, grid, dim3(kThreads), smem, stream, a, split, rk, nm);
  };
  auto pick = [&](auto norm) {
    constexpr bool kN = decltype(norm)::value;  // the prologue: m <= kGemvNormMaxM (norm_ok)
    static_assert(kGemvNormMaxM == 2, "the prologue's instances below are m = 1 and 2");
    if (small > 0) {
      constexpr int kR = kRowsSmall;
      if constexpr (kN)
        return a.m == 1 ? go(gemv_vec_rope_kernel<1, kR, true, true>)
                        : go(gemv_vec_rope_kernel<2, kR, true, true>);
      return a.m == 1   ? go(gemv_vec_rope_kernel<1, kR, true, false>)
             : a.m == 2 ? go(gemv_vec_rope_kernel<2, kR, true, false>)
             : a.m <= 4 ? go(gemv_vec_rope_kernel<4, kR, true, false>)
                        : go(gemv_vec_rope_kernel<8, kR, true, false>);
    }
    if constexpr (kN)
      return a.m == 1 ? go(gemv_vec_rope_kernel<1, kRowsFew, false, true>)
                      : go(gemv_vec_rope_kernel<2, kRowsFew, false, true>);
    return a.m == 1   ? go(gemv_vec_rope_kernel<1, kRowsFew, false, false>)
           : a.m == 2 ? go(gemv_vec_rope_kernel<2, kRowsFew, false, false>)
           : a.m <= 4 ? go(gemv_vec_rope_kernel<4, kRowsMany, false, false>)
                      : go(gemv_vec_rope_kernel<8, kRowsMany, false, false>);
  };
  const cudaError_t e = n != nullptr ? pick(std::true_type{}) : pick(std::false_type{});
  check_cuda(e, "linear_qkv_rope_kv",
             [&] { return strfmt("m %lld k %lld", (long long)a.m, (long long)a.k); });
  return true;
}

// gemv_multi_norm's launch: launch_gemv's path, rows per warp group and split for bf16 weights and x.
template <bool kGlu, bool kPost>
cudaError_t launch_norm(cudaStream_t stream, const GemvMultiArgs& a, const GemvNorm& n) {
  auto go = [&](auto kernel, int rows, int split) {
    const int64_t per = kWarps / split;
    const dim3 grid(static_cast<unsigned>((total_groups(a, rows) + per - 1) / per));
    return launch_pdl(kernel, grid, dim3(kThreads), norm_smem(a, n), stream, a, split, n);
  };
  static_assert(kGemvNormMaxM == 2, "launch_gemv's m = 1 and 2 instances (norm_ok checked m)");
  const int small = small_split<Bf16, Bf16, kGlu>(a);
  if (small > 0) {
    constexpr int kR = kRowsSmall;
    if (a.m == 1) return go(gemv_vec_norm_kernel<1, kR, kGlu, true, kPost>, kR, small);
    return go(gemv_vec_norm_kernel<2, kR, kGlu, true, kPost>, kR, small);
  }
  const int split = launch_split<Bf16, Bf16, kGlu>(a);
  constexpr int kR1 = kGlu ? kRowsGlu : kRowsFew;
  // BUNSEN_GEMV_GLU_ROWS=2 (read once; A/B runs): gated m = 1 launches with 1 gate + 1 up row per warp group
  // (fewer registers, more resident blocks; the same bits, kUnroll being shared).
  static const bool glu2 = env_int("BUNSEN_GEMV_GLU_ROWS", kRowsGlu) == 2;
  if constexpr (kGlu)
    if (glu2 && a.m == 1) return go(gemv_vec_norm_kernel<1, 2, kGlu, false, kPost>, 2, split);
  if (!kPost && gemv_strided() && a.m == 1 && split == 1) {
    constexpr auto kernel = gemv_vec_norm_strided_kernel<kR1, kGlu>;
    static const int64_t resident = static_cast<int64_t>(sm_count()) * occupancy(kernel, kThreads);
    const int64_t blocks = (total_groups(a, kR1) + kWarps - 1) / kWarps;
    const dim3 grid(static_cast<unsigned>(std::min(blocks, resident)));
    return launch_pdl(kernel, grid, dim3(kThreads), norm_smem(a, n), stream, a, n);
  }
  if (a.m == 1) return go(gemv_vec_norm_kernel<1, kR1, kGlu, false, kPost>, kR1, split);
  return go(gemv_vec_norm_kernel<2, kR1, kGlu, false, kPost>, kR1, split);
}

std::string linear_desc(const DevRows& out, const DevRows& x, const DevRows& w) {
  return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("w", w);
}

}  // namespace

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

void set_gemv_stride_for_testing(int mode) {
  g_stride.store(mode < 0 ? -1 : mode != 0 ? 1 : 0);
}

namespace {
// a with its weight streams' L2 policy for the launch's weight bytes (l2_weights_evict_first).
GemvMultiArgs with_l2_policy(const GemvMultiArgs& a) {
  GemvMultiArgs b = a;
  int64_t bytes = 0;
  for (int p = 0; p < a.n_parts; ++p)
    bytes += a.part[p].n * a.k * static_cast<int64_t>(dtype_size(a.w_dtype));
  b.l2_evict_first = l2_weights_evict_first(16, bytes);
  return b;
}
}  // namespace

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

bool gemv_multi_norm(cudaStream_t stream, const GemvMultiArgs& args, const GemvNorm& n) {
  const GemvMultiArgs a = with_l2_policy(args);
  bool ok = norm_ok(a, n);
  for (int p = 0; p < a.n_parts; ++p) ok = ok && aligned16(a.part[p].w, a.part[p].w_stride * 2);
  if (!ok || total_groups(a, 2) == 0) return false;
  const bool post = n.y_w != nullptr;
  const cudaError_t e =
      a.glu ? (post ? launch_norm<true, true>(stream, a, n) : launch_norm<true, false>(stream, a, n))
            : (post ? launch_norm<false, true>(stream, a, n) : launch_norm<false, false>(stream, a, n));
  check_cuda(e, "gemv (norm prologue)", [&] {
    return strfmt("m %lld k %lld parts %d glu %d", (long long)a.m, (long long)a.k, a.n_parts, (int)a.glu);
  });
  return true;
}

bool gemv_rope_kv(cudaStream_t stream, const GemvMultiArgs& a, const DevRopeKv& r, const GemvNorm* n) {
  const DevCache& c = r.cache;
  const int64_t hd = r.k.head_dim;
  const bool ok = a.n_parts == 3 && !a.glu && a.w_dtype == DType::kBF16 && a.x_dtype == DType::kBF16 &&
                  a.out_dtype == DType::kBF16 && c.bits == 0 && c.dtype == DType::kBF16 && c.head_dim == hd &&
                  r.q.head_dim == hd && r.v.head_dim == hd && hd > 0 && hd % 2 == 0 &&
                  r.rotary_dim % 2 == 0 && r.rotary_dim >= 0 && r.rotary_dim <= hd &&
                  r.rotary_dim <= kMaxRotaryDim && a.part[0].n == r.q.n_heads * hd &&
                  a.part[1].n == r.k.n_heads * hd && a.part[2].n == r.v.n_heads * hd &&
                  r.k.n_heads == c.n_kv_heads && hd <= INT32_MAX && c.n_blocks * c.block_size <= INT32_MAX &&
                  a.part[0].n <= INT32_MAX && a.part[1].n <= INT32_MAX &&
                  a.part[2].n <= INT32_MAX;  // (32-bit index arithmetic, see RopeKvArgs)
  if (!ok) return false;
  RopeKvArgs rk;
  rk.positions = r.positions;
  rk.slots = r.slot_mapping;
  rk.k_cache = static_cast<Bf16*>(c.k);
  rk.v_cache = static_cast<Bf16*>(c.v);
  for (int i = 0; i < 3; ++i) {
    rk.k_s[i] = c.k_strides[i];
    rk.v_s[i] = c.v_strides[i];
  }
  rk.n_slots = static_cast<int>(c.n_blocks * c.block_size);
  rk.block_size = static_cast<int>(c.block_size);
  rk.head_dim = static_cast<int>(hd);
  rk.half = r.rotary_dim / 2;
  rk.scaling = r.attention_scaling;
  for (int i = 0; i < rk.half; ++i) rk.inv_freq[i] = r.inv_freq_host[i];
  return launch_rope(stream, with_l2_policy(a), rk, n);
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
