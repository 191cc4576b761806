// The tensor-core quantized GEMV (gemv_qmma.cuh): MLX affine 4/8-bit weights times <= 8 rows of x.
// A warp owns a tile of 16 weight rows (gated launches: 8 gate rows and the same 8 up rows) and a slice of
// k; each lane streams its quarter of every scale group of 2 rows with non-allocating vector loads (two
// pipeline stages in flight, the first issued before the programmatic-dependent-launch wait), turns the
// codes into exact bf16 integers and feeds mma.m16n8k16 (rows x tokens, f32 accumulate); per group and row
// acc += scale * sum(q * x) + bias * sum(x). Warps splitting k meet in shared memory; bias, SiLU (or
// tanh-GELU) gating and the output conversion are fused into the store. Four kernels:
// - gemv_qmma_tile_kernel (plain launches at 4 bits, group 64, bf16 x, k % 512 == 0): as the next one, but each
//   warp's weights arrive as 16-row x 256-byte tiles copied with cp.async into its shared memory (long
//   contiguous row reads instead of 32 bytes of 8 rows per load; scales and biases in the same copies).
// - gemv_qmma_smem_kernel (other 4-bit launches): the block first copies x into shared memory in the order the MMAs
//   read it (f32 x as bf16 hi + lo parts, two MMAs each) with each group's sum(x); 4-bit codes enter as
//   128 + q (one mask-and-or per pair; bias' = bias - 128 scale), 8-bit codes as two such nibbles against
//   x and 16 x. About half the instructions per weight byte of the other kernel, and no x traffic in the
//   loop. x rows that do not fit one block's shared memory run as several launches.
// - gemv_qmma_kernel (8 bits, BUNSEN_QMMA=0, or f32 scales): x read from global memory, sum(x) from an all-ones
//   MMA, exact codes (a bf16 FMA per 4-bit pair, f32 conversion for 8 bits).
// - gemv_qmma_ring_kernel (BUNSEN_QMMA_PLAN 1..4 at 4 bits, BUNSEN_QMMA_PLAN8 1..4 at 8 bits; group 64, bf16 x,
//   k % 512 == 0;
//   qmma_plan.h): the tile kernel with W warps per block and an S-stage cp.async ring per warp whose first
//   S stages are issued before the PDL wait, split from the real residency (smem-limited blocks per SM).
// Not a general GEMM (m > 8 goes to dequant_q.cu) and not for 2/3/5/6 bits (gemv_q.cu).
// Invariants: every output element is written by exactly one lane; the k split, the lane's k order and
// the summation order depend on (rows, k, bits, group) only, so a token's bits do not depend on m.
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/gemv_qmma.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 16;            // mma M: weight rows per warp tile
constexpr uint32_t kOnes = 0x3F803F80u;  // bf16x2 (1, 1)

std::atomic<int> g_split{0};

// Per-launch geometry of (bits, group). A lane holds, per row and group, kWpg consecutive words (the
// group's codes [t * kPerLane, (t + 1) * kPerLane) for lane t of its quad); a pipeline stage holds kU groups.
template <int kBits, int kGroup>
struct Geom {
  static constexpr int kWpg = kGroup * kBits / 128;
  static constexpr int kGroupWords = kGroup * kBits / 32;
  static constexpr int kPerLane = kGroup / 4;
  static constexpr int kU = kWpg >= 8 ? 1 : kWpg >= 4 ? 2 : 4;
};

// Raw scale/bias storage (2-byte types stay as bits until used, so a stage's loads do not stall).
template <typename SBT>
struct SbRaw {
  using type = unsigned short;
};
template <>
struct SbRaw<float> {
  using type = float;
};

__device__ __forceinline__ unsigned short load_sb(const Bf16* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ unsigned short load_sb(const Half* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ float load_sb(const float* p) {
  return __ldg(p);
}

__device__ __forceinline__ float sb_f32(unsigned short v, Bf16) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
__device__ __forceinline__ float sb_f32(unsigned short v, Half) {
  return __half2float(__ushort_as_half(v));
}
__device__ __forceinline__ float sb_f32(float v, float) {
  return v;
}

// c += A · B for one m16n8k16 bf16 tile (A rows = weight rows, B columns = tokens), f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (v & 0x000F000F) | 0x43004300: the 4-bit codes at bits [0, 4) and [16, 20) of v OR'ed under the exponent
// of 128, a bf16x2 pair reading 128 + q (ulp 1). One LOP3: written in C++, ptxas emits one LOP3 per
// immediate (an AND and an OR), ~16 extra instructions per 16-row group in the tiled kernels.
__device__ __forceinline__ uint32_t nibbles_under_128(uint32_t v) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(v), "n"(0x000F000F), "r"(0x43004300u));
  return r;
}

// The 4-bit codes at bits [0, 4) and [16, 20) of v as a bf16x2 pair of exact integers: OR'ed under the
// exponent of 128 they read 128 + q (ulp 1); one bf16x2 FMA (x * 1 - 128) leaves q exactly.
__device__ __forceinline__ uint32_t pair4(uint32_t v) {
  const uint32_t biased = nibbles_under_128(v);
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(biased), "r"(kOnes), "r"(0xC300C300u));
  return r;
}

// Bytes kB and kB + 1 of w (8-bit codes) as a bf16x2 pair of exact integers (q <= 255 fits bf16's 8
// significant bits).
template <int kB>
__device__ __forceinline__ uint32_t pair8(uint32_t w) {
  const float lo = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650 + kB)) - 8388608.0f;
  const float hi = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7651 + kB)) - 8388608.0f;
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The lane's two weight rows: mma rows g (index 0) and g + 8 (index 1).
template <typename SBT>
struct LaneRows {
  const uint32_t* w[2];
  const SBT* s[2];
  const SBT* b[2];
};

// Tile `tile` of the launch: plain launches walk the parts (ceil(n / 16) tiles each) and give rows n0 ..
// n0 + 15 of one part; gated launches give gate rows n0 .. n0 + 7 (mma rows 0..7) and the same up rows
// (mma rows 8..15). False when tile is past the last one.
template <bool kGlu>
__device__ __forceinline__ bool locate(const QMmaArgs& a, int64_t tile, int& part, int64_t& n0) {
  part = 0;
  if constexpr (kGlu) {
    n0 = tile * (kTileRows / 2);
    return n0 < a.part[0].w.rows;
  } else {
    for (int p = 0; p < a.n_parts; ++p) {
      const int64_t tiles = (a.part[p].w.rows + kTileRows - 1) / kTileRows;
      if (tile < tiles) {
        part = p;
        n0 = tile * kTileRows;
        return true;
      }
      tile -= tiles;
    }
    n0 = 0;
    return false;
  }
}

// Row pointers of lane (g, t) (codes already offset to the lane's words of group 0); a row past its part
// re-reads the part's last row (its sums are never stored).
template <bool kGlu, typename SBT>
__device__ __forceinline__ LaneRows<SBT> lane_rows(const QMmaArgs& a, int part, int64_t n0, int g, int lane_words) {
  LaneRows<SBT> lr;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const QuantView& w = a.part[kGlu ? r : part].w;
    int64_t row = kGlu ? n0 + g : n0 + g + 8 * r;
    row = row < w.rows ? row : w.rows - 1;
    row = row > 0 ? row : 0;
    lr.w[r] = w.packed + row * w.packed_stride + lane_words;
    lr.s[r] = static_cast<const SBT*>(w.scales) + row * w.sb_stride;
    lr.b[r] = static_cast<const SBT*>(w.biases) + row * w.sb_stride;
  }
  return lr;
}

// One pipeline stage: kU groups of the lane's 2 rows (codes, scales, biases).
template <int kBits, int kGroup, typename SBT, int kU = Geom<kBits, kGroup>::kU>
struct Stage {
  using G = Geom<kBits, kGroup>;
  uint32_t w[kU][2][G::kWpg];
  typename SbRaw<SBT>::type s[kU][2], b[kU][2];
};

// Issues the loads of iteration `it` (groups it * kU ..), skipping groups past ng (warp-uniform).
template <int kBits, int kGroup, typename SBT, int kU>
__device__ __forceinline__ void load_stage(Stage<kBits, kGroup, SBT, kU>& st, const LaneRows<SBT>& lr, int it, int ng) {
  using G = Geom<kBits, kGroup>;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int grp = it * kU + u;
    if (grp >= ng) break;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      load_chunk<G::kWpg>(lr.w[r] + grp * G::kGroupWords, st.w[u][r]);
      st.s[u][r] = load_sb(lr.s[r] + grp);
      st.b[u][r] = load_sb(lr.b[r] + grp);
    }
  }
}

// acc += the groups of stage `it`: per group, cq = sum(q * x) (rows x tokens) and co = sum(x) (tokens),
// then acc[e] += scale * cq[e] + bias * co[e & 1] for the lane's (row g | g + 8, token 2t | 2t + 1).
template <int kBits, int kGroup, typename SBT>
__device__ __forceinline__ void compute_stage(const Stage<kBits, kGroup, SBT>& st, int it, int ng, const Bf16* xrow,
                                              bool x_ok, float (&acc)[4]) {
  using G = Geom<kBits, kGroup>;
#pragma unroll
  for (int u = 0; u < G::kU; ++u) {
    const int grp = it * G::kU + u;
    if (grp >= ng) break;
    const Bf16* xg = xrow + grp * kGroup;
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f}, co[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kBits == 4) {
      // Word j holds codes 8j .. 8j + 7 of the lane's run; pairs (n0, n4), (n1, n5) feed one mma and
      // (n2, n6), (n3, n7) the next, with x permuted to the same pairs.
#pragma unroll
      for (int j = 0; j < G::kWpg; ++j) {
        const uint4 xv = x_ok ? __ldg(reinterpret_cast<const uint4*>(xg + 8 * j)) : make_uint4(0, 0, 0, 0);
        const uint32_t x04 = __byte_perm(xv.x, xv.z, 0x5410), x15 = __byte_perm(xv.x, xv.z, 0x7632);
        const uint32_t x26 = __byte_perm(xv.y, xv.w, 0x5410), x37 = __byte_perm(xv.y, xv.w, 0x7632);
        const uint32_t wa = st.w[u][0][j], wb = st.w[u][1][j];
        mma_bf16(cq, pair4(wa), pair4(wb), pair4(wa >> 4), pair4(wb >> 4), x04, x15);
        mma_bf16(co, kOnes, kOnes, kOnes, kOnes, x04, x15);
        mma_bf16(cq, pair4(wa >> 8), pair4(wb >> 8), pair4(wa >> 12), pair4(wb >> 12), x26, x37);
        mma_bf16(co, kOnes, kOnes, kOnes, kOnes, x26, x37);
      }
    } else {
      // Word j holds codes 4j .. 4j + 3: pairs (b0, b1) and (b2, b3) in natural order.
#pragma unroll
      for (int j = 0; j < G::kWpg; j += 2) {
        const uint4 xv = x_ok ? __ldg(reinterpret_cast<const uint4*>(xg + 4 * j)) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t wa = st.w[u][0][j + h], wb = st.w[u][1][j + h];
          const uint32_t xlo = h ? xv.z : xv.x, xhi = h ? xv.w : xv.y;
          mma_bf16(cq, pair8<0>(wa), pair8<0>(wb), pair8<2>(wa), pair8<2>(wb), xlo, xhi);
          mma_bf16(co, kOnes, kOnes, kOnes, kOnes, xlo, xhi);
        }
      }
    }
    const float s0 = sb_f32(st.s[u][0], SBT{}), s1 = sb_f32(st.s[u][1], SBT{});
    const float b0 = sb_f32(st.b[u][0], SBT{}), b1 = sb_f32(st.b[u][1], SBT{});
    acc[0] = fmaf(s0, cq[0], fmaf(b0, co[0], acc[0]));
    acc[1] = fmaf(s0, cq[1], fmaf(b0, co[1], acc[1]));
    acc[2] = fmaf(s1, cq[2], fmaf(b1, co[0], acc[2]));
    acc[3] = fmaf(s1, cq[3], fmaf(b1, co[1], acc[3]));
  }
}

// Lane (g, t) holds v[e] for mma row g + 8 * (e >> 1), token 2t + (e & 1): adds the bias (gated: applies
// silu(gate) * up, or gelu_tanh(gate) * up) and stores the valid outputs.
template <bool kGlu>
__device__ __forceinline__ void store_tile(const QMmaArgs& a, int part, int64_t n0, int g, int t,
                                           const float (&v)[4]) {
  if constexpr (kGlu) {
    const QMmaPart &pg = a.part[0], &pu = a.part[1];
    const int64_t row = n0 + g;
    if (row >= pg.w.rows) return;
    const float bg = pg.bias != nullptr ? load_any(pg.bias, a.bias_dtype, row) : 0.0f;
    const float bu = pu.bias != nullptr ? load_any(pu.bias, a.bias_dtype, row) : 0.0f;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t i = 2 * t + e;
      if (i >= a.m) continue;
      const float gate = v[e] + bg, up = v[2 + e] + bu;
      // gelu_tanh_mul's / silu_mul's formula (a.gelu_tanh is uniform over the launch)
      const float act = a.gelu_tanh ? gelu_tanh(gate) * up : gate / (1.0f + expf(-gate)) * up;
      store_any(pg.out, a.out_dtype, i * pg.out_stride + row, act);
    }
  } else {
    const QMmaPart& p = a.part[part];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = 2 * t + (e & 1), row = n0 + g + 8 * (e >> 1);
      if (i >= a.m || row >= p.w.rows) continue;
      const float bias = p.bias != nullptr ? load_any(p.bias, a.bias_dtype, row) : 0.0f;
      store_any(p.out, a.out_dtype, i * p.out_stride + row, v[e] + bias);
    }
  }
}

// The end of both kernels: warps splitting k (split > 1, uniform over the block) add their partial sums
// through shared memory in slice order, and slice 0 of each tile stores it.
template <bool kGlu>
__device__ __forceinline__ void finish_tile(const QMmaArgs& a, float4 (*partial)[32], const float (&acc)[4], int split,
                                            int slice, int warp, int lane, bool active, int part, int64_t n0) {
  float v[4] = {acc[0], acc[1], acc[2], acc[3]};
  if (split > 1) {
    partial[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (slice != 0) return;
    v[0] = v[1] = v[2] = v[3] = 0.0f;
    for (int p = 0; p < split; ++p) {
      const float4 q = partial[warp + p][lane];
      v[0] += q.x;
      v[1] += q.y;
      v[2] += q.z;
      v[3] += q.w;
    }
  }
  if (active) store_tile<kGlu>(a, part, n0, lane >> 2, lane & 3, v);
}

// Warps form groups of `split` (1, 2, 4 or 8) per row tile; warp `slice` of a group takes iterations
// slice, slice + split, ... (kU groups each), two stages in flight. Partial sums meet in shared memory in
// slice order.
template <int kBits, int kGroup, typename SBT, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2) gemv_qmma_kernel(const __grid_constant__ QMmaArgs a, int split) {
  using G = Geom<kBits, kGroup>;
  __shared__ float4 partial[kWarps][32];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slice = warp % split;
  int part = 0;
  int64_t n0 = 0;
  const bool active = locate<kGlu>(a, blockIdx.x * static_cast<int64_t>(kWarps / split) + warp / split, part, n0);
  const LaneRows<SBT> lr = lane_rows<kGlu, SBT>(a, part, n0, g, t * G::kWpg);
  const int ng = static_cast<int>(a.k / kGroup), n_iter = (ng + G::kU - 1) / G::kU;
  Stage<kBits, kGroup, SBT> sa, sb;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int it = slice;
  if (active && it < n_iter) load_stage(sa, lr, it, ng);  // weights depend on no earlier kernel
  pdl_wait();
  const bool x_ok = g < a.m;
  const Bf16* xrow = static_cast<const Bf16*>(a.x) + (x_ok ? g : 0) * a.x_stride + t * G::kPerLane;
  for (; active && it < n_iter; it += 2 * split) {
    if (it + split < n_iter) load_stage(sb, lr, it + split, ng);
    compute_stage(sa, it, ng, xrow, x_ok, acc);
    if (it + split >= n_iter) break;
    if (it + 2 * split < n_iter) load_stage(sa, lr, it + 2 * split, ng);
    compute_stage(sb, it + split, ng, xrow, x_ok, acc);
  }
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}

// ---- the x-in-shared-memory kernel (the default) ----
// The block first copies x (<= 8 rows, bf16; f32 x split into bf16 hi + lo parts) into shared memory, 4-bit
// chunks already permuted to the (n_e, n_e+4) pair order, together with every group's sum of x (f32, a fixed
// shuffle tree: deterministic). The inner loop then reads x with one shared load per word, needs no
// all-ones MMA for sum(x), and leaves the 4-bit codes biased by 128 (bias' = bias - 128 * scale folds the
// offset back): about half the instructions per weight byte of gemv_qmma_kernel, which stays for x that
// does not fit in shared memory.
constexpr size_t kSmemMax = size_t{96} << 10;  // dynamic shared memory of one block at most

// Groups per stage: 4 words of each of the lane's 2 rows (16 bytes per row), at least one group.
template <int kBits, int kGroup>
struct SmemStage {
  static constexpr int kU = Geom<kBits, kGroup>::kWpg >= 4 ? 1 : 4 / Geom<kBits, kGroup>::kWpg;
};

// The 4-bit codes at bits [0, 4) and [16, 20) of v as bf16x2 (128 + q0, 128 + q1): exact integers.
__device__ __forceinline__ uint32_t pair4_biased(uint32_t v) {
  return nibbles_under_128(v);
}

// 8 consecutive activations as 4 bf16x2 words (element 2i in the low half of word i); f32 x as hi + lo,
// two bf16 parts whose sum keeps ~16 significant bits (the GEMV then runs the MMAs once per part).
__device__ __forceinline__ void load_x8_bf16(const Bf16* p, uint4& hi, uint4& lo) {
  hi = __ldg(reinterpret_cast<const uint4*>(p));
  lo = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {  // a low, b high
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}
__device__ __forceinline__ void load_x8_bf16(const float* p, uint4& hi, uint4& lo) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p + 4));
  const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint32_t h[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
    l[i] = pack_bf16x2(f[2 * i] - __uint_as_float(h[i] << 16), f[2 * i + 1] - __uint_as_float(h[i] & 0xffff0000u));
  }
  hi = make_uint4(h[0], h[1], h[2], h[3]);
  lo = make_uint4(l[0], l[1], l[2], l[3]);
}

__device__ __forceinline__ float bf16x8_sum(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) s += __uint_as_float(w[i] << 16) + __uint_as_float(w[i] & 0xffff0000u);
  return s;
}

// Shared-memory bytes of a launch: m rows of k / 8 * x_words + 1 16-byte words (one word of padding
// spreads the rows over the banks; f32 x: twice, hi and lo parts) and m x (k / group) group sums.
// 16-byte words of shared x per 8 activations: 8-bit codes are fed as two 4-bit halves, x and 16 x.
__host__ __device__ constexpr int x_words(int bits) {
  return bits == 8 ? 2 : 1;
}

size_t smem_bytes(const QMmaArgs& a) {
  const size_t parts = a.x_dtype == DType::kF32 ? 2 : 1;
  return parts * static_cast<size_t>(a.m) * static_cast<size_t>(a.k / 8 * x_words(a.bits) + 1) * 16 +
         static_cast<size_t>(a.m) * static_cast<size_t>(a.k / a.group_size) * 4;
}

__device__ __forceinline__ uint4 perm4(uint4 v) {  // (e, e + 4) pairs: the 4-bit codes' order
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                    __byte_perm(v.y, v.w, 0x7632));
}

__device__ __forceinline__ uint32_t times16(uint32_t v) {  // bf16x2 * 16, exact
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x41804180u), "r"(0x80008000u));
  return r;
}

// The 8-bit layout of 8 activations: for codes (b0..b3) of a word, whose nibbles pair as (lo0, lo2),
// (hi0, hi2), (lo1, lo3), (hi1, hi3): (x0, x2), 16 (x0, x2), (x1, x3), 16 (x1, x3); then x4..x7 alike.
__device__ __forceinline__ void perm8(uint4 v, uint4& u0, uint4& u1) {
  const uint32_t a = __byte_perm(v.x, v.y, 0x5410), b = __byte_perm(v.x, v.y, 0x7632);
  const uint32_t c = __byte_perm(v.z, v.w, 0x5410), d = __byte_perm(v.z, v.w, 0x7632);
  u0 = make_uint4(a, times16(a), b, times16(b));
  u1 = make_uint4(c, times16(c), d, times16(d));
}

// Stores the 8 activations v at word `col` of a shared row in the layout of kBits.
template <int kBits>
__device__ __forceinline__ void store_x(uint4* row, int col, uint4 v) {
  if constexpr (kBits == 8) {
    perm8(v, row[2 * col], row[2 * col + 1]);
  } else {
    row[col] = perm4(v);
  }
}

// Copies x into shared memory (see above; f32 x: hi parts at xs, lo parts at xs + m * row_chunks) and
// computes the group sums of the values the MMAs see; ends with a block barrier. kNThreads: the block's
// threads (a multiple of 32).
template <int kBits, int kGroup, typename XT, int kNThreads = kThreads>
__device__ __forceinline__ void stage_x(const QMmaArgs& a, uint4* xs, float* gsum) {
  constexpr int kG8 = kGroup / 8;  // chunks per group: consecutive threads, one warp
  const int k8 = static_cast<int>(a.k / 8), row_chunks = k8 * x_words(kBits) + 1, ng = static_cast<int>(a.k / kGroup);
  const int total = static_cast<int>(a.m) * k8;
  uint4* xs_lo = xs + a.m * row_chunks;
  for (int base = 0; base < total; base += kNThreads) {
    const int c = base + static_cast<int>(threadIdx.x);
    const bool ok = c < total;
    const int r = ok ? c / k8 : 0, col = ok ? c - r * k8 : 0;
    uint4 hi = make_uint4(0, 0, 0, 0), lo = make_uint4(0, 0, 0, 0);
    if (ok) load_x8_bf16(static_cast<const XT*>(a.x) + r * a.x_stride + col * 8, hi, lo);
    float s = bf16x8_sum(hi);
    if constexpr (sizeof(XT) == 4) s += bf16x8_sum(lo);
#pragma unroll
    for (int o = 1; o < kG8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (ok) {
      store_x<kBits>(xs + r * row_chunks, col, hi);
      if constexpr (sizeof(XT) == 4) store_x<kBits>(xs_lo + r * row_chunks, col, lo);
      if ((threadIdx.x & (kG8 - 1)) == 0) gsum[r * ng + col / kG8] = s;
    }
  }
  __syncthreads();
}

// acc += the groups of stage `it`, x from shared memory (xrow: the lane's token row, offset to its quarter
// of group 0), sum(x) of tokens 2t / 2t + 1 from gs0 / gs1 (null: token past m).
// kLo: x has lo parts too, lo_off uint4 past xrow (f32 x).
template <int kBits, int kGroup, typename SBT, int kU, bool kLo>
__device__ __forceinline__ void compute_stage_smem(const Stage<kBits, kGroup, SBT, kU>& st, int it, int ng,
                                                   const uint4* xrow, int lo_off, bool x_ok, const float* gs0,
                                                   const float* gs1, float (&acc)[4]) {
  using G = Geom<kBits, kGroup>;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int grp = it * kU + u;
    if (grp >= ng) break;
    const uint4* xg = xrow + grp * (kGroup / 8 * x_words(kBits));
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Word j of a row: 4-bit codes 8j .. 8j + 7 as pairs (n0, n4), (n1, n5) | (n2, n6), (n3, n7); 8-bit
    // codes 4j .. 4j + 3 as nibble pairs (lo0, lo2), (hi0, hi2) | (lo1, lo3), (hi1, hi3); shared word j
    // holds the matching activations (store_x). Codes carry + 128 in every nibble.
#pragma unroll
    for (int j = 0; j < G::kWpg; ++j) {
      const uint32_t wa = st.w[u][0][j], wb = st.w[u][1][j];
      const uint32_t a0 = pair4_biased(wa), a1 = pair4_biased(wb), a2 = pair4_biased(wa >> 4), a3 = pair4_biased(wb >> 4);
      const uint32_t c0 = pair4_biased(wa >> 8), c1 = pair4_biased(wb >> 8), c2 = pair4_biased(wa >> 12),
                     c3 = pair4_biased(wb >> 12);
      const uint4 xv = x_ok ? xg[j] : make_uint4(0, 0, 0, 0);
      mma_bf16(cq, a0, a1, a2, a3, xv.x, xv.y);
      mma_bf16(cq, c0, c1, c2, c3, xv.z, xv.w);
      if constexpr (kLo) {
        const uint4 xl = x_ok ? xg[lo_off + j] : make_uint4(0, 0, 0, 0);
        mma_bf16(cq, a0, a1, a2, a3, xl.x, xl.y);
        mma_bf16(cq, c0, c1, c2, c3, xl.z, xl.w);
      }
    }
    const float co0 = gs0 != nullptr ? gs0[grp] : 0.0f, co1 = gs1 != nullptr ? gs1[grp] : 0.0f;
    const float s0 = sb_f32(st.s[u][0], SBT{}), s1 = sb_f32(st.s[u][1], SBT{});
    float b0 = sb_f32(st.b[u][0], SBT{}), b1 = sb_f32(st.b[u][1], SBT{});
    // The +128 of the codes: 4 bits 128 sum(x); 8 bits 128 sum(x) + 128 sum(16 x).
    constexpr float kOffset = kBits == 8 ? -128.0f * 17.0f : -128.0f;
    b0 = fmaf(kOffset, s0, b0);
    b1 = fmaf(kOffset, s1, b1);
    acc[0] = fmaf(s0, cq[0], fmaf(b0, co0, acc[0]));
    acc[1] = fmaf(s0, cq[1], fmaf(b0, co1, acc[1]));
    acc[2] = fmaf(s1, cq[2], fmaf(b1, co0, acc[2]));
    acc[3] = fmaf(s1, cq[3], fmaf(b1, co1, acc[3]));
  }
}

// As gemv_qmma_kernel (tiles, k split, reduction, store), with x and the group sums in shared memory.
template <int kBits, int kGroup, typename SBT, typename XT, bool kGlu, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemv_qmma_smem_kernel(const __grid_constant__ QMmaArgs a, int split) {
  using G = Geom<kBits, kGroup>;
  constexpr int kU = SmemStage<kBits, kGroup>::kU;
  extern __shared__ uint4 xs[];
  __shared__ float4 partial[kWarps][32];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slice = warp % split;
  int part = 0;
  int64_t n0 = 0;
  const bool active = locate<kGlu>(a, blockIdx.x * static_cast<int64_t>(kWarps / split) + warp / split, part, n0);
  const LaneRows<SBT> lr = lane_rows<kGlu, SBT>(a, part, n0, g, t * G::kWpg);
  const int ng = static_cast<int>(a.k / kGroup), n_iter = (ng + kU - 1) / kU;
  Stage<kBits, kGroup, SBT, kU> sa, sb;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int it = slice;
  if (active && it < n_iter) load_stage(sa, lr, it, ng);  // weights depend on no earlier kernel
  pdl_wait();
  const int row_chunks = static_cast<int>(a.k / 8) * x_words(kBits) + 1;
  constexpr bool kLo = sizeof(XT) == 4;
  const int lo_off = kLo ? static_cast<int>(a.m) * row_chunks : 0;
  float* gsum = reinterpret_cast<float*>(xs + (kLo ? 2 : 1) * a.m * row_chunks);
  stage_x<kBits, kGroup, XT>(a, xs, gsum);
  const bool x_ok = g < a.m;
  const uint4* xrow = xs + (x_ok ? g : 0) * row_chunks + t * (G::kPerLane / 8 * x_words(kBits));
  const float* gs0 = 2 * t < a.m ? gsum + 2 * t * ng : nullptr;
  const float* gs1 = 2 * t + 1 < a.m ? gsum + (2 * t + 1) * ng : nullptr;
  for (; active && it < n_iter; it += 2 * split) {
    if (it + split < n_iter) load_stage(sb, lr, it + split, ng);
    compute_stage_smem<kBits, kGroup, SBT, kU, kLo>(sa, it, ng, xrow, lo_off, x_ok, gs0, gs1, acc);
    if (it + split >= n_iter) break;
    if (it + 2 * split < n_iter) load_stage(sa, lr, it + 2 * split, ng);
    compute_stage_smem<kBits, kGroup, SBT, kU, kLo>(sb, it + split, ng, xrow, lo_off, x_ok, gs0, gs1, acc);
  }
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}


// ---- the tiled kernel (the default at 4 bits, group 64): weights staged through shared memory ----
// As gemv_qmma_smem_kernel (x and group sums in shared memory, the same per-group math), but a warp's
// weights come as whole tiles: 16 rows x 8 groups (256 contiguous bytes of each row, plus the rows' 8
// scales and 8 biases) copied with cp.async, two lanes-halves per row and 256 bytes per row per instruction,
// into a two-stage ring of the warp's own shared memory; the first stage is issued before the
// programmatic-dependent-launch wait. The rows are read in long contiguous runs instead of 32 bytes of 8 rows
// per load, and a stage costs 9 copy instructions per lane instead of 16 loads. Warp `slice` of a tile takes
// stages slice, slice + split, ... in order: deterministic and independent of m.
constexpr int kTileGroups = 8;                      // groups per stage (4 bits, group 64: 32 bytes each)
constexpr int kTileRowBytes = kTileGroups * 32;     // 256
constexpr int kTileRowStride = kTileRowBytes + 16;  // padded: the 8 rows x 4 quads of a read hit 32 banks
constexpr int kTileStages = 2;

struct WTile {
  unsigned char codes[kTileRows][kTileRowStride];
  unsigned short sc[kTileRows][kTileGroups];  // bf16 / f16 bits
  unsigned short bi[kTileRows][kTileGroups];
};
static_assert(sizeof(WTile) % 16 == 0, "tiles stay 16-byte aligned");
constexpr size_t kTileBytes = sizeof(WTile) * kTileStages * kWarps;

// Tile row r (0..15) of the warp's rows: plain launches rows n0 + r of `part`; gated launches gate rows
// n0 + r (r < 8) and up rows n0 + r - 8; a row past its part re-reads the part's last row.
__device__ __forceinline__ const QuantView& tile_view(const QMmaArgs& a, int part, int r, bool glu) {
  return a.part[glu ? (r < 8 ? 0 : 1) : part].w;
}

template <bool kGlu>
__device__ __forceinline__ int64_t tile_row(const QMmaArgs& a, int part, int64_t n0, int r) {
  const QuantView& w = tile_view(a, part, r, kGlu);
  int64_t row = kGlu ? n0 + (r & 7) : n0 + r;
  row = row < w.rows ? row : w.rows - 1;
  return row > 0 ? row : 0;
}

// The lean stage math of the tile and ring kernels (BUNSEN_QMMA_LEAN, default on): compute_stage_smem over the
// kTileGroups groups of one staged tile, bit for bit (the same MMAs, sums and FMAs in the same order), but
// the tile's 8 scales and 8 biases of rows g and g + 8 and the stage's group sums are read as 16-byte vectors
// once per stage, and nothing is guarded per group: stages are whole (tiles_fit wants k % 512 == 0), and a
// lane whose token (g for x, 2t / 2t + 1 for the sums) is past m reads token 0's values instead of zeros: MMA
// column n and the sums of token n only reach outputs of token n, which store_tile never stores for n >= m.
// With the one-LOP3 nibble unpacking, Nsight Compute: 8B gate/up 109 -> ~60 instructions per 16-row group.
// xg: the lane's shared x at the stage's first group; gs0 / gs1: the group sums of tokens 2t / 2t + 1 (token
// 0's when past m) at the stage's first group. Tile: WTile or RingTile<kBits> (same member layout).
template <int kBits, typename SBT, typename Tile>
__device__ __forceinline__ void compute_tile(const Tile& wt, const uint4* xg, const float* gs0, const float* gs1,
                                             int g, int t, float (&acc)[4]) {
  using G = Geom<kBits, 64>;
  constexpr int kXw = 8 * x_words(kBits);  // shared x words per group
  constexpr float kOffset = kBits == 8 ? -128.0f * 17.0f : -128.0f;  // as compute_stage_smem
  const uint4 sa = *reinterpret_cast<const uint4*>(wt.sc[g]), sb = *reinterpret_cast<const uint4*>(wt.sc[g + 8]);
  const uint4 ba = *reinterpret_cast<const uint4*>(wt.bi[g]), bb = *reinterpret_cast<const uint4*>(wt.bi[g + 8]);
  const float4 c0l = *reinterpret_cast<const float4*>(gs0), c0h = *reinterpret_cast<const float4*>(gs0 + 4);
  const float4 c1l = *reinterpret_cast<const float4*>(gs1), c1h = *reinterpret_cast<const float4*>(gs1 + 4);
  const uint32_t s0w[4] = {sa.x, sa.y, sa.z, sa.w}, s1w[4] = {sb.x, sb.y, sb.z, sb.w};
  const uint32_t b0w[4] = {ba.x, ba.y, ba.z, ba.w}, b1w[4] = {bb.x, bb.y, bb.z, bb.w};
  const float co0s[8] = {c0l.x, c0l.y, c0l.z, c0l.w, c0h.x, c0h.y, c0h.z, c0h.w};
  const float co1s[8] = {c1l.x, c1l.y, c1l.z, c1l.w, c1h.x, c1h.y, c1h.z, c1h.w};
  auto half_of = [](uint32_t w, int u) { return static_cast<unsigned short>(u & 1 ? w >> 16 : w & 0xffffu); };
#pragma unroll
  for (int u = 0; u < kTileGroups; ++u) {
    uint32_t w0[G::kWpg], w1[G::kWpg];  // the lane's words of rows g and g + 8 in group u
    const unsigned char* ca = &wt.codes[g][u * (64 * kBits / 8) + t * (G::kWpg * 4)];
    const unsigned char* cb = &wt.codes[g + 8][u * (64 * kBits / 8) + t * (G::kWpg * 4)];
    if constexpr (kBits == 8) {
      const uint4 va = *reinterpret_cast<const uint4*>(ca), vb = *reinterpret_cast<const uint4*>(cb);
      w0[0] = va.x, w0[1] = va.y, w0[2] = va.z, w0[3] = va.w;
      w1[0] = vb.x, w1[1] = vb.y, w1[2] = vb.z, w1[3] = vb.w;
    } else {
      const uint2 va = *reinterpret_cast<const uint2*>(ca), vb = *reinterpret_cast<const uint2*>(cb);
      w0[0] = va.x, w0[1] = va.y;
      w1[0] = vb.x, w1[1] = vb.y;
    }
    const uint4* x = xg + u * kXw;
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < G::kWpg; ++j) {  // as compute_stage_smem: word j of rows g and g + 8
      const uint4 xv = x[j];
      mma_bf16(cq, pair4_biased(w0[j]), pair4_biased(w1[j]), pair4_biased(w0[j] >> 4), pair4_biased(w1[j] >> 4),
               xv.x, xv.y);
      mma_bf16(cq, pair4_biased(w0[j] >> 8), pair4_biased(w1[j] >> 8), pair4_biased(w0[j] >> 12),
               pair4_biased(w1[j] >> 12), xv.z, xv.w);
    }
    const float s0 = sb_f32(half_of(s0w[u / 2], u), SBT{}), s1 = sb_f32(half_of(s1w[u / 2], u), SBT{});
    float b0 = sb_f32(half_of(b0w[u / 2], u), SBT{}), b1 = sb_f32(half_of(b1w[u / 2], u), SBT{});
    b0 = fmaf(kOffset, s0, b0);
    b1 = fmaf(kOffset, s1, b1);
    const float co0 = co0s[u], co1 = co1s[u];
    acc[0] = fmaf(s0, cq[0], fmaf(b0, co0, acc[0]));
    acc[1] = fmaf(s0, cq[1], fmaf(b0, co1, acc[1]));
    acc[2] = fmaf(s1, cq[2], fmaf(b1, co0, acc[2]));
    acc[3] = fmaf(s1, cq[3], fmaf(b1, co1, acc[3]));
  }
}

template <typename SBT, bool kGlu, bool kLean>
__global__ void __launch_bounds__(kThreads, 2) gemv_qmma_tile_kernel(const __grid_constant__ QMmaArgs a, int split) {
  using G = Geom<4, 64>;
  extern __shared__ uint4 xs[];
  __shared__ float4 partial[kWarps][32];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slice = warp % split;
  int part = 0;
  int64_t n0 = 0;
  const bool active = locate<kGlu>(a, blockIdx.x * static_cast<int64_t>(kWarps / split) + warp / split, part, n0);
  const int ng = static_cast<int>(a.k / 64), n_st = ng / kTileGroups;
  const int row_chunks = static_cast<int>(a.k / 8) + 1;
  const size_t x_uint4 = (static_cast<size_t>(a.m) * row_chunks * 16 + static_cast<size_t>(a.m) * ng * 4 + 15) / 16;
  WTile* tiles = reinterpret_cast<WTile*>(xs + x_uint4) + warp * kTileStages;
  // This lane copies the 16-byte column (lane & 15) of tile rows 2 i + (lane >> 4), i < 8, and (lane < 16)
  // the scales / (lane >= 16) the biases of tile row lane & 15.
  const unsigned char* src[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = 2 * i + (lane >> 4);
    const QuantView& w = tile_view(a, part, r, kGlu);
    src[i] = reinterpret_cast<const unsigned char*>(w.packed + tile_row<kGlu>(a, part, n0, r) * w.packed_stride) +
             (lane & 15) * 16;
  }
  const unsigned short* sb_src;
  {
    const int r = lane & 15;
    const QuantView& w = tile_view(a, part, r, kGlu);
    sb_src = static_cast<const unsigned short*>(lane < 16 ? w.scales : w.biases) + tile_row<kGlu>(a, part, n0, r) * w.sb_stride;
  }
  auto issue = [&](int st, WTile& wt) {  // every stage is whole: tiles_fit wants k % 512 == 0
    const int grp0 = st * kTileGroups;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      cp_async_16(&wt.codes[2 * i + (lane >> 4)][(lane & 15) * 16], src[i] + static_cast<int64_t>(grp0) * 32);
    cp_async_16(lane < 16 ? wt.sc[lane & 15] : wt.bi[lane & 15], sb_src + grp0);
    cp_async_commit_group();
  };
  if (active && slice < n_st) issue(slice, tiles[0]);  // weights depend on no earlier kernel
  pdl_wait();
  float* gsum = reinterpret_cast<float*>(xs + a.m * row_chunks);
  stage_x<4, 64, Bf16>(a, xs, gsum);
  const bool x_ok = g < a.m;
  const uint4* xrow = xs + (x_ok ? g : 0) * row_chunks + t * (G::kPerLane / 8);
  const float* gs0 = 2 * t < a.m ? gsum + 2 * t * ng : nullptr;
  const float* gs1 = 2 * t + 1 < a.m ? gsum + (2 * t + 1) * ng : nullptr;
  const float* gl0 = gsum + (2 * t < a.m ? 2 * t : 0) * ng;  // compute_tile's: token 0's past m
  const float* gl1 = gsum + (2 * t + 1 < a.m ? 2 * t + 1 : 0) * ng;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int b = 0;
  for (int it = slice; active && it < n_st; it += split, b ^= 1) {
    const int next = it + split;
    if (next < n_st) {
      issue(next, tiles[b ^ 1]);  // consumed by the previous iteration, which ended with a warp barrier
      cp_async_wait_group<1>();
    } else {
      cp_async_wait_group<0>();
    }
    __syncwarp();
    const WTile& wt = tiles[b];
    if constexpr (kLean) {
      compute_tile<4, SBT>(wt, xrow + it * kTileGroups * 8, gl0 + it * kTileGroups, gl1 + it * kTileGroups, g, t, acc);
    } else {
#pragma unroll
    for (int u = 0; u < kTileGroups; ++u) {
      const int grp = it * kTileGroups + u;
      Stage<4, 64, SBT, 1> st;
      const uint2 wa = *reinterpret_cast<const uint2*>(&wt.codes[g][u * 32 + t * 8]);
      const uint2 wb = *reinterpret_cast<const uint2*>(&wt.codes[g + 8][u * 32 + t * 8]);
      st.w[0][0][0] = wa.x;
      st.w[0][0][1] = wa.y;
      st.w[0][1][0] = wb.x;
      st.w[0][1][1] = wb.y;
      st.s[0][0] = wt.sc[g][u];
      st.s[0][1] = wt.sc[g + 8][u];
      st.b[0][0] = wt.bi[g][u];
      st.b[0][1] = wt.bi[g + 8][u];
      compute_stage_smem<4, 64, SBT, 1, false>(st, grp, ng, xrow, 0, x_ok, gs0, gs1, acc);
    }
    }
    __syncwarp();
  }
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}

// ---- the ring kernel (BUNSEN_QMMA_PLAN 1..4, BUNSEN_QMMA_PLAN8 1..4): the tiled kernel
// with kW warps and a kS-stage ring ----
// As gemv_qmma_tile_kernel (the same tiles, copies, per-group math and reduction), but every warp owns a
// ring of kS tiles and issues its first kS stages (all of them when a warp has <= kS stages, as in the
// small q/k/v and o launches) before the programmatic-dependent-launch wait, so a launch's weights stream
// while the previous kernel finishes. One commit group per ring slot and iteration (empty ones too), so
// wait_group<kS - 1> always means "the oldest slot has landed".
// Launch analysis, m = 1, H200 (132 SMs, 228 KB shared memory per SM). A stage is 16 rows x 256 B of
// codes + 512 B of scales/biases = 4,608 B (WTile 4,864 B with padding); x + group sums of one row take
// 8.5 KB at k = 4,096 (29.6 KB at 14,336). Registers (ptxas): tile kernel 72, 4-bit ring kernels 84-92,
// 8-bit 94-112, no spills, so shared memory sets residency: plan 0 and 4: 2 blocks (16 warps)/SM, plan 1:
// 1 (8 warps), plan 2: 2 (8 warps), plan 3: 3 (12 warps; 2 at k = 14,336). 8 bits (9,728 B tiles, x 16.6
// KB at k = 4,096): plan8 1 (8 x 2): 1 block, 8 warps; 2 (4 x 2): 2 blocks, 8 warps; 3 (4 x 3): 1 block,
// 4 warps; 4 (2 x 4): 2 blocks, 4 warps - 75-150 KB of ring per SM either way. Per launch: split, blocks, warps on the
// busiest SM, stages per warp, ring bytes in flight per busy SM (all a warp's ring at once):
//   shape (MB, tiles x stages)   plan 0 (tile kernel)         plan 2 (4 x 4 ring)          plan 3 (4 x 3)
//   8B q/k/v (14.2, 384 x 8)     s8 384 blk 16 w 1 st 72 KB   s2 192 blk 8 w 4 st 144 KB   s4 384 blk 12 w 108 KB
//   8B o (9.4, 256 x 8)          s8 256 blk 16 w 1 st 72 KB   s2 128 blk 4 w 4 st 72 KB    s4 256 blk 8 w 72 KB
//   8B gate/up (66.1, 1792 x 8)  s1 224 blk 16 w 8 st 144 KB  s1 448 blk 8 w 8 st 144 KB   s1 448 blk 12 w 162 KB
//   8B down (33.0, 256 x 28)     s8 256 blk 16 w 4 st 144 KB  s4 256 blk 8 w 7 st 144 KB   s4 256 blk 8 w 108 KB
//   8B lm_head (295, 8016 x 8)   s1 1002 blk (3.8 waves)      s1 2004 blk (3.8 waves)      s1 2004 blk (2.5 waves)
//   1B q/k/v (3.5, 192 x 4)      s4 96 blk 8 w 1 st 36 KB     s2 96 blk 4 w 2 st 36 KB     (as plan 2)
//   1B o (2.4, 128 x 4)          s4 64 blk 8 w 1 st 36 KB     s4 128 blk 4 w 1 st 18 KB    (as plan 2)
//   1B gate/up (18.9, 1024 x 4)  s2 256 blk 16 w 2 st 144 KB  s1 256 blk 8 w 4 st 144 KB   s1 256 blk 8 w 108 KB
//   1B down (9.4, 128 x 16)      s8 128 blk 8 w 2 st 72 KB    s4 128 blk 4 w 4 st 72 KB    s4 128 blk 4 w 54 KB
// Plan 0's choose_split counts residency by registers only (3 blocks/SM) while shared memory allows 2, so
// 8B q/k/v gets split 8 = 384 blocks for 264 slots: two waves of one-stage warps, whose second stage (for
// the launches with more) is issued only after the PDL wait and the x staging. The ring plans size the
// split from the real residency (with one row of x, so never from m) and put a warp's first kS stages -
// every stage of the small launches - in flight before the wait. Plan 1 (8 x 4: 1 block/SM, 8 warps) and
// plan 4 (8 x 2 with the ring's prologue and split model) isolate the two changes.
// The ring's tile of kBits codes: 16 rows x 8 groups (256 B a row at 4 bits, 512 B at 8) + scales and
// biases. Rows are padded so that a quarter-warp's 16-byte reads (8-bit: rows g, g + 1 x 4 quads) and a
// half-warp's 8-byte reads (4-bit, as WTile) spread over the banks.
template <int kBits>
struct RingTile {
  static constexpr int kRowBytes = kTileGroups * 64 * kBits / 8;
  static constexpr int kRowStride = kRowBytes + (kBits == 8 ? 64 : 16);
  static constexpr int kChunksPerRow = kRowBytes / 16;  // 16-byte copies
  static constexpr int kCopies = kTileRows * kChunksPerRow / 32;  // per lane: 8 (4 bits) or 16 (8 bits)
  unsigned char codes[kTileRows][kRowStride];
  unsigned short sc[kTileRows][kTileGroups];  // bf16 / f16 bits
  unsigned short bi[kTileRows][kTileGroups];
};
static_assert(sizeof(RingTile<4>) == sizeof(WTile), "the 4-bit ring tile is the tile kernel's");
static_assert(sizeof(RingTile<8>) % 16 == 0, "tiles stay 16-byte aligned");

template <int kBits, typename SBT, bool kGlu, int kW, int kS, bool kLean>
__global__ void __launch_bounds__(kW * 32, 2 * 8 / kW)  // <= 128 registers: 16 warps/SM by registers
    gemv_qmma_ring_kernel(const __grid_constant__ QMmaArgs a, int split) {
  using G = Geom<kBits, 64>;
  using T = RingTile<kBits>;
  extern __shared__ uint4 xs[];
  __shared__ float4 partial[kW][32];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slice = warp % split;
  int part = 0;
  int64_t n0 = 0;
  const bool active = locate<kGlu>(a, blockIdx.x * static_cast<int64_t>(kW / split) + warp / split, part, n0);
  const int ng = static_cast<int>(a.k / 64), n_st = ng / kTileGroups;
  const int row_chunks = static_cast<int>(a.k / 8) * x_words(kBits) + 1;
  const size_t x_uint4 = (static_cast<size_t>(a.m) * row_chunks * 16 + static_cast<size_t>(a.m) * ng * 4 + 15) / 16;
  T* ring = reinterpret_cast<T*>(xs + x_uint4) + warp * kS;
  // Copy i of a stage: the lane's 16-byte chunk c = 32 i + lane of the tile, row c / kChunksPerRow, column
  // c % kChunksPerRow (4 bits: rows 2 i + (lane >> 4), 8 bits: row i); lanes < 16 copy the scales and the
  // others the biases of tile row lane & 15.
  const unsigned char* src[T::kCopies];
#pragma unroll
  for (int i = 0; i < T::kCopies; ++i) {
    const int c = 32 * i + lane, r = c / T::kChunksPerRow;
    const QuantView& w = tile_view(a, part, r, kGlu);
    src[i] = reinterpret_cast<const unsigned char*>(w.packed + tile_row<kGlu>(a, part, n0, r) * w.packed_stride) +
             (c % T::kChunksPerRow) * 16;
  }
  const unsigned short* sb_src;
  {
    const int r = lane & 15;
    const QuantView& w = tile_view(a, part, r, kGlu);
    sb_src = static_cast<const unsigned short*>(lane < 16 ? w.scales : w.biases) +
             tile_row<kGlu>(a, part, n0, r) * w.sb_stride;
  }
  auto issue = [&](int st, T& wt) {
    const int64_t off = static_cast<int64_t>(st) * T::kRowBytes;
#pragma unroll
    for (int i = 0; i < T::kCopies; ++i) {
      const int c = 32 * i + lane;
      cp_async_16(&wt.codes[c / T::kChunksPerRow][(c % T::kChunksPerRow) * 16], src[i] + off);
    }
    cp_async_16(lane < 16 ? wt.sc[lane & 15] : wt.bi[lane & 15], sb_src + st * kTileGroups);
  };
  // This warp's stages: slice, slice + split, ... (warp-uniform count).
  const int mine = active && slice < n_st ? (n_st - slice + split - 1) / split : 0;
#pragma unroll
  for (int s = 0; s < kS; ++s) {  // weights depend on no earlier kernel
    if (s < mine) issue(slice + s * split, ring[s]);
    cp_async_commit_group();
  }
  pdl_wait();
  float* gsum = reinterpret_cast<float*>(xs + a.m * row_chunks);
  stage_x<kBits, 64, Bf16, kW * 32>(a, xs, gsum);
  const bool x_ok = g < a.m;
  const uint4* xrow = xs + (x_ok ? g : 0) * row_chunks + t * (G::kPerLane / 8 * x_words(kBits));
  const float* gs0 = 2 * t < a.m ? gsum + 2 * t * ng : nullptr;
  const float* gs1 = 2 * t + 1 < a.m ? gsum + (2 * t + 1) * ng : nullptr;
  const float* gl0 = gsum + (2 * t < a.m ? 2 * t : 0) * ng;  // compute_tile's: token 0's past m
  const float* gl1 = gsum + (2 * t + 1 < a.m ? 2 * t + 1 : 0) * ng;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0;
  for (int j = 0; j < mine; ++j) {
    cp_async_wait_group<kS - 1>();
    __syncwarp();
    const T& wt = ring[slot];
    const int it = slice + j * split;
    if constexpr (kLean) {
      compute_tile<kBits, SBT>(wt, xrow + it * kTileGroups * 8 * x_words(kBits), gl0 + it * kTileGroups,
                               gl1 + it * kTileGroups, g, t, acc);
    } else {
#pragma unroll
    for (int u = 0; u < kTileGroups; ++u) {
      Stage<kBits, 64, SBT, 1> st;  // the lane's G::kWpg words of rows g and g + 8 in group u
      const unsigned char* ca = &wt.codes[g][u * (64 * kBits / 8) + t * (G::kWpg * 4)];
      const unsigned char* cb = &wt.codes[g + 8][u * (64 * kBits / 8) + t * (G::kWpg * 4)];
      if constexpr (kBits == 8) {
        const uint4 wa = *reinterpret_cast<const uint4*>(ca), wb = *reinterpret_cast<const uint4*>(cb);
        st.w[0][0][0] = wa.x, st.w[0][0][1] = wa.y, st.w[0][0][2] = wa.z, st.w[0][0][3] = wa.w;
        st.w[0][1][0] = wb.x, st.w[0][1][1] = wb.y, st.w[0][1][2] = wb.z, st.w[0][1][3] = wb.w;
      } else {
        const uint2 wa = *reinterpret_cast<const uint2*>(ca), wb = *reinterpret_cast<const uint2*>(cb);
        st.w[0][0][0] = wa.x, st.w[0][0][1] = wa.y;
        st.w[0][1][0] = wb.x, st.w[0][1][1] = wb.y;
      }
      st.s[0][0] = wt.sc[g][u];
      st.s[0][1] = wt.sc[g + 8][u];
      st.b[0][0] = wt.bi[g][u];
      st.b[0][1] = wt.bi[g + 8][u];
      compute_stage_smem<kBits, 64, SBT, 1, false>(st, it * kTileGroups + u, ng, xrow, 0, x_ok, gs0, gs1, acc);
    }
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
    if (j + kS < mine) issue(slice + (j + kS) * split, ring[slot]);
    cp_async_commit_group();
    slot = slot + 1 == kS ? 0 : slot + 1;
  }
  cp_async_wait_group<0>();  // no copy outlives the block (only empty groups can be pending here)
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}

int64_t total_tiles(const QMmaArgs& a) {
  if (a.glu) return (a.part[0].w.rows + kTileRows / 2 - 1) / (kTileRows / 2);
  int64_t tiles = 0;
  for (int p = 0; p < a.n_parts; ++p) tiles += (a.part[p].w.rows + kTileRows - 1) / kTileRows;
  return tiles;
}


// A launch's k split (the test hook's, or choose_split over `iters` iterations per tile with `resident`
// warps) and the blocks that cover `tiles` row tiles with it.
struct SplitGrid {
  int split;
  unsigned blocks;
};
SplitGrid split_grid(int64_t tiles, int64_t iters, int64_t resident) {
  const int forced = g_split.load();
  const int split = forced == 1 || forced == 2 || forced == 4 || forced == 8 ? forced
                                                                             : choose_split(tiles, iters, resident, kWarps);
  const int64_t tiles_per_block = kWarps / split;
  return {split, static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block)};
}

template <int kBits, int kGroup, typename SBT, bool kGlu>
cudaError_t launch(cudaStream_t stream, const QMmaArgs& a) {
  using G = Geom<kBits, kGroup>;
  static const int blocks_per_sm = occupancy(gemv_qmma_kernel<kBits, kGroup, SBT, kGlu>, kThreads);
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * blocks_per_sm;
  const int64_t ng = a.k / kGroup, iters = (ng + G::kU - 1) / G::kU;
  const SplitGrid sg = split_grid(total_tiles(a), iters, resident);
  return launch_pdl(gemv_qmma_kernel<kBits, kGroup, SBT, kGlu>, dim3(sg.blocks), dim3(kThreads), 0, stream, a, sg.split);
}

// BUNSEN_QMMA (read once) picks the kernel: unset, the shared-memory kernel for 4-bit weights and
// gemv_qmma_kernel for 8-bit (on the H200 the 8-bit nibble form measured slower: 215 vs 236 tok/s on the
// Llama-3.1-8B shape, while 4 bits went from 248 to 266); 0: gemv_qmma_kernel for both; 2: the
// shared-memory kernel for both; 3: as 2 with 3 blocks per SM at 4 bits.
int qmma_variant() {
  static const int v = [] {
    const char* e = std::getenv("BUNSEN_QMMA");
    return e != nullptr && *e != '\0' ? std::atoi(e) : -1;
  }();
  return v;
}

size_t x_budget(const QMmaArgs& a);

// Rows of x one shared-memory launch takes (0: not even one row fits).
int64_t smem_rows(const QMmaArgs& a) {
  const size_t budget = x_budget(a);
  QMmaArgs r = a;
  for (r.m = a.m; r.m > 0; --r.m)
    if (smem_bytes(r) <= budget) break;
  return r.m;
}

// Whether the launch takes the shared-memory kernel (the bit width's default or BUNSEN_QMMA, bf16/f16
// scales, one row of x fits; more rows than fit run as several launches of the same kernel, so a token's
// bits never depend on m).
bool tiles_fit(const QMmaArgs& a);

bool smem_fits(const QMmaArgs& a) {
  const int v = qmma_variant();
  const bool ring8 = a.bits == 8 && a.group_size == 64 && qmma_plan8() != 0 && tiles_fit(a);
  const bool wanted = v < 0 ? a.bits == 4 || ring8 : v != 0;
  return wanted && a.part[0].w.sb_dtype != DType::kF32 && smem_rows(a) >= 1;
}

template <int kBits, int kGroup, typename SBT, typename XT, bool kGlu, int kMinBlocks>
cudaError_t launch_smem(cudaStream_t stream, const QMmaArgs& a) {
  constexpr int kU = SmemStage<kBits, kGroup>::kU;
  auto kernel = gemv_qmma_smem_kernel<kBits, kGroup, SBT, XT, kGlu, kMinBlocks>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax, "linear_q (tensor-core GEMV)");
  static const int by_regs = occupancy(kernel, kThreads);
  const size_t smem = smem_bytes(a);
  // The k split is modelled on the register-limited residency only, so it never depends on m (shared
  // memory grows with m): a token's summation order is the same in any launch of this kernel.
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * by_regs;
  const int64_t ng = a.k / kGroup, iters = (ng + kU - 1) / kU;
  const SplitGrid sg = split_grid(total_tiles(a), iters, resident);
  return launch_pdl(kernel, dim3(sg.blocks), dim3(kThreads), smem, stream, a, sg.split);
}

template <int kBits, int kGroup, typename SBT>
cudaError_t launch_smem_x(cudaStream_t stream, const QMmaArgs& a) {
  if (a.x_dtype == DType::kF32) return launch_smem<kBits, kGroup, SBT, float, false, 2>(stream, a);  // never gated
  if (kBits == 4 && qmma_variant() == 3)
    return a.glu ? launch_smem<kBits, kGroup, SBT, Bf16, true, 3>(stream, a)
                 : launch_smem<kBits, kGroup, SBT, Bf16, false, 3>(stream, a);
  return a.glu ? launch_smem<kBits, kGroup, SBT, Bf16, true, 2>(stream, a)
               : launch_smem<kBits, kGroup, SBT, Bf16, false, 2>(stream, a);
}

// Unless BUNSEN_QMMA_TILES=0 (read once) or set_linear_q_tiles_for_testing(0): 4-bit group-64 launches with
// bf16 x and k a multiple of 512 take gemv_qmma_tile_kernel where its copies are aligned (16-byte scale/bias
// rows). H200, Llama-3.1-8B 4-bit decode chain 2,981 -> 2,348 us, whole model 264 -> 303 tok/s.
std::atomic<int> g_tiles{-1};

bool tiles_wanted() {
  const int forced = g_tiles.load();
  if (forced >= 0) return forced != 0;
  static const bool env = [] {
    const char* e = std::getenv("BUNSEN_QMMA_TILES");
    return e == nullptr || e[0] != '0';
  }();
  return env;
}

bool tiles_fit(const QMmaArgs& a) {
  const bool bits_ok = a.bits == 4 || (a.bits == 8 && qmma_plan8() != 0);  // 8 bits: the ring kernel only
  if (!bits_ok || a.group_size != 64 || a.x_dtype != DType::kBF16 || a.k % (64 * kTileGroups) != 0 ||
      !tiles_wanted())
    return false;
  for (int p = 0; p < a.n_parts; ++p) {
    const QuantView& w = a.part[p].w;
    if (w.sb_dtype == DType::kF32 || w.sb_stride % 8 != 0 || reinterpret_cast<uintptr_t>(w.scales) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(w.biases) % 16 != 0)
      return false;
  }
  return true;
}

// ---- launch plans (qmma_plan.h) ----
std::atomic<int> g_plan{-1}, g_plan8{-1}, g_lean{-1};

struct PlanShape {
  int warps, stages;
};
// Warps x ring stages per plan (index 0: the tile kernel at 4 bits, the register kernel at 8). An 8-bit
// stage is twice as large (8,960 B), so its rings are shorter.
constexpr PlanShape kPlanShape[kQMmaPlans] = {{8, 2}, {8, 4}, {4, 4}, {4, 3}, {8, 2}};
constexpr PlanShape kPlanShape8[kQMmaPlans] = {{0, 0}, {8, 2}, {4, 2}, {4, 3}, {2, 4}};
constexpr size_t kBlockSmemMax = 232448;  // sm_90: shared memory of one block (dynamic + static) at most

constexpr size_t ring_tile_bytes(int bits, int warps, int stages) {
  return (bits == 8 ? sizeof(RingTile<8>) : sizeof(RingTile<4>)) * static_cast<size_t>(warps) *
         static_cast<size_t>(stages);
}
// Shared x (+ group sums) one block of a ring plan may take beside its tiles and the static reduction
// buffer (4-bit plan 1 at m = 8, k = 4096: 67.7 KB of 71 KB; larger m*k runs as several launches).
constexpr size_t ring_x_budget(int bits, int warps, int stages) {
  return std::min(kSmemMax, kBlockSmemMax - ring_tile_bytes(bits, warps, stages) - sizeof(float4) * 32 * warps - 64);
}

// The 4-bit plan of launch a: the hook's or BUNSEN_QMMA_PLAN's when set, else plan 0 (the tile kernel) for
// every launch kind, never by m. H200, QMmaPlanBench.Shapes in a graph, m 1, both with the lean stage math
// (compute_tile), plan 0 vs 4 (ring, 8 warps x 2 stages): 8B q/k/v 7.18 vs 7.97 us, o 6.15 vs 6.93, gate/up
// 20.82 vs 21.95, down 13.79 vs 15.82, lm_head 80.1 vs 83.5; whole 8B 4-bit model 346.6 / 339.6 tok/s vs
// 335.2 / 333.5 with plan 4 for q/k/v and gate/up (before the lean math the ring had won those two).
int qmma_plan_for(const QMmaArgs& a) {
  (void)a;
  const int plan = qmma_plan();
  return plan >= 0 ? plan : 0;
}

int plan_of(const QMmaArgs& a) {
  return a.bits == 8 ? qmma_plan8() : qmma_plan_for(a);
}
PlanShape shape_of(int bits, int plan) {
  return bits == 8 ? kPlanShape8[plan] : kPlanShape[plan];
}

// Shared x budget of a launch: the ring plans' when the launch takes the ring kernel, else kSmemMax.
// Depends on the launch's shapes and the plan, never on m.
size_t x_budget(const QMmaArgs& a) {
  const int plan = plan_of(a);
  if (plan == 0 || !tiles_fit(a)) return kSmemMax;
  const PlanShape ps = shape_of(a.bits, plan);
  return ring_x_budget(a.bits, ps.warps, ps.stages);
}

// The ring plans' k split (1, 2, 4, ... warps per row tile): the least modelled time of
//   waves * (round trips of a warp's ring * ~1 us + ~0.7 us per wave: launch, x staging, reduction)
//   + the stages of the busier of (an even share, half the busiest SM) at an SM's share of the copy rate
// (a stage of 4,608 B at 4.3 TB/s / 132 SMs: 0.14 us; 8 bits: 8,704 B, 0.27 us). A warp has
// ceil(iters / split) stages and keeps `stages` of them in flight, so ceil(iters / split / stages) round
// trips; blocks of `warps / split` tiles fill sms * bps slots per wave. Ties go to the smaller split.
// Depends on (tiles, k, bits, GPU), never on m.
int ring_split(int64_t tiles, int64_t iters, int64_t sms, int64_t bps, int warps, int stages, int bits) {
  constexpr double kTripUs = 1.0, kWaveUs = 0.7;
  const double kStageUs = (bits == 8 ? 8704.0 : 4608.0) / 32.6e3;
  int best = 1;
  double best_cost = 0.0;
  for (int split = 1; split <= warps && (split == 1 || iters >= split); split *= 2) {
    const int64_t tpb = warps / split, blocks = (tiles + tpb - 1) / tpb;
    const int64_t waves = (blocks + sms * bps - 1) / (sms * bps);
    const int64_t warp_stages = (iters + split - 1) / split, trips = (warp_stages + stages - 1) / stages;
    const double busiest = static_cast<double>((blocks + sms - 1) / sms * tpb * iters);
    const double even = static_cast<double>(tiles * iters) / static_cast<double>(sms);
    const double cost = static_cast<double>(waves) * (static_cast<double>(trips) * kTripUs + kWaveUs) +
                        std::max(even, 0.5 * busiest) * kStageUs;
    if (split == 1 || cost < best_cost) {
      best = split;
      best_cost = cost;
    }
  }
  return best;
}

template <int kBits, typename SBT, bool kGlu, int kW, int kS, bool kLean>
cudaError_t launch_ring(cudaStream_t stream, const QMmaArgs& a) {
  auto kernel = gemv_qmma_ring_kernel<kBits, SBT, kGlu, kW, kS, kLean>;
  constexpr size_t tiles_bytes = ring_tile_bytes(kBits, kW, kS);
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), ring_x_budget(kBits, kW, kS) + 16 + tiles_bytes,
                     "linear_q (ring tensor-core GEMV)");
  static const bool carveout = [&] {  // as many blocks as shared memory allows (a preference; first device)
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared) == cudaSuccess;
  }();
  (void)carveout;
  const size_t smem = (smem_bytes(a) + 15) / 16 * 16 + tiles_bytes;
  // Residency for the plan from one row of x (the plan must not depend on m; more rows only lower it).
  QMmaArgs one = a;
  one.m = 1;
  const size_t smem_one = (smem_bytes(one) + 15) / 16 * 16 + tiles_bytes;
  int bps = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, kW * 32, smem_one) != cudaSuccess) bps = 1;
  bps = std::max(bps, 1);
  const int64_t tiles = total_tiles(a), iters = a.k / (64 * kTileGroups);
  const int forced = g_split.load();
  const int split = forced == 1 || forced == 2 || forced == 4 || forced == 8
                        ? std::min(forced, kW)  // slices past the last stage add zeros
                        : ring_split(tiles, iters, sm_count(), bps, kW, kS, kBits);
  const int64_t tpb = kW / split;
  const unsigned blocks = static_cast<unsigned>((tiles + tpb - 1) / tpb);
  return launch_pdl(kernel, dim3(blocks), dim3(kW * 32), smem, stream, a, split);
}

template <int kBits, typename SBT, bool kGlu, int kPlan>
cudaError_t launch_ring_as(cudaStream_t stream, const QMmaArgs& a) {
  constexpr PlanShape ps = kBits == 8 ? kPlanShape8[kPlan] : kPlanShape[kPlan];
  // The lean stage math at 8 bits and at 4 bits on plan 4 (the other 4-bit ring plans keep the per-group path).
  if constexpr (kBits == 8 || kPlan == 4) {
    if (qmma_lean()) return launch_ring<kBits, SBT, kGlu, ps.warps, ps.stages, true>(stream, a);
  }
  return launch_ring<kBits, SBT, kGlu, ps.warps, ps.stages, false>(stream, a);
}

template <int kBits, typename SBT, bool kGlu>
cudaError_t launch_ring_plan(cudaStream_t stream, const QMmaArgs& a, int plan) {
  switch (plan) {
    case 1: return launch_ring_as<kBits, SBT, kGlu, 1>(stream, a);
    case 2: return launch_ring_as<kBits, SBT, kGlu, 2>(stream, a);
    case 3: return launch_ring_as<kBits, SBT, kGlu, 3>(stream, a);
    default: return launch_ring_as<kBits, SBT, kGlu, 4>(stream, a);
  }
}

// A tile-fitting launch on the ring plan in force (plan != 0) for kBits.
template <int kBits>
cudaError_t launch_ring_any(cudaStream_t stream, const QMmaArgs& a, int plan) {
  if (a.part[0].w.sb_dtype == DType::kF16)
    return a.glu ? launch_ring_plan<kBits, Half, true>(stream, a, plan)
                 : launch_ring_plan<kBits, Half, false>(stream, a, plan);
  return a.glu ? launch_ring_plan<kBits, Bf16, true>(stream, a, plan)
               : launch_ring_plan<kBits, Bf16, false>(stream, a, plan);
}

template <typename SBT, bool kGlu, bool kLean>
cudaError_t launch_tiles_as(cudaStream_t stream, const QMmaArgs& a) {
  auto kernel = gemv_qmma_tile_kernel<SBT, kGlu, kLean>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax + kTileBytes + 16, "linear_q (tiled tensor-core GEMV)");
  static const int by_regs = occupancy(kernel, kThreads);
  const size_t smem = (smem_bytes(a) + 15) / 16 * 16 + kTileBytes;
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * by_regs;
  const SplitGrid sg = split_grid(total_tiles(a), a.k / (64 * kTileGroups), resident);
  return launch_pdl(kernel, dim3(sg.blocks), dim3(kThreads), smem, stream, a, sg.split);
}

template <typename SBT, bool kGlu>
cudaError_t launch_tiles(cudaStream_t stream, const QMmaArgs& a) {
  return qmma_lean() ? launch_tiles_as<SBT, kGlu, true>(stream, a) : launch_tiles_as<SBT, kGlu, false>(stream, a);
}

template <int kBits, int kGroup>
cudaError_t launch_group(cudaStream_t stream, const QMmaArgs& a) {
  if constexpr (kBits == 4 && kGroup == 64) {
    if (tiles_fit(a) && smem_fits(a)) {
      if (const int plan = qmma_plan_for(a); plan != 0) return launch_ring_any<4>(stream, a, plan);
      if (a.part[0].w.sb_dtype == DType::kF16) return a.glu ? launch_tiles<Half, true>(stream, a) : launch_tiles<Half, false>(stream, a);
      return a.glu ? launch_tiles<Bf16, true>(stream, a) : launch_tiles<Bf16, false>(stream, a);
    }
  }
  if constexpr (kBits == 8 && kGroup == 64) {
    if (qmma_plan8() != 0 && tiles_fit(a) && smem_fits(a)) return launch_ring_any<8>(stream, a, qmma_plan8());
  }
  if (smem_fits(a))
    return a.part[0].w.sb_dtype == DType::kF16 ? launch_smem_x<kBits, kGroup, Half>(stream, a)
                                               : launch_smem_x<kBits, kGroup, Bf16>(stream, a);
  cudaError_t e = cudaSuccess;
  with_float_type(a.part[0].w.sb_dtype, [&](auto st) {
    using SBT = typename decltype(st)::type;
    e = a.glu ? launch<kBits, kGroup, SBT, true>(stream, a) : launch<kBits, kGroup, SBT, false>(stream, a);
  });
  return e;
}

template <int kBits>
cudaError_t launch_bits(cudaStream_t stream, const QMmaArgs& a) {
  if (a.group_size == 32) return launch_group<kBits, 32>(stream, a);
  if (a.group_size == 64) return launch_group<kBits, 64>(stream, a);
  return launch_group<kBits, 128>(stream, a);
}

}  // namespace

bool qmma_fits(const QMmaArgs& a) {
  if ((a.bits != 4 && a.bits != 8) || (a.group_size != 32 && a.group_size != 64 && a.group_size != 128))
    return false;
  if (a.m < 1 || a.m > kGemvMaxM || a.k <= 0 || a.k % a.group_size != 0) return false;
  if (a.n_parts < 1 || a.n_parts > kQMmaMaxParts || (a.glu && a.n_parts != 2)) return false;
  // bf16 x: either kernel; f32 x (hi + lo bf16 parts): the shared-memory kernel, plain launches.
  const bool bf16_x = a.x_dtype == DType::kBF16 && aligned16(a.x, a.x_stride * 2);
  const bool f32_x = a.x_dtype == DType::kF32 && aligned16(a.x, a.x_stride * 4) && !a.glu && smem_fits(a);
  if (!bf16_x && !f32_x) return false;
  for (int p = 0; p < a.n_parts; ++p) {
    const QuantView& w = a.part[p].w;
    if (w.rows < 1 || w.cols != a.k || w.sb_dtype != a.part[0].w.sb_dtype) return false;
    if (w.group_shift != (a.group_size == 128 ? 2 : a.group_size == 64 ? 1 : 0)) return false;
    if (!aligned16(w.packed, w.packed_stride * 4)) return false;
  }
  return !a.glu || a.part[0].w.rows == a.part[1].w.rows;
}

void gemv_qmma(cudaStream_t stream, const QMmaArgs& a) {
  auto one = [&](const QMmaArgs& q) {
    const cudaError_t e = q.bits == 4 ? launch_bits<4>(stream, q) : launch_bits<8>(stream, q);
    check_cuda(e, "linear_q (tensor-core GEMV)", [&] {
      return strfmt("m %lld k %lld bits %d group %d parts %d glu %d", (long long)q.m, (long long)q.k, q.bits,
                    q.group_size, q.n_parts, (int)q.glu);
    });
  };
  const int64_t rows = smem_fits(a) ? smem_rows(a) : a.m;
  if (rows >= a.m) return one(a);
  const size_t xs = dtype_size(a.x_dtype), os = dtype_size(a.out_dtype);
  for (int64_t i0 = 0; i0 < a.m; i0 += rows) {  // x too large for one launch's shared memory
    QMmaArgs q = a;
    q.m = std::min(rows, a.m - i0);
    q.x = static_cast<const char*>(a.x) + i0 * a.x_stride * xs;
    for (int p = 0; p < a.n_parts; ++p)
      q.part[p].out = static_cast<char*>(a.part[p].out) + i0 * a.part[p].out_stride * os;
    one(q);
  }
}

void set_qmma_split(int split) {
  g_split.store(split);
}

void set_linear_q_tiles_for_testing(int mode) {
  g_tiles.store(mode);
}

int qmma_plan() {
  const int forced = g_plan.load();
  if (forced >= 0 && forced < kQMmaPlans) return forced;
  static const int env = [] {
    const char* e = std::getenv("BUNSEN_QMMA_PLAN");
    const int v = e != nullptr && *e != '\0' ? std::atoi(e) : -1;
    return v >= 0 && v < kQMmaPlans ? v : -1;
  }();
  return env;
}

void set_qmma_plan_for_testing(int plan) {
  g_plan.store(plan);
}

int qmma_plan8() {
  const int forced = g_plan8.load();
  if (forced >= 0 && forced < kQMmaPlans) return forced;
  static const int env = [] {
    const char* e = std::getenv("BUNSEN_QMMA_PLAN8");
    const int v = e != nullptr && *e != '\0' ? std::atoi(e) : 0;
    return v >= 0 && v < kQMmaPlans ? v : 0;
  }();
  return env;
}

void set_qmma_plan8_for_testing(int plan) {
  g_plan8.store(plan);
}

bool qmma_lean() {
  const int forced = g_lean.load();
  if (forced >= 0) return forced != 0;
  static const bool env = [] {
    const char* e = std::getenv("BUNSEN_QMMA_LEAN");
    return e == nullptr || e[0] != '0';
  }();
  return env;
}

void set_qmma_lean_for_testing(int mode) {
  g_lean.store(mode);
}

const char* qmma_plan8_name(int plan) {
  static const char* const names[kQMmaPlans] = {"w8-regs", "w8s2-ring", "w4s2-ring", "w4s3-ring", "w2s4-ring"};
  return plan >= 0 && plan < kQMmaPlans ? names[plan] : "?";
}

const char* qmma_plan_name(int plan) {
  static const char* const names[kQMmaPlans] = {"w8s2-tile", "w8s4-ring", "w4s4-ring", "w4s3-ring", "w8s2-ring"};
  return plan >= 0 && plan < kQMmaPlans ? names[plan] : "?";
}

}  // namespace bunsen::kernels::cuda
