// The ring kernel of the tensor-core quantized GEMV (gemv_qmma.cu describes the family): the tiled kernel with
// W warps per block and an S-stage cp.async ring per warp whose first S stages are issued before the PDL wait,
// its launch plans (qmma_plan.h: BUNSEN_QMMA_PLAN 1..4 at 4 bits, BUNSEN_QMMA_PLAN8 1..4 at 8 bits; none is
// a default: the H200 measured the tile kernel (4 bits) and the register kernel (8 bits) faster) and its
// k-split model. Invariants: as gemv_qmma.cu's (the split depends on rows, k, bits and the GPU, never on m).
#include <algorithm>

#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda::qmma {
namespace {

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
  const WarpTile me = warp_tile<kGlu, kW>(a, split);
  const int lane = me.lane, warp = me.warp, g = me.g, t = me.t, slice = me.slice, part = me.part;
  const int64_t n0 = me.n0;
  const bool active = me.active;
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

// ---- launches ----
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


PlanShape shape_of(int bits, int plan) {
  return bits == 8 ? kPlanShape8[plan] : kPlanShape[plan];
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
  const int forced = forced_split();
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

}  // namespace

cudaError_t launch_ring_kernel(cudaStream_t stream, const QMmaArgs& a, int plan) {
  return a.bits == 8 ? launch_ring_any<8>(stream, a, plan) : launch_ring_any<4>(stream, a, plan);
}

size_t ring_plan_x_budget(int bits, int plan) {
  const PlanShape ps = shape_of(bits, plan);
  return ring_x_budget(bits, ps.warps, ps.stages);
}

}  // namespace bunsen::kernels::cuda::qmma
