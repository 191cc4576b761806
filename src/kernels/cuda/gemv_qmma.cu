// The tensor-core quantized GEMV (gemv_qmma.cuh): MLX affine 4/8-bit weights times <= 8 bf16 rows of x.
// A warp owns a tile of 16 weight rows (gated launches: 8 gate rows and the same 8 up rows) and a slice of
// k; each lane streams its quarter of every scale group of 2 rows with non-allocating vector loads (two
// pipeline stages of up to 8 words per row in flight, the first issued before the programmatic-dependent-
// launch wait), turns the codes into exact bf16 integers (magic-exponent OR + one bf16x2 FMA for 4 bits,
// byte-permute + f32 subtract + pack for 8 bits) and feeds mma.m16n8k16 (rows x tokens, f32 accumulate),
// x being the B operand read straight from global memory (L1/L2 resident) in the matching order. A second
// mma with an all-ones A gives the per-group sums of x, so per group and row: acc += scale * sum(q * x) +
// bias * sum(x). Warps splitting k meet in shared memory; bias, SiLU gating and the output conversion are
// fused into the store.
// Not a general GEMM (m > 8 goes to dequant_q.cu) and not for 2/3/5/6 bits (gemv_q.cu).
// Invariants: every output element is written by exactly one lane; the k split, the lane's k order and
// the summation order depend on (rows, k, bits, group) only.
#include <atomic>

#include "kernels/cuda/gemv_qmma.cuh"
#include "kernels/cuda/linear.cuh"
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

// The 4-bit codes at bits [0, 4) and [16, 20) of v as a bf16x2 pair of exact integers: OR'ed under the
// exponent of 128 they read 128 + q (ulp 1); one bf16x2 FMA (x * 1 - 128) leaves q exactly.
__device__ __forceinline__ uint32_t pair4(uint32_t v) {
  const uint32_t biased = (v & 0x000F000Fu) | 0x43004300u;
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
template <int kBits, int kGroup, typename SBT>
struct Stage {
  using G = Geom<kBits, kGroup>;
  uint32_t w[G::kU][2][G::kWpg];
  typename SbRaw<SBT>::type s[G::kU][2], b[G::kU][2];
};

// Issues the loads of iteration `it` (groups it * kU ..), skipping groups past ng (warp-uniform).
template <int kBits, int kGroup, typename SBT>
__device__ __forceinline__ void load_stage(Stage<kBits, kGroup, SBT>& st, const LaneRows<SBT>& lr, int it, int ng) {
  using G = Geom<kBits, kGroup>;
#pragma unroll
  for (int u = 0; u < G::kU; ++u) {
    const int grp = it * G::kU + u;
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
// silu(gate) * up) and stores the valid outputs.
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
      store_any(pg.out, a.out_dtype, i * pg.out_stride + row, gate / (1.0f + expf(-gate)) * up);  // silu_mul's formula
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
  float v[4] = {acc[0], acc[1], acc[2], acc[3]};
  if (split > 1) {  // uniform over the block
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
  if (active) store_tile<kGlu>(a, part, n0, g, t, v);
}


int64_t total_tiles(const QMmaArgs& a) {
  if (a.glu) return (a.part[0].w.rows + kTileRows / 2 - 1) / (kTileRows / 2);
  int64_t tiles = 0;
  for (int p = 0; p < a.n_parts; ++p) tiles += (a.part[p].w.rows + kTileRows - 1) / kTileRows;
  return tiles;
}


template <int kBits, int kGroup, typename SBT, bool kGlu>
cudaError_t launch(cudaStream_t stream, const QMmaArgs& a) {
  using G = Geom<kBits, kGroup>;
  static const int blocks_per_sm = occupancy(gemv_qmma_kernel<kBits, kGroup, SBT, kGlu>, kThreads);
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * blocks_per_sm;
  const int64_t ng = a.k / kGroup, iters = (ng + G::kU - 1) / G::kU, tiles = total_tiles(a);
  const int forced = g_split.load();
  const int split = forced == 1 || forced == 2 || forced == 4 || forced == 8 ? forced
                                                                             : choose_split(tiles, iters, resident, kWarps);
  const int64_t tiles_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block);
  return launch_pdl(gemv_qmma_kernel<kBits, kGroup, SBT, kGlu>, dim3(blocks), dim3(kThreads), 0, stream, a, split);
}

template <int kBits, int kGroup>
cudaError_t launch_group(cudaStream_t stream, const QMmaArgs& a) {
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
  if (a.x_dtype != DType::kBF16 || a.m < 1 || a.m > kGemvMaxM || a.k <= 0 || a.k % a.group_size != 0) return false;
  if (a.n_parts < 1 || a.n_parts > kQMmaMaxParts || (a.glu && a.n_parts != 2)) return false;
  if (!aligned16(a.x, a.x_stride * 2)) return false;
  for (int p = 0; p < a.n_parts; ++p) {
    const QuantView& w = a.part[p].w;
    if (w.rows < 1 || w.cols != a.k || w.sb_dtype != a.part[0].w.sb_dtype) return false;
    if (w.group_shift != (a.group_size == 128 ? 2 : a.group_size == 64 ? 1 : 0)) return false;
    if (!aligned16(w.packed, w.packed_stride * 4)) return false;
  }
  return !a.glu || a.part[0].w.rows == a.part[1].w.rows;
}

void gemv_qmma(cudaStream_t stream, const QMmaArgs& a) {
  const cudaError_t e = a.bits == 4 ? launch_bits<4>(stream, a) : launch_bits<8>(stream, a);
  check_cuda(e, "linear_q (tensor-core GEMV)", [&] {
    return strfmt("m %lld k %lld bits %d group %d parts %d glu %d", (long long)a.m, (long long)a.k, a.bits,
                  a.group_size, a.n_parts, (int)a.glu);
  });
}

void set_qmma_split(int split) {
  g_split.store(split);
}

}  // namespace bunsen::kernels::cuda
