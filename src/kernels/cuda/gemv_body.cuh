// The body the decode GEMV kernels share (gemv.cu: the plain launches; gemv_fused.cu: the norm prologue
// and the q/k/v + RoPE fold): warp groups of weight rows, 16-byte chunk loads, f32 FMAs in chunk order,
// stores with bias, gating or the rotation fused in, and the launch planning both use (rows per warp group,
// k split, the small-launch path). gemv.cu's head comment states the invariants. Included by those two
// files only: its kernels and helpers have internal linkage, a copy in each. Not a public interface.
#pragma once
#include <type_traits>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/gemv_norm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda {
namespace gemv_detail {
int small_mode();    // BUNSEN_GEMV_SMALL / set_gemv_small_for_testing (gemv.cu)
int forced_split();  // set_gemv_split_for_testing's split, 0 = choose from the shapes (gemv.cu)
}  // namespace gemv_detail
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
        v = a.gelu_tanh ? gelu_tanh(v) * up
                        : v / (1.0f + expf(-v)) * up;  // gelu_tanh_mul's / silu_mul's formula
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
__device__ __forceinline__ bool locate_rope(const GemvMultiArgs& a, const RopeKvArgs& rk, int64_t g,
                                            int& part, int64_t& n0, const Bf16* (&rows)[kRows]) {
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
__global__ void __launch_bounds__(kThreads)
    gemv_vec_kernel(const __grid_constant__ GemvMultiArgs a, int split) {
  gemv_vec_body<WT, XT, kM, kRows, kU, kGlu, kEarly, false, false>(a, split, nullptr, nullptr);
}

// Small launches plan their waves with the plain kernel's occupancy (4 blocks per SM at <= 64 registers);
// the prologue's kernels are held to it.
constexpr int kSmallMinBlocks = 4;

// Warp groups of kRows rows over all parts (gated: over the gate rows, kRows / 2 outputs each).
inline int64_t total_groups(const GemvMultiArgs& a, int rows) {
  if (a.glu) return (a.part[0].n + rows / 2 - 1) / (rows / 2);
  int64_t g = 0;
  for (int p = 0; p < a.n_parts; ++p) g += (a.part[p].n + rows - 1) / rows;
  return g;
}

// The small-launch split for the launch (the test hook's split when forced), or 0 when the launch keeps the
// default path: from the m = 1 configuration and the mode, whatever m is (batch invariance).
template <typename WT, typename XT, bool kGlu>
int small_split(const GemvMultiArgs& a) {
  const int mode = gemv_detail::small_mode();
  if (mode == 0) return 0;
  constexpr int kE = 16 / sizeof(WT);
  static const int blocks_per_sm =
      occupancy(gemv_vec_kernel<WT, XT, 1, kRowsSmall, kUnroll, kGlu, true>, kThreads);
  const int64_t iters = (a.k / kE + 32 * kUnroll - 1) / (32 * kUnroll);
  const SmallGemvPlan plan =
      choose_split_small(total_groups(a, kRowsSmall), iters, sm_count(), blocks_per_sm, kWarps, kWarps);
  if (mode == 1 && plan.waves > 1) return 0;
  const int forced = gemv_detail::forced_split();
  return forced == 1 || forced == 2 || forced == 4 || forced == 8 ? forced : plan.split;
}

// choose_split for the launch (or the test hook's split), from the m = 1 configuration whatever m is.
template <typename WT, typename XT, bool kGlu>
int launch_split(const GemvMultiArgs& a) {
  constexpr int kE = 16 / sizeof(WT), kRows = kGlu ? kRowsGlu : kRowsFew;
  static const int blocks_per_sm =
      occupancy(gemv_vec_kernel<WT, XT, 1, kRows, kUnroll, kGlu, false>, kThreads);
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * blocks_per_sm;
  const int64_t iters = (a.k / kE + 32 * kUnroll - 1) / (32 * kUnroll);
  const int forced = gemv_detail::forced_split();
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return forced;
  return choose_split(total_groups(a, kRows), iters, resident, kWarps);
}

// a with its weight streams' L2 policy for the launch's weight bytes (l2_weights_evict_first).
inline GemvMultiArgs with_l2_policy(const GemvMultiArgs& a) {
  GemvMultiArgs b = a;
  int64_t bytes = 0;
  for (int p = 0; p < a.n_parts; ++p)
    bytes += a.part[p].n * a.k * static_cast<int64_t>(dtype_size(a.w_dtype));
  b.l2_evict_first = l2_weights_evict_first(16, bytes);
  return b;
}
}  // namespace
}  // namespace bunsen::kernels::cuda
