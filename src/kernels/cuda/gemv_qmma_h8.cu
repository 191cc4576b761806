// The f16 form of the 8-bit tensor-core quantized GEMV (BUNSEN_QMMA_PLAN8 5 and 6; gemv_qmma.cu describes the
// family; not a default until an H200 A/B says so). The register kernel (plan 0) turns every pair of 8-bit
// codes into bf16 with two PRMT, two FADD and a CVT, and the nibble form (shared-memory and ring kernels)
// with seven LOP3/SHF per four codes and two MMAs; here one PRMT per pair does it: a byte under f16's
// exponent of 1024 reads 1024 + q exactly (ulp 1), so the codes feed mma.m16n8k16 in f16 as they are and
// bias' = bias - 1024 scale folds the offset back (as the 4-bit kernels fold their 128).
// x must then be f16 too, which holds 65,504 at most: the block stages x into shared memory scaled per
// (token, group) by the power of two 2^s that puts the group's largest finite |x| in [2^14, 2^15), so every
// bf16 value converts exactly (f16's 11 significant bits hold bf16's 8) except those below 2^-38 of the
// group's largest (they round to f16 subnormals); the group's sum(q x') is scaled back by 2^-s (exact) with
// its scale: acc += scale (2^-s sum((1024 + q) x')) + bias' sum(x). Products (11 x 11 significant bits) are
// exact in the f32 accumulators, as in the bf16 kernels.
// Layout and loop are gemv_qmma_smem_kernel's: a warp owns 16 weight rows (gated: 8 gate + 8 up) and a
// slice of k, a lane streams its quarter of each group of its 2 rows (16-byte non-allocating loads,
// 32 bytes of each row per stage, two stages, both issued before the PDL wait; plan 6: a 4-stage
// cp.async ring in shared memory instead, gemv_qmma_h8_ring_kernel), x comes from shared memory in natural
// order (lane t's B fragment is x[4j .. 4j + 3] of its quarter, as its A fragment is codes 4j .. 4j + 3).
// gemv_qmma_h8_norm_kernel (opt-in BUNSEN_QMMA_NORM, group 64): the register kernel with x computed from a
// residual add + RMSNorm in its prologue, staged as a bf16 x would be.
// Invariants: as gemv_qmma.cu's (the k split depends on rows, k, group and the GPU, never on m; a token's
// bits do not depend on the other rows of x); every output element is written by exactly one lane.
#include "kernels/cuda/gemv_norm.cuh"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda::qmma {
namespace {

// Shared bytes of a launch: m rows of k / 8 + 1 16-byte words of f16 x (one word of padding spreads the
// rows over the banks), then m x (k / group) group sums and as many scale-backs 2^-s.
__host__ __device__ inline size_t h8_bytes(const QMmaArgs& a) {
  return static_cast<size_t>(a.m) * static_cast<size_t>(a.k / 8 + 1) * 16 +
         2 * static_cast<size_t>(a.m) * static_cast<size_t>(a.k / a.group_size) * 4;
}

// One chunk of 8 bf16 activations (column chunk `col` of its row; ok false: past the rows, only the
// shuffles): its group's statistics over the kG8 lanes of the group (every lane of the warp calls this), the
// f16 values scaled by the group's 2^s into the row's shared words, the sum and 2^-s by the group's first
// lane.
template <int kG8>
__device__ __forceinline__ void stage_chunk_h8(uint4 v, bool ok, int col, uint4* row, float* row_gsum,
                                               float* row_gback) {
  float f[8], sum, mx;
  bf16x8_group_stats<kG8>(v, f, sum, mx);
  if (!ok) return;
  const int s = group_shift(mx);
  row[col] = half8_scaled(f, pow2(s));
  if ((threadIdx.x & (kG8 - 1)) == 0) {
    row_gsum[col / kG8] = sum;
    row_gback[col / kG8] = pow2(-s);
  }
}

// Copies x (bf16) into shared memory as f16 scaled per (token, group) (see above), with every group's sum
// of x (f32 over the bf16 values, a fixed shuffle tree over the group's kGroup / 8 consecutive threads:
// the same tree for any m) and its 2^-s; ends with a block barrier. Each thread issues up to kBatch loads
// before it uses any (x is read after the PDL wait, so its round trips are the launch's latency; 8 cover
// one row of k <= 16,384 in one trip, 4 where the weights' stages hold registers meanwhile).
template <int kGroup, int kBatch>
__device__ __forceinline__ void stage_x_h8(const QMmaArgs& a, uint4* xs, float* gsum, float* gback) {
  constexpr int kG8 = kGroup / 8;
  const int k8 = static_cast<int>(a.k / 8), row_chunks = k8 + 1, ng = static_cast<int>(a.k / kGroup);
  const int total = static_cast<int>(a.m) * k8;
  const Bf16* x = static_cast<const Bf16*>(a.x);
  for (int base = 0; base < total; base += kBatch * kThreads) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = base + b * kThreads + static_cast<int>(threadIdx.x);
      v[b] = make_uint4(0, 0, 0, 0);
      if (c < total) {
        const int r = c / k8;
        v[b] = __ldg(reinterpret_cast<const uint4*>(x + r * a.x_stride + (c - r * k8) * 8));
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = base + b * kThreads + static_cast<int>(threadIdx.x);
      if (base + b * kThreads >= total) break;  // uniform over the block: whole warps shuffle below
      const int r = c < total ? c / k8 : 0;
      stage_chunk_h8<kG8>(v[b], c < total, c - r * k8, xs + r * row_chunks, gsum + r * ng, gback + r * ng);
    }
  }
  __syncthreads();
}

// The norm prologue's x (gemv_norm.cuh, linear.cuh's GemvNorm; the norm weights at wsm): the values
// add_rms_norm rounds to bf16, staged as stage_x_h8 stages a bf16 x (the same chunk per lane position, the
// same group statistics), so the launch's bits are add_rms_norm's followed by the plain launch. Needs
// k % 256 == 0 (whole warps per chunk run) and k <= kGemvNormMaxK; ends with a block barrier.
template <int kGroup>
__device__ __forceinline__ void stage_norm_x_h8(const GemvNorm& nm, const QMmaArgs& a, uint4* xs, float* gsum,
                                                float* gback, const char* wsm) {
  constexpr int kG8 = kGroup / 8;
  const int row_chunks = static_cast<int>(a.k / 8) + 1, ng = static_cast<int>(a.k / kGroup);
  gemv_norm::prologue_with<kThreads, kGemvNormMaxM>(
      nm, a.m, a.k, wsm, [&](int i, int64_t j, const float(&v)[8]) {
        uint4 u;
        Bf16* h = reinterpret_cast<Bf16*>(&u);
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = from_f32<Bf16>(v[e]);
        stage_chunk_h8<kG8>(u, true, static_cast<int>(j / 8), xs + i * row_chunks, gsum + i * ng,
                            gback + i * ng);
      });
}

// The lane's view of the staged x: its token row at its quarter of group 0 (x_ok false: token g is past m,
// its B column is zero) and the group sums and scale-backs of tokens 2t, 2t + 1 (token 0's past m: those
// columns are never stored).
struct H8X {
  const uint4* xrow;
  bool x_ok;
  const float *gs0, *gs1, *gb0, *gb1;
};

// Stages x (stage_x_h8, or with nm stage_norm_x_h8 and the norm weights at wsm) behind the launch's xs and
// returns lane (g, t)'s view of it.
template <int kGroup, int kBatch>
__device__ __forceinline__ H8X stage_h8(const QMmaArgs& a, uint4* xs, int g, int t,
                                        const GemvNorm* nm = nullptr, const char* wsm = nullptr) {
  const int ng = static_cast<int>(a.k / kGroup), row_chunks = static_cast<int>(a.k / 8) + 1;
  float* gsum = reinterpret_cast<float*>(xs + a.m * row_chunks);
  float* gback = gsum + a.m * ng;
  if (nm != nullptr)
    stage_norm_x_h8<kGroup>(*nm, a, xs, gsum, gback, wsm);
  else
    stage_x_h8<kGroup, kBatch>(a, xs, gsum, gback);
  H8X v;
  v.x_ok = g < a.m;
  v.xrow = xs + (v.x_ok ? g : 0) * row_chunks + t * (kGroup / 32);
  const int tok0 = 2 * t < a.m ? 2 * t : 0, tok1 = 2 * t + 1 < a.m ? 2 * t + 1 : 0;
  v.gs0 = gsum + tok0 * ng;
  v.gs1 = gsum + tok1 * ng;
  v.gb0 = gback + tok0 * ng;
  v.gb1 = gback + tok1 * ng;
  return v;
}

// acc += group grp: cq = sum((1024 + q) x') over the lane's rows g, g + 8 (words wa, wb: codes 4j .. 4j + 3
// of the lane's quarter in word j) and tokens 2t, 2t + 1, then acc[e] += scale (2^-s cq[e]) + (bias - 1024
// scale) sum(x); s0 / s1, bias0 / bias1: rows g / g + 8.
template <int kGroup>
__device__ __forceinline__ void group_h8(const uint32_t* wa, const uint32_t* wb, const H8X& x, int grp,
                                         float s0, float s1, float bias0, float bias1, float (&acc)[4]) {
  constexpr int kWpg = Geom<8, kGroup>::kWpg;
  const uint4* xg = x.xrow + grp * (kGroup / 8);
  const bool x_ok = x.x_ok;
  const float p0 = x.gb0[grp], p1 = x.gb1[grp], co0 = x.gs0[grp], co1 = x.gs1[grp];
  float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Words j, j + 1 of each row: codes 4j .. 4j + 7 of the lane's quarter; shared word j / 2 holds the
  // matching 8 activations. A fragment: (row g | g + 8) x (codes 4j, 4j + 1 | 4j + 2, 4j + 3).
#pragma unroll
  for (int j = 0; j < kWpg; j += 2) {
    const uint4 xv = x_ok ? xg[j / 2] : make_uint4(0, 0, 0, 0);
    mma_f16(cq, codes_1024<0>(wa[j]), codes_1024<0>(wb[j]), codes_1024<2>(wa[j]), codes_1024<2>(wb[j]), xv.x,
            xv.y);
    mma_f16(cq, codes_1024<0>(wa[j + 1]), codes_1024<0>(wb[j + 1]), codes_1024<2>(wa[j + 1]),
            codes_1024<2>(wb[j + 1]), xv.z, xv.w);
  }
  const float b0 = fmaf(-1024.0f, s0, bias0), b1 = fmaf(-1024.0f, s1, bias1);
  // cq 2^-s first (exact: back to x's own scale), so a small scale times a small 2^-s never underflows
  acc[0] = fmaf(s0, cq[0] * p0, fmaf(b0, co0, acc[0]));
  acc[1] = fmaf(s0, cq[1] * p1, fmaf(b0, co1, acc[1]));
  acc[2] = fmaf(s1, cq[2] * p0, fmaf(b1, co0, acc[2]));
  acc[3] = fmaf(s1, cq[3] * p1, fmaf(b1, co1, acc[3]));
}

// acc += the groups of stage `it` (group_h8 each).
template <int kGroup, typename SBT, int kU>
__device__ __forceinline__ void compute_stage_h8(const Stage<8, kGroup, SBT, kU>& st, int it, int ng,
                                                 const H8X& x, float (&acc)[4]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int grp = it * kU + u;
    if (grp >= ng) break;
    group_h8<kGroup>(st.w[u][0], st.w[u][1], x, grp, sb_f32(st.s[u][0], SBT{}), sb_f32(st.s[u][1], SBT{}),
                     sb_f32(st.b[u][0], SBT{}), sb_f32(st.b[u][1], SBT{}), acc);
  }
}

// Groups per stage: 8 words (32 bytes) of each of the lane's 2 rows, at least one group. (16 words, or 3
// blocks per SM with 4, spilled 68-188 bytes; ptxas, sm_90a.)
template <int kGroup>
struct H8Stage {
  static constexpr int kU = Geom<8, kGroup>::kWpg >= 8 ? 1 : 8 / Geom<8, kGroup>::kWpg;
};

// kNorm: x from nm's prologue (stage_norm_x_h8; the norm weights copied before the PDL wait behind x).
template <int kGroup, typename SBT, bool kGlu, bool kNorm>
__device__ __forceinline__ void h8_body(const QMmaArgs& a, int split, const GemvNorm* nm) {
  using G = Geom<8, kGroup>;
  constexpr int kU = H8Stage<kGroup>::kU;
  extern __shared__ uint4 xs[];
  __shared__ float4 partial[kWarps][32];
  pdl_launch_dependents();
  const WarpTile me = warp_tile<kGlu, kWarps>(a, split);
  const int lane = me.lane, warp = me.warp, g = me.g, t = me.t, slice = me.slice, part = me.part;
  const int64_t n0 = me.n0;
  const bool active = me.active;
  const LaneRows<SBT> lr = lane_rows<kGlu, SBT>(a, part, n0, g, t * G::kWpg);
  const int ng = static_cast<int>(a.k / kGroup), n_iter = (ng + kU - 1) / kU;
  Stage<8, kGroup, SBT, kU> sa, sb;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int it = slice;
  // weights depend on no earlier kernel: both stages in flight before the wait
  if (active && it < n_iter) load_stage(sa, lr, it, ng);
  if (active && it + split < n_iter) load_stage(sb, lr, it + split, ng);
  char* wsm = reinterpret_cast<char*>(xs) + (h8_bytes(a) + 15) / 16 * 16;
  if constexpr (kNorm) gemv_norm::prefetch_w_to<kThreads>(*nm, a.k, wsm);
  pdl_wait();
  if constexpr (kNorm) cp_async_wait_group<0>();  // this thread's norm weights
  const H8X x = stage_h8<kGroup, 4>(a, xs, g, t, kNorm ? nm : nullptr, wsm);
  for (; active && it < n_iter; it += 2 * split) {
    compute_stage_h8<kGroup, SBT, kU>(sa, it, ng, x, acc);
    if (it + 2 * split < n_iter) load_stage(sa, lr, it + 2 * split, ng);
    if (it + split >= n_iter) break;
    compute_stage_h8<kGroup, SBT, kU>(sb, it + split, ng, x, acc);
    if (it + 3 * split < n_iter) load_stage(sb, lr, it + 3 * split, ng);
  }
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}

template <int kGroup, typename SBT, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_qmma_h8_kernel(const __grid_constant__ QMmaArgs a, int split) {
  h8_body<kGroup, SBT, kGlu, false>(a, split, nullptr);
}

template <int kGroup, typename SBT, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_qmma_h8_norm_kernel(const __grid_constant__ QMmaArgs a, int split,
                             const __grid_constant__ GemvNorm nm) {
  h8_body<kGroup, SBT, kGlu, true>(a, split, &nm);
}

// ---- the lane ring (plan 6; group 64): the same math with the weights staged through shared memory ----
// Registers bound how many bytes the kernel above keeps in flight (two 64-byte stages per lane, 16 warps per
// SM: ~32-64 KB per SM). Here each lane copies its own 16 bytes of each group of its 2 rows with cp.async
// into a kRingStages-deep ring of its warp's shared memory (lane-contiguous, so its 16-byte reads never
// conflict), and the 4 lanes of a quad copy the rows' scales and biases (lane 4g + t: t = 0 scales, 1 biases
// of row g; 2, 3 of row g + 8; kRingU values each, one 4-byte copy); the first kRingStages stages are issued
// before the PDL wait: up to ~128 KB per SM in flight. Needs 4-byte aligned scale/bias runs (ring_fits).
constexpr int kRingU = 2;       // groups per stage: 32 bytes of each of the lane's rows
constexpr int kRingStages = 4;  // ring depth

struct LaneSlot {
  uint4 codes[2][kRingU][32];  // [row g | g + 8][group][lane]
  uint32_t sb[32];             // [lane 4g + t]: kRingU bf16/f16 values of the run lane 4g + t copies
};
constexpr size_t kLaneRingBytes = sizeof(LaneSlot) * kRingStages * kWarps;

// 4 bytes global -> shared, asynchronous; only the first src_bytes (0, 2 or 4) are read, the rest zeroed.
__device__ __forceinline__ void cp_async_4_zfill(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}

template <typename SBT, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_qmma_h8_ring_kernel(const __grid_constant__ QMmaArgs a, int split) {
  constexpr int kGroup = 64;
  using G = Geom<8, kGroup>;
  extern __shared__ uint4 xs[];
  __shared__ float4 partial[kWarps][32];
  pdl_launch_dependents();
  const WarpTile me = warp_tile<kGlu, kWarps>(a, split);
  const int lane = me.lane, warp = me.warp, g = me.g, t = me.t, slice = me.slice, part = me.part;
  const int64_t n0 = me.n0;
  const bool active = me.active;
  const LaneRows<SBT> lr = lane_rows<kGlu, SBT>(a, part, n0, g, t * G::kWpg);
  const int ng = static_cast<int>(a.k / kGroup), n_iter = (ng + kRingU - 1) / kRingU;
  const size_t x_uint4 = (h8_bytes(a) + 15) / 16;
  LaneSlot* ring = reinterpret_cast<LaneSlot*>(xs + x_uint4) + warp * kRingStages;
  const SBT* sb_src = t == 0 ? lr.s[0] : t == 1 ? lr.b[0] : t == 2 ? lr.s[1] : lr.b[1];
  auto issue = [&](int it, LaneSlot& slot) {
    const int grp0 = it * kRingU;
#pragma unroll
    for (int u = 0; u < kRingU; ++u) {
      if (grp0 + u >= ng) break;
#pragma unroll
      for (int r = 0; r < 2; ++r) cp_async_16(&slot.codes[r][u][lane], lr.w[r] + (grp0 + u) * G::kGroupWords);
    }
    cp_async_4_zfill(&slot.sb[lane], sb_src + grp0, 2 * min(kRingU, ng - grp0));
  };
  // This warp's stages: slice, slice + split, ... (warp-uniform count).
  const int mine = active && slice < n_iter ? (n_iter - slice + split - 1) / split : 0;
#pragma unroll
  for (int st = 0; st < kRingStages; ++st) {  // weights depend on no earlier kernel
    if (st < mine) issue(slice + st * split, ring[st]);
    cp_async_commit_group();
  }
  pdl_wait();
  const H8X x = stage_h8<kGroup, 8>(a, xs, g, t);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0;
  for (int j = 0; j < mine; ++j) {
    cp_async_wait_group<kRingStages - 1>();
    __syncwarp();  // the quad's scale/bias copies are visible
    const LaneSlot& ls = ring[slot];
    const int it = slice + j * split;
    const uint32_t sb[4] = {ls.sb[4 * g], ls.sb[4 * g + 1], ls.sb[4 * g + 2], ls.sb[4 * g + 3]};
#pragma unroll
    for (int u = 0; u < kRingU; ++u) {
      const int grp = it * kRingU + u;
      if (grp >= ng) break;
      const uint4 va = ls.codes[0][u][lane], vb = ls.codes[1][u][lane];
      const uint32_t wa[4] = {va.x, va.y, va.z, va.w}, wb[4] = {vb.x, vb.y, vb.z, vb.w};
      auto half_of = [u](uint32_t w) { return static_cast<unsigned short>(u == 0 ? w & 0xffffu : w >> 16); };
      group_h8<kGroup>(wa, wb, x, grp, sb_f32(half_of(sb[0]), SBT{}), sb_f32(half_of(sb[2]), SBT{}),
                       sb_f32(half_of(sb[1]), SBT{}), sb_f32(half_of(sb[3]), SBT{}), acc);
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
    if (j + kRingStages < mine) issue(slice + (j + kRingStages) * split, ring[slot]);
    cp_async_commit_group();
    slot = slot + 1 == kRingStages ? 0 : slot + 1;
  }
  cp_async_wait_group<0>();  // no copy outlives the block (only empty groups can be pending here)
  finish_tile<kGlu>(a, partial, acc, split, slice, warp, lane, active, part, n0);
}

// Launches one of this file's kernels over every row tile with the forced k split, else choose_split over
// `iters` stages per tile and `resident` warps (never from m).
template <typename Kernel, typename... Extra>
cudaError_t launch_split(Kernel kernel, cudaStream_t stream, const QMmaArgs& a, int64_t iters,
                         int64_t resident, size_t smem, const Extra&... extra) {
  const int64_t tiles = total_tiles(a);
  const int forced = forced_split();
  const int split = forced != 0 ? forced : choose_split(tiles, iters, resident, kWarps);
  const int64_t per_block = kWarps / split;
  return launch_pdl(kernel, dim3(static_cast<unsigned>((tiles + per_block - 1) / per_block)), dim3(kThreads),
                    smem, stream, a, split, extra...);
}

template <typename SBT, bool kGlu>
cudaError_t launch_ring(cudaStream_t stream, const QMmaArgs& a) {
  auto kernel = gemv_qmma_h8_ring_kernel<SBT, kGlu>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax + 16 + kLaneRingBytes,
                     "linear_q (8-bit f16 tensor-core GEMV, lane ring)");
  // Residency from one row of x (the k split must not depend on m; more rows only lower it).
  QMmaArgs one = a;
  one.m = 1;
  int bps = 0;
  const size_t smem_one = (h8_bytes(one) + 15) / 16 * 16 + kLaneRingBytes;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, kThreads, smem_one) != cudaSuccess) bps = 1;
  bps = std::max(bps, 1);
  return launch_split(kernel, stream, a, (a.k / 64 + kRingU - 1) / kRingU,
                      static_cast<int64_t>(sm_count()) * kWarps * bps,
                      (h8_bytes(a) + 15) / 16 * 16 + kLaneRingBytes);
}

// ptxas, sm_90a: 108-128 registers; no spills at groups 64 and 128, 16-28 bytes at group 32.
template <int kGroup, typename SBT, bool kGlu>
cudaError_t launch_regs(cudaStream_t stream, const QMmaArgs& a) {
  constexpr int kU = H8Stage<kGroup>::kU;
  auto kernel = gemv_qmma_h8_kernel<kGroup, SBT, kGlu>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax,
                     "linear_q (8-bit f16 tensor-core GEMV)");
  // The k split is modelled on the register-limited residency only, so it never depends on m.
  static const int by_regs = occupancy(kernel, kThreads);
  return launch_split(kernel, stream, a, (a.k / kGroup + kU - 1) / kU,
                      static_cast<int64_t>(sm_count()) * kWarps * by_regs, h8_bytes(a));
}

// launch_regs with x from n's prologue (group 64): the plain kernel's k split; the norm weights behind x.
template <typename SBT, bool kGlu>
cudaError_t launch_regs_norm(cudaStream_t stream, const QMmaArgs& a, const GemvNorm& n) {
  constexpr int kU = H8Stage<64>::kU;
  auto kernel = gemv_qmma_h8_norm_kernel<64, SBT, kGlu>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemMax + 16 + kGemvNormMaxK * 4,
                     "linear_q (8-bit f16 tensor-core GEMV, norm prologue)");
  static const int by_regs = occupancy(gemv_qmma_h8_kernel<64, SBT, kGlu>, kThreads);
  const size_t smem = (h8_bytes(a) + 15) / 16 * 16 + static_cast<size_t>(a.k) * (n.w_bf16 ? 2 : 4);
  return launch_split(kernel, stream, a, (a.k / 64 + kU - 1) / kU,
                      static_cast<int64_t>(sm_count()) * kWarps * by_regs, smem, n);
}

// Whether the lane ring takes launch a: group 64 and every part's scale/bias rows 4-byte aligned runs.
bool ring_fits(const QMmaArgs& a) {
  if (a.group_size != 64) return false;
  for (int p = 0; p < a.n_parts; ++p) {
    const QuantView& w = a.part[p].w;
    if (w.sb_stride % 2 != 0 || reinterpret_cast<uintptr_t>(w.scales) % 4 != 0 ||
        reinterpret_cast<uintptr_t>(w.biases) % 4 != 0)
      return false;
  }
  return true;
}

template <typename SBT, bool kGlu>
cudaError_t launch_group(cudaStream_t stream, const QMmaArgs& a, int plan) {
  if (plan == 6 && ring_fits(a)) return launch_ring<SBT, kGlu>(stream, a);
  if (a.group_size == 32) return launch_regs<32, SBT, kGlu>(stream, a);
  if (a.group_size == 64) return launch_regs<64, SBT, kGlu>(stream, a);
  return launch_regs<128, SBT, kGlu>(stream, a);
}

}  // namespace

int64_t h8_rows(const QMmaArgs& a) {
  QMmaArgs r = a;
  for (r.m = a.m; r.m > 0; --r.m)
    if (h8_bytes(r) <= kSmemMax) break;
  return r.m;
}

bool h8_fits(const QMmaArgs& a, int plan) {
  return a.bits == 8 && is_h8_plan8(plan) && a.x_dtype == DType::kBF16 &&
         a.part[0].w.sb_dtype != DType::kF32 && h8_rows(a) >= 1;
}

cudaError_t launch_h8_norm_kernel(cudaStream_t stream, const QMmaArgs& a, const GemvNorm& n) {
  if (a.part[0].w.sb_dtype == DType::kF16)
    return a.glu ? launch_regs_norm<Half, true>(stream, a, n) : launch_regs_norm<Half, false>(stream, a, n);
  return a.glu ? launch_regs_norm<Bf16, true>(stream, a, n) : launch_regs_norm<Bf16, false>(stream, a, n);
}

cudaError_t launch_h8_kernel(cudaStream_t stream, const QMmaArgs& a, int plan) {
  if (a.part[0].w.sb_dtype == DType::kF16)
    return a.glu ? launch_group<Half, true>(stream, a, plan) : launch_group<Half, false>(stream, a, plan);
  return a.glu ? launch_group<Bf16, true>(stream, a, plan) : launch_group<Bf16, false>(stream, a, plan);
}

}  // namespace bunsen::kernels::cuda::qmma
