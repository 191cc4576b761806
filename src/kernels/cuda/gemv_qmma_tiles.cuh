// Device pieces of the tensor-core quantized GEMV shared by gemv_qmma.cu (the register, shared-memory and
// tiled kernels, the launch choice) and gemv_qmma_ring.cu (the ring kernel and its plans): launch geometry,
// code unpacking and MMA, shared x and its group sums, the per-group and the lean stage math, the 16-row
// weight tiles, the store and k-split reduction; and the host interface between the two files. Internal
// (namespace qmma); the kernels and their invariants are described in gemv_qmma.cu.
#pragma once
#include <algorithm>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/gemv_qmma.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::qmma {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 16;            // mma M: weight rows per warp tile
constexpr uint32_t kOnes = 0x3F803F80u;  // bf16x2 (1, 1)


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
  uint64_t pol;  // the codes' L2 policy (l2_hint.cuh)
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

// A warp's place in a launch of kW-warp blocks whose row tiles take `split` warps each: its lane
// (g, t) of the MMA fragments, its slice of the k split, and its row tile (locate; active false: past the
// last tile). The ring and f16 kernels use it; gemv_qmma.cu's kernels spell it out, as with this helper
// ptxas schedules 40 of their instances differently (the same math, but binaries the H200 has not timed).
struct WarpTile {
  int lane, warp, g, t, slice, part;
  int64_t n0;
  bool active;
};

template <bool kGlu, int kW>
__device__ __forceinline__ WarpTile warp_tile(const QMmaArgs& a, int split) {
  WarpTile w;
  w.lane = static_cast<int>(threadIdx.x & 31);
  w.warp = static_cast<int>(threadIdx.x >> 5);
  w.g = w.lane >> 2;
  w.t = w.lane & 3;
  w.slice = w.warp % split;
  w.part = 0;
  w.n0 = 0;
  w.active = locate<kGlu>(a, blockIdx.x * static_cast<int64_t>(kW / split) + w.warp / split, w.part, w.n0);
  return w;
}

// Row pointers of lane (g, t) (codes already offset to the lane's words of group 0); a row past its part
// re-reads the part's last row (its sums are never stored).
template <bool kGlu, typename SBT>
__device__ __forceinline__ LaneRows<SBT> lane_rows(const QMmaArgs& a, int part, int64_t n0, int g, int lane_words) {
  LaneRows<SBT> lr;
  lr.pol = weight_l2_policy(a.l2_evict_first);
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

// load_chunk (quant_common.cuh) with L2 policy pol on its 16-byte loads.
template <int kBits>
__device__ __forceinline__ void load_chunk(const uint32_t* p, uint32_t (&w)[kBits], uint64_t pol) {
  if constexpr (kBits % 4 == 0) {
    load_chunk16(p, w, [pol](const uint32_t* q) { return ldg_weights16(q, pol); });
  } else {
    cuda::load_chunk<kBits>(p, w);
  }
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
      load_chunk<G::kWpg>(lr.w[r] + grp * G::kGroupWords, st.w[u][r], lr.pol);
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
__device__ __forceinline__ void finish_tile(const QMmaArgs& a, float4 (*partial)[32], const float (&acc)[4],
                                            int split, int slice, int warp, int lane, bool active, int part,
                                            int64_t n0) {
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

inline size_t smem_bytes(const QMmaArgs& a) {
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

// c += A · B for one m16n8k16 f16 tile (A rows = weight rows, B columns = tokens), f32 accumulate.
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Bytes kB and kB + 1 of w (8-bit codes) as the f16x2 pair (1024 + q0, 1024 + q1): each byte under the
// high byte 0x64 (f16's exponent of 1024). One PRMT.
template <int kB>
__device__ __forceinline__ uint32_t codes_1024(uint32_t w) {
  return __byte_perm(w, 0x64u, kB == 0 ? 0x4140 : 0x4342);
}

// The f16 form of 8-bit codes (gemv_qmma_h8.cu, decode_mega.cu): x staged as f16 scaled per group by 2^s.
// The shift s of a group whose largest finite |x| is mx: mx 2^s lies in [2^14, 2^15), s clamped to
// [-113, 126] (2^s and 2^-s stay normal floats); 0 for a group of zeros, infinities or NaNs (those convert
// to themselves).
__device__ __forceinline__ int group_shift(float mx) {
  if (!(mx > 0.0f)) return 0;
  int e = 0;
  frexpf(mx, &e);  // mx = f 2^e, f in [0.5, 1)
  return min(max(15 - e, -113), 126);
}

__device__ __forceinline__ float pow2(int s) {  // s in [-126, 127]
  return __uint_as_float(static_cast<uint32_t>(127 + s) << 23);
}

__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 8 bf16 activations (u) as floats, with their group's sum and largest finite |x| over the kLanes consecutive
// lanes holding the group (a fixed xor tree: every lane of the group gets the same values).
template <int kLanes>
__device__ __forceinline__ void bf16x8_group_stats(uint4 u, float (&f)[8], float& sum, float& mx) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
  sum = 0.0f;
  mx = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sum += f[e];
    mx = fmaxf(mx, isfinite(f[e]) ? fabsf(f[e]) : 0.0f);
  }
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
}

// 8 activations times up (a power of two) as 4 f16x2 words.
__device__ __forceinline__ uint4 half8_scaled(const float (&f)[8], float up) {
  return make_uint4(half2_bits(f[0] * up, f[1] * up), half2_bits(f[2] * up, f[3] * up),
                    half2_bits(f[4] * up, f[5] * up), half2_bits(f[6] * up, f[7] * up));
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
// threads (a multiple of 32). kBatch: the loads each thread issues before it uses any. x is read after the
// PDL wait, so every dependent round trip here delays the launch's first MMA: kBatch 1 (every kernel but the
// tile kernel's BUNSEN_QMMA_XBATCH instances) takes k / 8 / kNThreads trips for a row, 7 at the 8B's
// k = 14,336; 8 take one up to k = 16,384. The values, sums and stores are the same for any kBatch.
template <int kBits, int kGroup, typename XT, int kNThreads = kThreads, int kBatch = 1>
__device__ __forceinline__ void stage_x(const QMmaArgs& a, uint4* xs, float* gsum) {
  constexpr int kG8 = kGroup / 8;  // chunks per group: consecutive threads, one warp
  const int k8 = static_cast<int>(a.k / 8), row_chunks = k8 * x_words(kBits) + 1, ng = static_cast<int>(a.k / kGroup);
  const int total = static_cast<int>(a.m) * k8;
  uint4* xs_lo = xs + a.m * row_chunks;
  if constexpr (kBatch == 1) {  // spelled out: the kernels measured with it keep their binaries
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
  } else {
    for (int base = 0; base < total; base += kBatch * kNThreads) {
      uint4 hi[kBatch], lo[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int c = base + b * kNThreads + static_cast<int>(threadIdx.x);
        const bool ok = c < total;
        const int r = ok ? c / k8 : 0, col = ok ? c - r * k8 : 0;
        hi[b] = make_uint4(0, 0, 0, 0);
        lo[b] = make_uint4(0, 0, 0, 0);
        if (ok) load_x8_bf16(static_cast<const XT*>(a.x) + r * a.x_stride + col * 8, hi[b], lo[b]);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (base + b * kNThreads >= total) break;  // uniform over the block: whole warps shuffle below
        const int c = base + b * kNThreads + static_cast<int>(threadIdx.x);
        const bool ok = c < total;
        const int r = ok ? c / k8 : 0, col = ok ? c - r * k8 : 0;
        float s = bf16x8_sum(hi[b]);
        if constexpr (sizeof(XT) == 4) s += bf16x8_sum(lo[b]);
#pragma unroll
        for (int o = 1; o < kG8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (ok) {
          store_x<kBits>(xs + r * row_chunks, col, hi[b]);
          if constexpr (sizeof(XT) == 4) store_x<kBits>(xs_lo + r * row_chunks, col, lo[b]);
          if ((threadIdx.x & (kG8 - 1)) == 0) gsum[r * ng + col / kG8] = s;
        }
      }
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
// 8B gate/up, Nsight Compute: 109 warp instructions per 16-row group on the per-group path, ~90 with this one;
// the one-LOP3 unpacking (nibbles_under_128) takes 16 more per group out.
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


inline int64_t total_tiles(const QMmaArgs& a) {
  if (a.glu) return (a.part[0].w.rows + kTileRows / 2 - 1) / (kTileRows / 2);
  int64_t tiles = 0;
  for (int p = 0; p < a.n_parts; ++p) tiles += (a.part[p].w.rows + kTileRows - 1) / kTileRows;
  return tiles;
}

// ---- between gemv_qmma.cu and gemv_qmma_ring.cu ----
// gemv_qmma.cu: the k split set_qmma_split forces (1, 2, 4 or 8), else 0.
int forced_split();
// gemv_qmma_ring.cu: launch a (tiles_fit, smem_fits) on ring plan `plan` (1..4) of its bit width.
cudaError_t launch_ring_kernel(cudaStream_t stream, const QMmaArgs& a, int plan);
// gemv_qmma_ring.cu: the shared x (+ group sums) budget of one block of ring plan `plan` (1..4).
size_t ring_plan_x_budget(int bits, int plan);
// gemv_qmma_h8.cu: whether launch a takes the f16 8-bit kernel under 8-bit plan `plan` (is_h8_plan8, bf16
// x, bf16/f16 scales, one row of x fits), the rows of x one of its launches takes, and the launch.
bool h8_fits(const QMmaArgs& a, int plan);
int64_t h8_rows(const QMmaArgs& a);
cudaError_t launch_h8_kernel(cudaStream_t stream, const QMmaArgs& a, int plan);
// gemv_qmma_h8.cu: launch a (h8_fits under plan 5, group 64, one launch's rows, m <= 2, k % 256 == 0, k <=
// kGemvNormMaxK) on the register kernel with x from n's plain norm prologue.
cudaError_t launch_h8_norm_kernel(cudaStream_t stream, const QMmaArgs& a, const GemvNorm& n);

}  // namespace bunsen::kernels::cuda::qmma
