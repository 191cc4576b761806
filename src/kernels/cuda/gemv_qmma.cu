// The tensor-core quantized GEMV (gemv_qmma.cuh): MLX affine 4/8-bit weights times <= 8 rows of x.
// A warp owns a tile of 16 weight rows (gated launches: 8 gate rows and the same 8 up rows) and a slice of
// k; each lane streams its quarter of every scale group of 2 rows with non-allocating vector loads (two
// pipeline stages in flight, the first issued before the programmatic-dependent-launch wait), turns the
// codes into exact bf16 integers and feeds mma.m16n8k16 (rows x tokens, f32 accumulate); per group and row
// acc += scale * sum(q * x) + bias * sum(x). Warps splitting k meet in shared memory; bias, SiLU (or
// tanh-GELU) gating and the output conversion are fused into the store. Five kernels:
// - gemv_qmma_tile_kernel (every 4-bit launch at group 64 with bf16 x and k % 512 == 0): as the next one, but
//   each warp's weights arrive as 16-row x 256-byte tiles copied with cp.async into its shared memory (long
//   contiguous row reads instead of 32 bytes of 8 rows per load; scales and biases in the same copies), and
//   a staged tile is consumed by the lean stage math (compute_tile, BUNSEN_QMMA_LEAN). Its norm variant
//   (gemv_qmma_tile_norm_kernel, opt-in BUNSEN_QMMA_NORM) computes x from a residual add + RMSNorm first.
// - gemv_qmma_smem_kernel (other 4-bit launches): the block first copies x into shared memory in the
//   order the MMAs read it (f32 x as bf16 hi + lo parts, two MMAs each) with each group's sum(x); 4-bit
//   codes enter as 128 + q (one mask-and-or per pair; bias' = bias - 128 scale), 8-bit codes as two such
//   nibbles against x and 16 x. About half the instructions per weight byte of the other kernel, and no x
//   traffic in the loop. x rows that do not fit one block's shared memory run as several launches.
// - gemv_qmma_kernel (8 bits, BUNSEN_QMMA=0, or f32 scales): x read from global memory, sum(x) from an
//   all-ones MMA, exact codes (a bf16 FMA per 4-bit pair, f32 conversion for 8 bits).
// - gemv_qmma_ring_kernel (gemv_qmma_ring.cu; BUNSEN_QMMA_PLAN 1..4 at 4 bits, BUNSEN_QMMA_PLAN8 1..4 at
//   8 bits; group 64, bf16 x, k % 512 == 0; qmma_plan.h): the tile kernel with W warps per block and an
//   S-stage cp.async ring per warp whose first S stages are issued before the PDL wait, split from the real
//   residency (smem-limited blocks per SM).
// - gemv_qmma_h8_kernel (gemv_qmma_h8.cu; BUNSEN_QMMA_PLAN8 5 and 6, any group, bf16 x): 8-bit codes as f16
//   1024 + q (one PRMT per pair) against x staged as f16 scaled by a power of two per (token, group).
// The device pieces the kernels share (tiles, stage math, x staging, epilogue) are in gemv_qmma_tiles.cuh.
// Not a general GEMM (m > 8 goes to dequant_q.cu) and not for 2/3/5/6 bits (gemv_q.cu).
// Invariants: every output element is written by exactly one lane; the k split, the lane's k order and
// the summation order depend on (rows, k, bits, group) only, so a token's bits do not depend on m.
#include <algorithm>
#include <atomic>

#include "core/env.h"
#include "kernels/cuda/gemv_norm.cuh"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda {
namespace {

using namespace qmma;  // the shared device pieces (gemv_qmma_tiles.cuh)

std::atomic<int> g_split{0};

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

// The norm prologue's x (gemv_norm.cuh, linear.cuh's GemvNorm): the values add_rms_norm would round to bf16,
// staged as stage_x stages a bf16 x (the same chunks per thread, the same group sums): so the launch's bits
// are those of add_rms_norm followed by the plain launch. Needs k % 512 == 0 (whole warps per chunk run, one
// group per 8 lanes) and k <= kGemvNormMaxK; the norm weights at wsm.
__device__ __forceinline__ void stage_norm_x(const GemvNorm& nm, const QMmaArgs& a, uint4* xs, float* gsum,
                                             const char* wsm) {
  const int row_chunks = static_cast<int>(a.k / 8) + 1, ng = static_cast<int>(a.k / 64);
  gemv_norm::prologue_with<kThreads, kGemvNormMaxM>(nm, a.m, a.k, wsm,
                                                    [&](int i, int64_t j, const float(&v)[8]) {
                                                      uint4 hi;
                                                      Bf16* h = reinterpret_cast<Bf16*>(&hi);
#pragma unroll
                                                      for (int e = 0; e < 8; ++e) h[e] = from_f32<Bf16>(v[e]);
                                                      float s = bf16x8_sum(hi);
#pragma unroll
                                                      for (int o = 1; o < 8; o <<= 1)
                                                        s += __shfl_xor_sync(0xffffffffu, s, o);
                                                      const int col = static_cast<int>(j / 8);
                                                      store_x<4>(xs + i * row_chunks, col, hi);
                                                      if ((threadIdx.x & 7) == 0) gsum[i * ng + col / 8] = s;
                                                    });
}

// The tiled kernel (the tiles, copies and stage math: gemv_qmma_tiles.cuh). kXBatch: x staging loads in
// flight per thread (stage_x; BUNSEN_QMMA_XBATCH). kNorm: x computed by nm's prologue (stage_norm_x; the
// norm weights copied before the PDL wait into the shared memory after the tiles).
template <typename SBT, bool kGlu, bool kLean, int kXBatch, bool kNorm>
__device__ __forceinline__ void tile_body(const QMmaArgs& a, int split, const GemvNorm* nm) {
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
    src[i] =
        reinterpret_cast<const unsigned char*>(w.packed + tile_row<kGlu>(a, part, n0, r) * w.packed_stride) +
        (lane & 15) * 16;
  }
  const unsigned short* sb_src;
  {
    const int r = lane & 15;
    const QuantView& w = tile_view(a, part, r, kGlu);
    sb_src = static_cast<const unsigned short*>(lane < 16 ? w.scales : w.biases) +
             tile_row<kGlu>(a, part, n0, r) * w.sb_stride;
  }
  const uint64_t pol = weight_l2_policy(a.l2_evict_first);
  auto issue = [&](int st, WTile& wt) {  // every stage is whole: tiles_fit wants k % 512 == 0
    const int grp0 = st * kTileGroups;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      cp_async_weights16(&wt.codes[2 * i + (lane >> 4)][(lane & 15) * 16],
                         src[i] + static_cast<int64_t>(grp0) * 32, pol);
    cp_async_weights16(lane < 16 ? wt.sc[lane & 15] : wt.bi[lane & 15], sb_src + grp0, pol);
    cp_async_commit_group();
  };
  char* wsm = reinterpret_cast<char*>(tiles + (kWarps - warp) * kTileStages);  // after every warp's tiles
  if constexpr (kNorm) gemv_norm::prefetch_w_to<kThreads>(*nm, a.k, wsm);  // an older group than the tiles'
  if (active && slice < n_st) issue(slice, tiles[0]);  // weights depend on no earlier kernel
  pdl_wait();
  float* gsum = reinterpret_cast<float*>(xs + a.m * row_chunks);
  if constexpr (kNorm) {
    if (active && slice < n_st)
      cp_async_wait_group<1>();  // the norm weights (the tile copy may still fly)
    else
      cp_async_wait_group<0>();
    stage_norm_x(*nm, a, xs, gsum, wsm);
  } else {
    stage_x<4, 64, Bf16, kThreads, kXBatch>(a, xs, gsum);
  }
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

template <typename SBT, bool kGlu, bool kLean, int kXBatch>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_qmma_tile_kernel(const __grid_constant__ QMmaArgs a, int split) {
  tile_body<SBT, kGlu, kLean, kXBatch, false>(a, split, nullptr);
}

// gemv_qmma_tile_kernel with the norm prologue (lean stage math, one-at-a-time staging: the defaults).
template <typename SBT, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_qmma_tile_norm_kernel(const __grid_constant__ QMmaArgs a, int split,
                               const __grid_constant__ GemvNorm nm) {
  tile_body<SBT, kGlu, true, 1, true>(a, split, &nm);
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
  static const int v = env_int("BUNSEN_QMMA", -1);
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
  const bool ring8 = a.bits == 8 && a.group_size == 64 && is_ring_plan8(qmma_plan8()) && tiles_fit(a);
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
  static const bool env = env_flag("BUNSEN_QMMA_TILES", true);
  return env;
}

bool tiles_fit(const QMmaArgs& a) {
  const bool bits_ok =
      a.bits == 4 || (a.bits == 8 && is_ring_plan8(qmma_plan8()));  // 8 bits: the ring kernel only
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
std::atomic<int> g_plan{-1}, g_plan8{-1}, g_lean{-1}, g_xbatch{-1};

// The plan of launch a: at 8 bits qmma_plan8(); at 4 bits the hook's or BUNSEN_QMMA_PLAN's when set, else plan 0
// (the tile kernel) for every launch kind, never by m. H200, QMmaPlanBench.Shapes in a graph, m 1, both with
// the lean stage math (compute_tile), plan 0 vs 4 (ring, 8 warps x 2 stages): 8B q/k/v 7.18 vs 7.97 us, o 6.15
// vs 6.93, gate/up 20.82 vs 21.95, down 13.79 vs 15.82, lm_head 80.1 vs 83.5; whole 8B 4-bit model 346.6 / 339.6
// tok/s vs 335.2 / 333.5 with plan 4 for q/k/v and gate/up (before the lean math the ring had won those two).
int plan_of(const QMmaArgs& a) {
  return a.bits == 8 ? qmma_plan8() : std::max(qmma_plan(), 0);
}

// Shared x budget of a launch: the ring plans' when the launch takes the ring kernel, else kSmemMax.
// Depends on the launch's shapes and the plan, never on m.
size_t x_budget(const QMmaArgs& a) {
  const int plan = plan_of(a);
  if (plan == 0 || !tiles_fit(a)) return kSmemMax;
  return ring_plan_x_budget(a.bits, plan);
}

// The tile kernel's k split and grid, from the kXBatch 1 instance's residency: the staging variant and the
// norm prologue never change a token's bits.
template <typename SBT, bool kGlu, bool kLean>
SplitGrid tile_split(const QMmaArgs& a) {
  static const int by_regs = occupancy(gemv_qmma_tile_kernel<SBT, kGlu, kLean, 1>, kThreads);
  const int64_t resident = static_cast<int64_t>(sm_count()) * kWarps * by_regs;
  return split_grid(total_tiles(a), a.k / (64 * kTileGroups), resident);
}

// Dynamic shared memory of a tile kernel launch: x and its group sums, then the warps' tiles.
size_t tile_smem(const QMmaArgs& a) {
  return (smem_bytes(a) + 15) / 16 * 16 + kTileBytes;
}

template <typename SBT, bool kGlu, bool kLean, int kXBatch>
cudaError_t launch_tiles_as(cudaStream_t stream, const QMmaArgs& a) {
  auto kernel = gemv_qmma_tile_kernel<SBT, kGlu, kLean, kXBatch>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax + kTileBytes + 16, "linear_q (tiled tensor-core GEMV)");
  const SplitGrid sg = tile_split<SBT, kGlu, kLean>(a);
  return launch_pdl(kernel, dim3(sg.blocks), dim3(kThreads), tile_smem(a), stream, a, sg.split);
}

template <typename SBT, bool kGlu, bool kLean>
cudaError_t launch_tiles_lean(cudaStream_t stream, const QMmaArgs& a) {
  return qmma_xbatch() > 1 ? launch_tiles_as<SBT, kGlu, kLean, 8>(stream, a)
                           : launch_tiles_as<SBT, kGlu, kLean, 1>(stream, a);
}

template <typename SBT, bool kGlu>
cudaError_t launch_tiles(cudaStream_t stream, const QMmaArgs& a) {
  return qmma_lean() ? launch_tiles_lean<SBT, kGlu, true>(stream, a)
                     : launch_tiles_lean<SBT, kGlu, false>(stream, a);
}

template <typename SBT, bool kGlu>
cudaError_t launch_tiles_norm(cudaStream_t stream, const QMmaArgs& a, const GemvNorm& n) {
  auto kernel = gemv_qmma_tile_norm_kernel<SBT, kGlu>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax + kTileBytes + 16 + kGemvNormMaxK * 4,
                     "linear_q (tiled tensor-core GEMV, norm prologue)");
  const size_t smem = tile_smem(a) + static_cast<size_t>(a.k) * (n.w_bf16 ? 2 : 4);  // + the norm weights
  const SplitGrid sg = tile_split<SBT, kGlu, true>(a);  // the plain launch's split: the same summation
  return launch_pdl(kernel, dim3(sg.blocks), dim3(kThreads), smem, stream, a, sg.split, n);
}

template <int kBits, int kGroup>
cudaError_t launch_group(cudaStream_t stream, const QMmaArgs& a) {
  if constexpr (kBits == 4 && kGroup == 64) {
    if (tiles_fit(a) && smem_fits(a)) {
      if (const int plan = plan_of(a); plan != 0) return launch_ring_kernel(stream, a, plan);
      if (a.part[0].w.sb_dtype == DType::kF16) return a.glu ? launch_tiles<Half, true>(stream, a) : launch_tiles<Half, false>(stream, a);
      return a.glu ? launch_tiles<Bf16, true>(stream, a) : launch_tiles<Bf16, false>(stream, a);
    }
  }
  if constexpr (kBits == 8) {
    if (h8_fits(a, qmma_plan8())) return launch_h8_kernel(stream, a, qmma_plan8());
  }
  if constexpr (kBits == 8 && kGroup == 64) {
    if (is_ring_plan8(qmma_plan8()) && tiles_fit(a) && smem_fits(a))
      return launch_ring_kernel(stream, a, qmma_plan8());
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

namespace {
// The launch's weight bytes (codes, scales and biases), for its L2 policy (l2_weights_evict_first).
int64_t qmma_weight_bytes(const QMmaArgs& a) {
  int64_t bytes = 0;
  for (int p = 0; p < a.n_parts && a.group_size > 0; ++p) {
    const QuantView& w = a.part[p].w;
    bytes +=
        w.rows * (a.k * a.bits / 8 + 2 * (a.k / a.group_size) * static_cast<int64_t>(dtype_size(w.sb_dtype)));
  }
  return bytes;
}
}  // namespace

void gemv_qmma(cudaStream_t stream, const QMmaArgs& args) {
  QMmaArgs a = args;
  a.l2_evict_first = l2_weights_evict_first(a.bits, qmma_weight_bytes(a));
  auto one = [&](const QMmaArgs& q) {
    const cudaError_t e = q.bits == 4 ? launch_bits<4>(stream, q) : launch_bits<8>(stream, q);
    check_cuda(e, "linear_q (tensor-core GEMV)", [&] {
      return strfmt("m %lld k %lld bits %d group %d parts %d glu %d", (long long)q.m, (long long)q.k, q.bits,
                    q.group_size, q.n_parts, (int)q.glu);
    });
  };
  const int64_t rows = h8_fits(a, qmma_plan8()) ? h8_rows(a) : smem_fits(a) ? smem_rows(a) : a.m;
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

// Whether the quantized prologue runs: the hook's mode, else BUNSEN_QMMA_NORM (unset or 0: never; 1: wherever
// it applies). Off by default: H100, gpu-session.sh qnorm, 2026-12-06, both prologues (q/k/v and gate/up)
// against add_rms_norm launches: llama3.2-1b 4-bit -3.8 %, 8-bit -2.0 %, llama3.1-8b 4-bit -3.7 %, 8-bit -2.9
// %, qwen3.5-4b 4-bit -1.3 % (gate/up's alone: 1B 4-bit +1.1 %, 8B 4-bit -0.6 %). Every block re-reads x_in
// and y after the PDL wait and reduces before its first MMA; in the small q/k/v launch those round trips cost
// more than the add_rms_norm launch they replace.
namespace {
std::atomic<int> g_qmma_norm{-1};

bool qmma_norm_wanted() {
  const int mode = g_qmma_norm.load();
  if (mode >= 0) return mode == 1;
  static const bool env = env_flag("BUNSEN_QMMA_NORM", false);
  return env;
}
}  // namespace

bool gemv_qmma_norm(cudaStream_t stream, const QMmaArgs& args, const GemvNorm& n) {
  if (!qmma_norm_wanted()) return false;
  QMmaArgs a = args;
  a.l2_evict_first = l2_weights_evict_first(a.bits, qmma_weight_bytes(a));
  // The launches that take the 4-bit tile kernel at plan 0 or the 8-bit f16 register kernel in one launch
  // (launch_group, gemv_qmma), x from a plain norm prologue (m <= kGemvNormMaxM, k <= kGemvNormMaxK).
  const bool shape =
      a.group_size == 64 && a.m >= 1 && a.m <= kGemvNormMaxM && a.k <= kGemvNormMaxK && qmma_fits(a);
  const bool tiles = shape && a.bits == 4 && a.k % (64 * kTileGroups) == 0 && tiles_fit(a) && smem_fits(a) &&
                     plan_of(a) == 0 && smem_rows(a) >= a.m;
  // 8 bits: the f16 register kernel (plan 5, the default) in one launch; k % 256: whole warps per chunk run.
  const bool h8 =
      shape && a.bits == 8 && a.k % 256 == 0 && qmma_plan8() == 5 && h8_fits(a, 5) && h8_rows(a) >= a.m;
  const bool fits = tiles || h8;
  if (!fits || n.y_w != nullptr || !gemv_norm_rows_ok(n, a.k)) return false;  // the plain form only
  const bool f16 = a.part[0].w.sb_dtype == DType::kF16;
  const cudaError_t e = h8    ? launch_h8_norm_kernel(stream, a, n)
                        : f16 ? (a.glu ? launch_tiles_norm<Half, true>(stream, a, n)
                                       : launch_tiles_norm<Half, false>(stream, a, n))
                              : (a.glu ? launch_tiles_norm<Bf16, true>(stream, a, n)
                                       : launch_tiles_norm<Bf16, false>(stream, a, n));
  check_cuda(e, "linear_q (tensor-core GEMV, norm prologue)", [&] {
    return strfmt("m %lld k %lld parts %d glu %d", (long long)a.m, (long long)a.k, a.n_parts, (int)a.glu);
  });
  return true;
}

int qmma::forced_split() {
  const int forced = g_split.load();
  return forced == 1 || forced == 2 || forced == 4 || forced == 8 ? forced : 0;
}

void set_qmma_split(int split) {
  g_split.store(split);
}

void set_qmma_norm_for_testing(int mode) {
  g_qmma_norm.store(mode);
}

void set_linear_q_tiles_for_testing(int mode) {
  g_tiles.store(mode);
}

int qmma_plan() {
  const int forced = g_plan.load();
  if (forced >= 0 && forced < kQMmaPlans) return forced;
  static const int env = [] {
    const int v = env_int("BUNSEN_QMMA_PLAN", -1);
    return v >= 0 && v < kQMmaPlans ? v : -1;
  }();
  return env;
}

void set_qmma_plan_for_testing(int plan) {
  g_plan.store(plan);
}

// The f16 kernel (qmma_plan.h): H100, scripts/gpu-session.sh q8, 2026-12-05.
constexpr int kDefaultPlan8 = 5;

int qmma_plan8() {
  const int forced = g_plan8.load();
  if (forced >= 0 && forced < kQMmaPlans8) return forced;
  static const int env = [] {
    const int v = env_int("BUNSEN_QMMA_PLAN8", kDefaultPlan8);
    return v >= 0 && v < kQMmaPlans8 ? v : kDefaultPlan8;
  }();
  return env;
}

void set_qmma_plan8_for_testing(int plan) {
  g_plan8.store(plan);
}

bool qmma_lean() {
  const int forced = g_lean.load();
  if (forced >= 0) return forced != 0;
  static const bool env = env_flag("BUNSEN_QMMA_LEAN", true);
  return env;
}

void set_qmma_lean_for_testing(int mode) {
  g_lean.store(mode);
}

int qmma_xbatch() {
  const int forced = g_xbatch.load();
  if (forced >= 1) return forced > 1 ? 8 : 1;
  static const int env = env_int("BUNSEN_QMMA_XBATCH", 1) > 1 ? 8 : 1;
  return env;
}

void set_qmma_xbatch_for_testing(int batch) {
  g_xbatch.store(batch);
}

const char* qmma_plan8_name(int plan) {
  static const char* const names[kQMmaPlans8] = {"w8-regs",   "w8s2-ring", "w4s2-ring", "w4s3-ring",
                                                 "w2s4-ring", "f16-regs",  "f16-ring4"};
  return plan >= 0 && plan < kQMmaPlans8 ? names[plan] : "?";
}

const char* qmma_plan_name(int plan) {
  static const char* const names[kQMmaPlans] = {"w8s2-tile", "w8s4-ring", "w4s4-ring", "w4s3-ring", "w8s2-ring"};
  return plan >= 0 && plan < kQMmaPlans ? names[plan] : "?";
}

}  // namespace bunsen::kernels::cuda
