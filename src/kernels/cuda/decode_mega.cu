// The persistent batch-1 decode step (decode_mega.h): one block per SM runs every layer of a llama-like
// model for one token. Why: at batch 1 the per-op kernels leave the memory idle between launches (each
// phase after the q/k/v GEMV is a dependent round trip of 2-3.5 us, docs/PERFORMANCE.md), while the
// weights, ~all of the bytes, depend on nothing. Here a producer warp per block copies the block's weight
// rows of every projection of every layer, in the order the block consumes them, into a ring of 19 KB
// stages (cp.async.bulk onto a per-stage mbarrier), and only stops when the ring is full; the 8 consumer
// warps wait for the grid-wide barrier of each phase (q/k/v -> attention -> o -> gate/up -> down) and find
// the next phase's weights already landed.
// Phases of a layer (tasks dealt round-robin over the blocks, blockIdx.x first):
//   A q/k/v: h = bf16(rms_norm(x) * in_norm) computed by every block into shared memory; rows of [q; k; v]
//     -> bf16 q/k/v buffers.
//   B attention: (kv head, key slice) tasks; q and the new key rotated (rope_math.cuh's rotation), the new
//     key and value written into the paged cache by the slice that holds the position; per q head the
//     slice's (max, sum, unnormalised acc) into `partials`.
//     The block that finishes a kv head's last slice merges its q heads' slices into bf16 attn (a counter
//     per layer and kv head), so no grid barrier separates the slices from the merge.
//   C o-projection: x[row] += bf16(o . attn) * residual (each row owned by one task).
//   D gate/up: h = bf16(rms_norm(x) * post_norm); act = bf16(silu(gate . h) * (up . h)).
//   E down: x[row] += bf16(down . act) * residual.
// Work split: a projection is cut into tiles of 16 rows (gate/up: 8 gate rows and the same 8 up rows) over
// K in parts of kBfCols columns (bf16) or kQ4Codes codes (4-bit), one ring stage per (tile, part), and both
// forms run on the tensor cores (mma.m16n8k16, x broadcast into every column). Warp w of a block takes the
// block's stages w, w + 8, ..., so consecutive stages are read by different warps at once; a tile's parts
// meet in shared memory in part order (tile_add), and the warp adding the last part emits the rows. No stage
// needs a block synchronisation. Every output's summation order depends on the shapes and the grid size only,
// not on timing (not bit-identical to the per-op kernels: different orders). Invariants: grid = SM count, one
// block per SM (the shared-memory ring enforces it), so every block is resident and the spin barriers cannot
// deadlock; data another block wrote in this launch is read with ld.global.cg (L2), never through L1 or the
// non-coherent path; the producer never waits on a phase barrier (weights are read-only), only on its ring's
// free slots.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/decode_mega.h"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers + 32;  // + the producer warp
constexpr int kStageBytes = 19456;         // a 4-bit stage (below) with room
// 4-bit stages: 16 tile rows (gated: 8 gate rows, then the same 8 up rows) x up to kQ4Codes codes, each row's
// codes, scales and biases padded by 16 bytes (the 8 rows of an MMA fragment read hit different banks).
constexpr int kQ4Codes = 2048;
constexpr int kQ4Row = kQ4Codes / 2 + 16;  // bytes per tile row of codes
constexpr int kQ4Sb = kQ4Codes / 32 + 16;  // bytes per tile row of scales (and of biases)
static_assert(16 * kQ4Row + 32 * kQ4Sb <= kStageBytes, "a 4-bit stage fits");
// 8-bit stages alike: 16 tile rows x up to kQ8Codes codes; rows padded by 64 bytes (a quarter warp's 16-byte
// loads of two rows fall in different banks).
constexpr int kQ8Codes = 1024;
constexpr int kQ8Row = kQ8Codes + 64;
constexpr int kQ8Sb = kQ8Codes / 32 + 16;
static_assert(16 * kQ8Row + 32 * kQ8Sb <= kStageBytes, "an 8-bit stage fits");
// Bytes per tile row of codes / of scales for `bits`.
__host__ __device__ __forceinline__ int q_row_bytes(int bits) {
  return bits == 8 ? kQ8Row : kQ4Row;
}
__host__ __device__ __forceinline__ int q_sb_bytes(int bits) {
  return bits == 8 ? kQ8Sb : kQ4Sb;
}
// bf16 stages: 16 tile rows x up to kBfCols columns, each row padded by 16 bytes (ldmatrix's 8 rows hit
// different banks).
constexpr int kBfCols = 512;
constexpr int kBfRow = kBfCols * 2 + 16;
static_assert(16 * kBfRow <= kStageBytes, "a bf16 stage fits");
constexpr int kMaxStages = 16;
// Tiles of several parts sum their parts in shared memory, in part order, in one of kTileSlots slots (tile %
// kTileSlots): the tiles open at once all touch the ring's window of <= kMaxStages items plus the 8 warps'.
constexpr int kTileSlots = 32;

// The counters after the key-slice partials (decode_mega.h): [0] the grid barrier, from [64] one per (layer,
// kv head). The launcher zeroes them; the kernel counts.
__host__ __device__ __forceinline__ unsigned* counters_of(const MegaArgs& a) {
  return reinterpret_cast<unsigned*>(a.partials +
                                     static_cast<int64_t>(a.n_heads) * kMegaMaxSplits * (a.head_dim + 2));
}

// Shared-memory scratch besides the ring and the input vector.
struct Scratch {
  float red[kConsumerWarps];  // block reductions
  int last;                   // attention: this block finished a kv head's last slice
  int pad[kConsumerWarps - 1];
  float tile_sum[kTileSlots][16];   // a tile's rows summed over its parts so far
  unsigned tile_parts[kTileSlots];  // parts in tile_sum (0: the slot is free)
};

__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

__device__ __forceinline__ void mbar_arrive(void* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Grid-wide barrier over the consumers of every block: arrivals count up through the step.
__device__ __forceinline__ void grid_arrive(unsigned* sync) {
  consumer_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(sync, 1u);
  }
}
__device__ __forceinline__ void grid_wait(const unsigned* sync, unsigned target) {
  if (threadIdx.x == 0)
    while (ld_acquire(sync) < target) __nanosleep(32);
  consumer_sync();
}

__device__ __forceinline__ float bf(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ void unpack8(const uint4 u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// The geometry of one projection phase (the producer and the consumers derive the same one): tiles of 16
// MMA rows (gated: 8 gate rows, then the same 8 up rows: nr = 8 output rows) over K, in P parts of kc columns
// (bf16) or codes (4-bit); one stage per (tile, part), tile-major.
struct Geo {
  int M, rows, K, nr, P, kc, ntiles;
};

enum Phase { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };

__device__ __forceinline__ Geo geo(const MegaArgs& a, int ph) {
  Geo g;
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  g.M = ph == kGateUp ? 2 : 1;
  g.rows = ph == kQkv ? qd + 2 * kvd : ph == kGateUp ? a.d_ff : a.d;
  g.K = ph == kQkv || ph == kGateUp ? a.d : ph == kO ? qd : a.d_ff;
  g.kc = min(g.K, a.bits == 4 ? kQ4Codes : a.bits == 8 ? kQ8Codes : kBfCols);
  g.P = (g.K + g.kc - 1) / g.kc;
  g.nr = g.M == 2 ? 8 : 16;
  g.ntiles = (g.rows + g.nr - 1) / g.nr;
  return g;
}

// The weight (MegaLayer::w index) of row r of the phase's matrix m, r made local to it (q/k/v rows are one
// virtual matrix [q; k; v]).
__device__ __forceinline__ int matrix_of(const MegaArgs& a, int ph, int m, int& r) {
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  if (ph != kQkv) return ph == kO ? 3 : ph == kDown ? 6 : 4 + m;
  if (r < qd) return 0;
  if (r < qd + kvd) {
    r -= qd;
    return 1;
  }
  r -= qd + kvd;
  return 2;
}

// Elements of the input vector's shared copy: the widest of d, n_heads * head_dim and d_ff (each % 8 == 0).
__host__ __device__ __forceinline__ int vec_elems(const MegaArgs& a) {
  const int qd = a.n_heads * a.head_dim, n = a.d > qd ? a.d : qd;
  return n > a.d_ff ? n : a.d_ff;
}

struct Ring {
  char* base;
  uint64_t* full;
  uint64_t* empty;
  unsigned* seq;  // per stage: the item the producer armed it for (~0u before the first)
  int n;
};

// Waits until stage item % n holds `item` and returns it. First until the producer armed the stage for this
// item (it had waited for the release of item - n, so the full barrier's current phase is this item's): a
// parity wait alone cannot tell this item's phase from the one two behind, which a warp meets when it runs
// more than a ring ahead of a stage another warp has not released (tasks of several stages: 8 warps x P
// stages > n). Then until the item's bytes landed.
__device__ __forceinline__ char* wait_item(const Ring& ring, unsigned item) {
  const unsigned n = static_cast<unsigned>(ring.n), stage = item % n;
  while (*reinterpret_cast<volatile const unsigned*>(ring.seq + stage) != item) {
  }
  mbar_wait(&ring.full[stage], (item / n) & 1u);
  return ring.base + static_cast<size_t>(stage) * kStageBytes;
}
// The warp is done reading the stage of `item`: lane 0 frees it for the producer.
__device__ __forceinline__ void release_item(const Ring& ring, unsigned item) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(&ring.empty[item % static_cast<unsigned>(ring.n)]);
}

// ---- the timing instance (MegaArgs::timing): per block and layer, kMegaTimingSlots words ----
// Phase ends of consumer thread 0 on %globaltimer (ns; comparable across blocks): the block's consumers done
// (*Done: after their block sync) and the grid barrier passed (*Pass); then warp 0's SM clocks waiting for
// staged data per projection phase (kWaitData + phase), the producer's SM clocks waiting for a free stage
// (kWaitFree + phase) and the %globaltimer when it issued the phase's last stage (kIssued + phase).
enum Slot {
  kStart,
  kNorm1,
  kQkvDone,
  kQkvPass,
  kAttnDone,
  kAttnPass,
  kOLoaded,
  kODone,
  kOPass,
  kNorm2,
  kGuDone,
  kGuPass,
  kActLoaded,
  kDownDone,
  kDownPass,
  kWaitData,
  kWaitFree = kWaitData + 4,
  kIssued = kWaitFree + 4,
  kSlotsUsed = kIssued + 4
};
static_assert(kSlotsUsed <= kMegaTimingSlots, "timing slots");

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void record(const MegaArgs& a, int layer, int slot, unsigned long long v) {
  a.timing[(static_cast<int64_t>(blockIdx.x) * a.n_layers + layer) * kMegaTimingSlots + slot] = v;
}

// Tiles of a phase this block runs: blockIdx.x, blockIdx.x + gridDim.x, ...
__device__ __forceinline__ int block_tiles(const Geo& g) {
  const int b = static_cast<int>(blockIdx.x), n = static_cast<int>(gridDim.x);
  return g.ntiles > b ? (g.ntiles - b + n - 1) / n : 0;
}
// The first output row of the block's i-th tile.
__device__ __forceinline__ int tile_row0(const Geo& g, int i) {
  return (static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x)) * g.nr;
}

// The producer warp: every stage of every projection this block consumes, in consumption order. Lane 0 waits
// for the stage's slot and arms its barrier, then the lanes issue the stage's copies: the 16 tile rows' part
// (4-bit: codes, scales and biases). Rows past the matrix re-read its last row (their outputs are dropped).
template <bool kTiming>
__device__ void produce(const MegaArgs& a, const Ring& ring) {
  const int lane = threadIdx.x & 31;
  unsigned item = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    for (int ph = 0; ph < 4; ++ph) {
      const Geo g = geo(a, ph);
      const int n_i = block_tiles(g);
      long long waited = 0;
      for (int i = 0; i < n_i; ++i) {
        const int r0 = tile_row0(g, i);
        for (int p = 0; p < g.P; ++p, ++item) {
          const int len = min(g.kc, g.K - p * g.kc);
          const int stage = static_cast<int>(item % static_cast<unsigned>(ring.n));
          const unsigned bytes =
              16u * static_cast<unsigned>(a.bits < 16 ? len * a.bits / 8 + 2 * (len / 32) : len * 2);
          if (lane == 0) {
            long long t0 = 0;
            if constexpr (kTiming) t0 = clock64();
            mbar_wait(&ring.empty[stage], ((item / static_cast<unsigned>(ring.n)) & 1u) ^ 1u);
            if constexpr (kTiming) waited += clock64() - t0;
            mbar_arrive_expect_tx(&ring.full[stage], bytes);
            *reinterpret_cast<volatile unsigned*>(ring.seq + stage) = item;
          }
          __syncwarp();
          char* dst = ring.base + static_cast<size_t>(stage) * kStageBytes;
          const int64_t k0 = static_cast<int64_t>(p) * g.kc;
          const int qrow = q_row_bytes(a.bits), qsb = q_sb_bytes(a.bits);
          for (int c = lane; c < (a.bits < 16 ? 48 : 16); c += 32) {
            const int r = c & 15, kind = c >> 4;  // quantized: 0 codes, 1 scales, 2 biases
            const int m = g.M == 2 ? r >> 3 : 0;
            int row = min(r0 + (g.M == 2 ? (r & 7) : r), g.rows - 1);
            const int w = matrix_of(a, ph, m, row);
            if (a.bits == 16)
              bulk_copy_g2s(dst + r * kBfRow,
                            static_cast<const Bf16*>(L.w[w]) + static_cast<int64_t>(row) * g.K + k0,
                            static_cast<unsigned>(len * 2), &ring.full[stage]);
            else if (kind == 0)
              bulk_copy_g2s(dst + r * qrow,
                            static_cast<const unsigned char*>(L.w[w]) +
                                (static_cast<int64_t>(row) * g.K + k0) * a.bits / 8,
                            static_cast<unsigned>(len * a.bits / 8), &ring.full[stage]);
            else
              bulk_copy_g2s(dst + 16 * qrow + (kind - 1) * 16 * qsb + r * qsb,
                            static_cast<const Bf16*>(kind == 1 ? L.sc[w] : L.bi[w]) +
                                static_cast<int64_t>(row) * (g.K / 64) + k0 / 64,
                            static_cast<unsigned>(len / 32), &ring.full[stage]);
          }
        }
      }
      if constexpr (kTiming) {
        if (lane == 0) {
          record(a, l, kWaitFree + ph, static_cast<unsigned long long>(waited));
          record(a, l, kIssued + ph, global_ns());
        }
      }
    }
  }
}

// One bf16 stage (16 tile rows x len columns from column k0 of the input vector) through mma.m16n8k16: the
// rows as A (ldmatrix from the padded rows), x as every column of B, so each output column holds the same
// dots; lanes with t == 0 return rows g (c0) and g + 8 (c2).
__device__ __forceinline__ void stage_dot_bf16(const char* st, const Bf16* vec, int k0, int len, float& c0,
                                               float& c2) {
  const int lane = threadIdx.x & 31, t = lane & 3;
  // ldmatrix.x4: lane l addresses row l % 8 of matrix l / 8 (0: rows 0-7, k 0-7; 1: rows 8-15; 2, 3: k 8-15)
  const char* ap = st + ((lane >> 3) & 1) * 8 * kBfRow + (lane & 7) * kBfRow + (lane >> 4) * 16;
  const Bf16* xp = vec + k0 + 2 * t;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < len; k += 16) {
    uint32_t r[4];
    ldsm_x4(r, ap + k * 2);
    const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xp + k);
    const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xp + k + 8);
    qmma::mma_bf16(c, r[0], r[1], r[2], r[3], b0, b1);
  }
  c0 = c[0];
  c2 = c[2];
}

// Folds group u's MMA sums (cq: rows g in [0], g + 8 in [2]) into the lane's two rows: acc += scale * cq +
// (bias - offset * scale) * sum(x), offset being what the biased codes added per x (4-bit 128, 8-bit 2176).
// sb: the tile's bf16 scales (16 rows of sb_row bytes), then its biases alike.
__device__ __forceinline__ void fold_group(const unsigned char* sb, int sb_row, int gq, int u, const float (&cq)[4],
                                           float gsum, float offset, float& acc0, float& acc2) {
  const auto* sc = reinterpret_cast<const unsigned short*>(sb);
  const auto* bi = reinterpret_cast<const unsigned short*>(sb + 16 * sb_row);
  const int r0 = gq * (sb_row / 2) + u, r1 = (gq + 8) * (sb_row / 2) + u;
  const float s0 = __uint_as_float(static_cast<uint32_t>(sc[r0]) << 16);
  const float s1 = __uint_as_float(static_cast<uint32_t>(sc[r1]) << 16);
  const float b0 = __uint_as_float(static_cast<uint32_t>(bi[r0]) << 16);
  const float b1 = __uint_as_float(static_cast<uint32_t>(bi[r1]) << 16);
  acc0 = fmaf(s0, cq[0], fmaf(fmaf(-offset, s0, b0), gsum, acc0));
  acc2 = fmaf(s1, cq[2], fmaf(fmaf(-offset, s1, b1), gsum, acc2));
}

// One 4-bit stage (16 tile rows x len codes from code k0) through mma.m16n8k16 as the tile GEMV computes it
// (gemv_qmma_tiles.cuh: codes enter as bf16 128 + q, the group's sum(q x) scaled, bias' = bias - 128 scale
// times the group's sum of x), x staged in the codes' pair order (perm4) with its group sums. Every lane
// feeds token 0's x, so each MMA column holds the same dot; lanes with t == 0 return rows g (c0) and g + 8
// (c2).
__device__ __forceinline__ void stage_dot_q4(const unsigned char* st, const uint4* xq, const float* gsum,
                                             int k0, int len, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const unsigned char* ca = st + gq * kQ4Row + t * 8;
  const unsigned char* cb = ca + 8 * kQ4Row;
  const int ng = len / 64, g0 = k0 / 64;
  float acc0 = 0.0f, acc2 = 0.0f;
  for (int u = 0; u < ng; ++u) {
    const uint2 wa = *reinterpret_cast<const uint2*>(ca + u * 32),
                wb = *reinterpret_cast<const uint2*>(cb + u * 32);
    const uint4* x = xq + (g0 + u) * 8 + 2 * t;
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint4 x0 = x[0], x1 = x[1];
    using qmma::pair4_biased;
    qmma::mma_bf16(cq, pair4_biased(wa.x), pair4_biased(wb.x), pair4_biased(wa.x >> 4),
                   pair4_biased(wb.x >> 4), x0.x, x0.y);
    qmma::mma_bf16(cq, pair4_biased(wa.x >> 8), pair4_biased(wb.x >> 8), pair4_biased(wa.x >> 12),
                   pair4_biased(wb.x >> 12), x0.z, x0.w);
    qmma::mma_bf16(cq, pair4_biased(wa.y), pair4_biased(wb.y), pair4_biased(wa.y >> 4),
                   pair4_biased(wb.y >> 4), x1.x, x1.y);
    qmma::mma_bf16(cq, pair4_biased(wa.y >> 8), pair4_biased(wb.y >> 8), pair4_biased(wa.y >> 12),
                   pair4_biased(wb.y >> 12), x1.z, x1.w);
    fold_group(st + 16 * kQ4Row, kQ4Sb, gq, u, cq, gsum[g0 + u], 128.0f, acc0, acc2);
  }
  c0 = acc0;
  c2 = acc2;
}

// One 8-bit stage (16 tile rows x len codes from code k0) the same way: each code fed as its two nibbles,
// low with x and high with 16 x (bf16 exact), biased like the 4-bit codes, so an MMA pair sums
// (128 + lo) x + (128 + hi) 16 x = (q + 2176) x; x staged as (x0, x2), (x1, x3) per 4 activations (perm8h),
// matching a word's nibble pairs (lo b0, lo b2), (hi b0, hi b2), then b1 / b3; 16 x made in registers.
__device__ __forceinline__ void stage_dot_q8(const unsigned char* st, const uint4* xq, const float* gsum,
                                             int k0, int len, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const unsigned char* ca = st + gq * kQ8Row + t * 16;
  const unsigned char* cb = ca + 8 * kQ8Row;
  const int ng = len / 64, g0 = k0 / 64;
  float acc0 = 0.0f, acc2 = 0.0f;
  using qmma::pair4_biased;
  using qmma::times16;
  for (int u = 0; u < ng; ++u) {
    const uint4 wa = *reinterpret_cast<const uint4*>(ca + u * 64),
                wb = *reinterpret_cast<const uint4*>(cb + u * 64);
    const uint4* x = xq + (g0 + u) * 8 + 2 * t;  // the lane's 16 codes: chunks 2t, 2t + 1 of the group
    const uint4 x0 = x[0], x1 = x[1];
    const uint32_t ws_a[4] = {wa.x, wa.y, wa.z, wa.w}, ws_b[4] = {wb.x, wb.y, wb.z, wb.w};
    const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      qmma::mma_bf16(cq, pair4_biased(ws_a[j]), pair4_biased(ws_b[j]), pair4_biased(ws_a[j] >> 4),
                     pair4_biased(ws_b[j] >> 4), xs[2 * j], times16(xs[2 * j]));
      qmma::mma_bf16(cq, pair4_biased(ws_a[j] >> 8), pair4_biased(ws_b[j] >> 8), pair4_biased(ws_a[j] >> 12),
                     pair4_biased(ws_b[j] >> 12), xs[2 * j + 1], times16(xs[2 * j + 1]));
    }
    fold_group(st + 16 * kQ8Row, kQ8Sb, gq, u, cq, gsum[g0 + u], 2176.0f, acc0, acc2);
  }
  c0 = acc0;
  c2 = acc2;
}

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

__device__ __forceinline__ unsigned ld_acquire_shared(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(smem_u32(p)) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_shared(unsigned* p, unsigned v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(smem_u32(p)), "r"(v) : "memory");
}

// Adds part p of P of tile `tile` (lanes with t == 0: rows g in c0, g + 8 in c2) to the tile's sum, in part
// order (a warp waits for the part before its own: the same sum for any timing), and returns true with the
// totals in c0 / c2 for the last part (the slot is freed). Parts p and p + 1 are consecutive items, so other
// warps: the wait only ever points at lower items and cannot deadlock.
__device__ __forceinline__ bool tile_add(Scratch& sc, int tile, int p, int P, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, slot = tile % kTileSlots;
  if (lane == 0)
    while (ld_acquire_shared(&sc.tile_parts[slot]) != static_cast<unsigned>(p)) {
    }
  __syncwarp();
  if ((lane & 3) == 0) {
    volatile float* sum = sc.tile_sum[slot];
    if (p > 0) {
      c0 = sum[gq] + c0;
      c2 = sum[gq + 8] + c2;
    }
    if (p + 1 < P) {
      sum[gq] = c0;
      sum[gq + 8] = c2;
    }
  }
  __syncwarp();
  if (lane == 0) st_release_shared(&sc.tile_parts[slot], p + 1 < P ? static_cast<unsigned>(p + 1) : 0u);
  return p + 1 == P;
}

// Consumes this block's stages of one projection phase: warp w takes the block's items w, w + 8, ... (item =
// tile x P + part; consecutive items go to different warps, so the ring's stages are read in parallel), sums
// a tile's parts in order (tile_add) and, for the tile's last part, calls emit(row, dot of matrix 0, dot of
// matrix 1) from the lanes holding the rows. `item` counts the block's stages through the step, as the
// producer does. waited: the timing instance's warp 0 adds its SM clocks waiting for staged data (else
// nullptr).
template <typename Emit>
__device__ void consume(const MegaArgs& a, int ph, const Ring& ring, unsigned& item, const Bf16* vec,
                        const float* gsum, Scratch& sc, long long* waited, Emit&& emit) {
  const Geo g = geo(a, ph);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2;
  const int n_items = block_tiles(g) * g.P;
  for (int j = warp; j < n_items; j += kConsumerWarps) {
    const int i = j / g.P, p = j - i * g.P, k0 = p * g.kc, len = min(g.kc, g.K - k0);
    const unsigned it = item + static_cast<unsigned>(j);
    const long long t0 = waited != nullptr ? clock64() : 0;
    const char* st = wait_item(ring, it);
    if (waited != nullptr) *waited += clock64() - t0;
    float c0, c2;
    if (a.bits == 8)
      stage_dot_q8(reinterpret_cast<const unsigned char*>(st), reinterpret_cast<const uint4*>(vec), gsum, k0,
                   len, c0, c2);
    else if (a.bits == 4)
      stage_dot_q4(reinterpret_cast<const unsigned char*>(st), reinterpret_cast<const uint4*>(vec), gsum, k0,
                   len, c0, c2);
    else
      stage_dot_bf16(st, vec, k0, len, c0, c2);
    release_item(ring, it);
    if (g.P > 1 && !tile_add(sc, i, p, g.P, c0, c2)) continue;
    if ((lane & 3) == 0) {
      const int r0 = tile_row0(g, i);
      if (g.M == 2) {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, c2);
      } else {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, 0.0f);
        if (r0 + 8 + gq < g.rows) emit(r0 + 8 + gq, c2, 0.0f);
      }
    }
  }
  item += static_cast<unsigned>(n_items);
}

// (x0, x2), (x1, x3), (x4, x6), (x5, x7) of 8 activations: an 8-bit word's nibble pairs' order
// (stage_dot_q8).
__device__ __forceinline__ uint4 perm8h(uint4 v) {
  return make_uint4(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.x, v.y, 0x7632),
                    __byte_perm(v.z, v.w, 0x5410), __byte_perm(v.z, v.w, 0x7632));
}

// Stores chunk c (8 consecutive values, already bf16) of the input vector: as they are (bits 16), or in the
// codes' pair order (4-bit: qmma::perm4, 8-bit: perm8h) with the sum of each group of 64 (8 chunks: 8
// consecutive lanes, since chunk c is thread c % 256's) in gsum. Every consumer lane calls it (the shuffles);
// ok: c is a chunk.
__device__ __forceinline__ void put_chunk(int bits, bool ok, int c, uint4 u, Bf16* vec, float* gsum) {
  if (bits < 16) {
    float s = qmma::bf16x8_sum(u);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (ok && (c & 7) == 0) gsum[c >> 3] = s;
    u = bits == 4 ? qmma::perm4(u) : perm8h(u);
  }
  if (ok) reinterpret_cast<uint4*>(vec)[c] = u;
}

// vec = bf16(rms_norm(x) * w) over d, by the consumers (x read from L2: other blocks wrote it).
__device__ void norm_into(const MegaArgs& a, const void* w, Bf16* vec, float* gsum, Scratch& sc) {
  const int n8 = a.d / 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < n8; c += kConsumers) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8 + h * 4));
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
  }
  ss = warp_sum(ss);
  if (lane == 0) sc.red[warp] = ss;
  consumer_sync();
  float tot = 0.0f;
#pragma unroll
  for (int i = 0; i < kConsumerWarps; ++i) tot += sc.red[i];
  const float inv = 1.0f / sqrtf(tot / static_cast<float>(a.d) + a.eps);
  for (int base = 0; base < n8; base += kConsumers) {
    const int c = base + static_cast<int>(threadIdx.x);
    const bool ok = c < n8;
    uint32_t h[4] = {0, 0, 0, 0};
    if (ok) {
      const float4 v0 = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8));
      const float4 v1 = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8 + 4));
      const float xs[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      float y[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int j = c * 8 + i;
        const float wv =
            a.norm_bf16 ? __bfloat162float(static_cast<const Bf16*>(w)[j]) : static_cast<const float*>(w)[j];
        y[i] = xs[i] * inv * wv;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = qmma::pack_bf16x2(y[2 * i], y[2 * i + 1]);
    }
    put_chunk(a.bits, ok, c, make_uint4(h[0], h[1], h[2], h[3]), vec, gsum);
  }
  consumer_sync();  // vec complete; sc.red free
}

// vec = the n bf16 values at src (another block's output: from L2).
__device__ void load_vec(const MegaArgs& a, const void* src, int n, Bf16* vec, float* gsum) {
  const int n8 = n / 8;
  for (int base = 0; base < n8; base += kConsumers) {
    const int c = base + static_cast<int>(threadIdx.x);
    const bool ok = c < n8;
    const uint4 u = ok ? __ldcg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
    put_chunk(a.bits, ok, c, u, vec, gsum);
  }
  consumer_sync();
}

// A bf16 value another block wrote in this launch (from L2).
__device__ __forceinline__ Bf16 ldcg_bf16(const Bf16* p) {
  return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}

// Element i of the rotated (or plain) bf16 head row src[hd], rounded to bf16: the first rotary_dim dims
// rotate as rotate_half pairs (rope_math.cuh), the rest pass.
__device__ __forceinline__ Bf16 rope_elem(const MegaArgs& a, const Bf16* src, int i, int pos, bool rope) {
  const int half = a.rotary_dim / 2;
  if (!rope || i >= 2 * half) return ldcg_bf16(src + i);
  const int j = i < half ? i : i - half;
  float sn, c;
  sincosf(static_cast<float>(pos) * a.inv_freq[j], &sn, &c);
  c *= a.rope_scaling;
  sn *= a.rope_scaling;
  const float2 y =
      rotate_values(__bfloat162float(ldcg_bf16(src + j)), __bfloat162float(ldcg_bf16(src + j + half)), c, sn);
  return __float2bfloat16_rn(i < half ? y.x : y.y);
}

// kDpl head dims per lane: head_dim / 32, or 1 with the lanes past head_dim idle (head_dim 16).
template <int kDpl>
__device__ __forceinline__ void load_dims(const Bf16* p, float (&f)[kDpl]) {
  if constexpr (kDpl == 1) {
    f[0] = __bfloat162float(*p);
  } else if constexpr (kDpl == 2) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    f[0] = __uint_as_float(u << 16);
    f[1] = __uint_as_float(u & 0xffff0000u);
  } else if constexpr (kDpl == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    f[0] = __uint_as_float(u.x << 16);
    f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16);
    f[3] = __uint_as_float(u.y & 0xffff0000u);
  } else {
    float g[8];
    unpack8(*reinterpret_cast<const uint4*>(p), g);
#pragma unroll
    for (int e = 0; e < kDpl; ++e) f[e] = g[e];
  }
}

// The q heads [h0, h0 + n) merge their slices into bf16 attn (each slice's max and sum loaded once): run by
// the block that finished a kv head's last slice (every slice's partials are in L2 by then).
__device__ void merge_heads(const MegaArgs& a, int h0, int n, int n_splits) {
  const int hd = a.head_dim;
  for (int i = threadIdx.x; i < n * hd; i += kConsumers) {
    const int h = h0 + i / hd, dd = i % hd;
    const float* p = a.partials + static_cast<int64_t>(h) * n_splits * (hd + 2);
    float ms[kMegaMaxSplits], ls[kMegaMaxSplits], vs[kMegaMaxSplits];
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) {
      ms[s] = s < n_splits ? __ldcg(p + s * (hd + 2)) : -INFINITY;
      ls[s] = s < n_splits ? __ldcg(p + s * (hd + 2) + 1) : 0.0f;
      vs[s] = s < n_splits ? __ldcg(p + s * (hd + 2) + 2 + dd) : 0.0f;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) mx = fmaxf(mx, ms[s]);
    float lsum = 0.0f, v = 0.0f;
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) {
      if (ms[s] == -INFINITY) continue;
      const float w = expf(ms[s] - mx);
      lsum = fmaf(w, ls[s], lsum);
      v = fmaf(w, vs[s], v);
    }
    static_cast<Bf16*>(a.attn)[static_cast<int64_t>(h) * hd + dd] = __float2bfloat16_rn(v / lsum);
  }
}

// Phase B: the (kv head, key slice) tasks. Keys [j0, j1) of positions 0..pos; the slice holding pos uses
// the new key and value (rotated here) and writes them into the cache. Each warp takes keys j0 + warp + 8 i,
// kBatch of them loaded before any is used; per q head an online softmax per warp, the warps merged in
// shared memory in warp order, then the slice's (max, sum, unnormalised acc) per q head into `partials`.
template <int kDpl>
__device__ void attention(const MegaArgs& a, const MegaLayer& L, unsigned* done, int n_splits, char* smem,
                          Scratch& sc) {
  constexpr int kBatch = kDpl >= 8 ? 2 : kDpl >= 4 ? 4 : 8;  // keys in flight per warp (registers)
  const int hd = a.head_dim, grp = a.n_heads / a.n_kv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pos = a.positions[0], T = pos + 1, per = (T + n_splits - 1) / n_splits;
  const int64_t slot = a.slot_mapping[0];
  const bool rope = L.rope != 0;
  float* qs = reinterpret_cast<float*>(smem);  // [grp][hd]
  float* kn = qs + grp * hd;                   // [hd]
  float* vn = kn + hd;                         // [hd]
  float* ws = vn + hd;                         // [warps][grp][hd + 2]
  const Bf16* qb = static_cast<const Bf16*>(a.q);
  const Bf16* kb = static_cast<const Bf16*>(a.k);
  const Bf16* vb = static_cast<const Bf16*>(a.v);
  Bf16* kcache = static_cast<Bf16*>(L.k_cache);
  Bf16* vcache = static_cast<Bf16*>(L.v_cache);
  const int64_t row_elems = static_cast<int64_t>(a.n_kv) * hd;
  const bool lane_on = lane * kDpl < hd;
  for (int t = blockIdx.x; t < a.n_kv * n_splits; t += gridDim.x) {
    const int kvh = t / n_splits, sp = t % n_splits, j0 = sp * per, j1 = min(T, j0 + per);
    const bool has_new = j0 <= pos && pos < j1;
    for (int i = threadIdx.x; i < grp * hd; i += kConsumers)
      qs[i] = __bfloat162float(
          rope_elem(a, qb + static_cast<int64_t>(kvh * grp + i / hd) * hd, i % hd, pos, rope));
    if (has_new) {
      for (int i = threadIdx.x; i < 2 * hd; i += kConsumers) {
        const int dd = i % hd;
        const int64_t off = static_cast<int64_t>(kvh) * hd;
        const Bf16 b = i < hd ? rope_elem(a, kb + off, dd, pos, rope) : ldcg_bf16(vb + off + dd);
        (i < hd ? kn : vn)[dd] = __bfloat162float(b);
        if (slot >= 0) (i < hd ? kcache : vcache)[slot * row_elems + off + dd] = b;
      }
    }
    consumer_sync();
    float m[8], l[8], acc[8][kDpl];
#pragma unroll
    for (int h = 0; h < 8; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.0f;
#pragma unroll
      for (int e = 0; e < kDpl; ++e) acc[h][e] = 0.0f;
    }
    for (int jb = j0 + warp; jb < j1; jb += kBatch * kConsumerWarps) {
      float kf[kBatch][kDpl], vf[kBatch][kDpl];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = jb + b * kConsumerWarps;
        if (j < j1 && j != pos && lane_on) {
          const int64_t sl =
              static_cast<int64_t>(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size;
          const int64_t o = sl * row_elems + static_cast<int64_t>(kvh) * hd + lane * kDpl;
          load_dims<kDpl>(kcache + o, kf[b]);
          load_dims<kDpl>(vcache + o, vf[b]);
        } else {
#pragma unroll
          for (int e = 0; e < kDpl; ++e) {
            kf[b][e] = j == pos && lane_on ? kn[lane * kDpl + e] : 0.0f;
            vf[b][e] = j == pos && lane_on ? vn[lane * kDpl + e] : 0.0f;
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (jb + b * kConsumerWarps >= j1) break;
#pragma unroll
        for (int h = 0; h < 8; ++h) {
          if (h >= grp) break;
          float sc = 0.0f;
#pragma unroll
          for (int e = 0; e < kDpl; ++e) sc = lane_on ? fmaf(qs[h * hd + lane * kDpl + e], kf[b][e], sc) : sc;
          sc = warp_sum(sc) * a.scale;
          const float mn = fmaxf(m[h], sc), corr = expf(m[h] - mn), p = expf(sc - mn);
          l[h] = fmaf(l[h], corr, p);
#pragma unroll
          for (int e = 0; e < kDpl; ++e) acc[h][e] = fmaf(acc[h][e], corr, p * vf[b][e]);
          m[h] = mn;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 8; ++h) {
      if (h >= grp) break;
      float* w = ws + (warp * grp + h) * (hd + 2);
      if (lane == 0) {
        w[0] = m[h];
        w[1] = l[h];
      }
#pragma unroll
      for (int e = 0; e < kDpl; ++e)
        if (lane_on) w[2 + lane * kDpl + e] = acc[h][e];
    }
    consumer_sync();
    for (int i = threadIdx.x; i < grp * (hd + 2); i += kConsumers) {
      const int h = i / (hd + 2), c = i % (hd + 2);
      float mx = -INFINITY;
      for (int w = 0; w < kConsumerWarps; ++w) mx = fmaxf(mx, ws[(w * grp + h) * (hd + 2)]);
      float v = 0.0f;
      if (c == 0) {
        v = mx;
      } else if (mx != -INFINITY) {
        for (int w = 0; w < kConsumerWarps; ++w) {
          const float* r = ws + (w * grp + h) * (hd + 2);
          if (r[0] != -INFINITY) v = fmaf(expf(r[0] - mx), r[c], v);
        }
      }
      a.partials[(static_cast<int64_t>(kvh * grp + h) * n_splits + sp) * (hd + 2) + c] = v;
    }
    consumer_sync();  // this block's partials written; qs / ws free
    if (threadIdx.x == 0) {
      __threadfence();
      sc.last = atomicAdd(done + kvh, 1u) == static_cast<unsigned>(n_splits - 1);
    }
    consumer_sync();
    if (sc.last) merge_heads(a, kvh * grp, grp, n_splits);  // every slice of this kv head is in
  }
}

template <int kDpl, bool kTiming>
__global__ void __launch_bounds__(kThreads, 1)
    decode_mega_kernel(const __grid_constant__ MegaArgs a, int n_stages, int n_splits, int vec_bytes) {
  extern __shared__ __align__(128) char smem[];
  Ring ring{smem, nullptr, nullptr, nullptr, n_stages};
  Bf16* vec = reinterpret_cast<Bf16*>(smem + static_cast<size_t>(n_stages) * kStageBytes);
  float* gsum = reinterpret_cast<float*>(vec + vec_elems(a));  // 4-bit: the group sums of vec
  Scratch& sc = *reinterpret_cast<Scratch*>(smem + static_cast<size_t>(n_stages) * kStageBytes + vec_bytes);
  ring.full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&sc) + sizeof(Scratch));
  ring.empty = ring.full + n_stages;
  ring.seq = reinterpret_cast<unsigned*>(ring.empty + n_stages);
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) {
      mbar_init(&ring.full[s], 1);
      mbar_init(&ring.empty[s], 1);  // the consuming warp
      ring.seq[s] = ~0u;
    }
    for (unsigned& n : sc.tile_parts) n = 0;
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    produce<kTiming>(a, ring);
    return;
  }
  unsigned* sync = counters_of(a);
  unsigned arrivals = 0;
  const bool t0 = kTiming && threadIdx.x == 0;
  // The grid barrier ending a phase: slot_done records the block's consumers done, slot_done + 1 the barrier
  // passed (timing instance).
  auto barrier = [&](int l, int slot_done) {
    if (a.debug & 2) return consumer_sync();
    grid_arrive(sync);
    if (t0) record(a, l, slot_done, global_ns());
    ++arrivals;
    grid_wait(sync, arrivals * gridDim.x);
    if (t0) record(a, l, slot_done + 1, global_ns());
  };
  long long waited[4] = {0, 0, 0, 0};
  auto wait_acc = [&](int ph) -> long long* { return kTiming && threadIdx.x < 32 ? &waited[ph] : nullptr; };
  unsigned item = 0;
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    if (t0) record(a, l, kStart, global_ns());
    norm_into(a, L.in_norm, vec, gsum, sc);
    if (t0) record(a, l, kNorm1, global_ns());
    consume(a, kQkv, ring, item, vec, gsum, sc, wait_acc(kQkv), [&](int r, float v, float) {
      Bf16* dst = r < qd         ? static_cast<Bf16*>(a.q) + r
                  : r < qd + kvd ? static_cast<Bf16*>(a.k) + (r - qd)
                                 : static_cast<Bf16*>(a.v) + (r - qd - kvd);
      *dst = __float2bfloat16_rn(v);
    });
    barrier(l, kQkvDone);
    if (!(a.debug & 1)) {
      attention<kDpl>(a, L, sync + 64 + l * a.n_heads, n_splits, reinterpret_cast<char*>(vec), sc);
      barrier(l, kAttnDone);
    }
    load_vec(a, a.attn, qd, vec, gsum);
    if (t0) record(a, l, kOLoaded, global_ns());
    consume(a, kO, ring, item, vec, gsum, sc, wait_acc(kO),
            [&](int r, float v, float) { a.x[r] = fmaf(bf(v), a.residual, __ldcg(a.x + r)); });
    barrier(l, kODone);
    norm_into(a, L.post_norm, vec, gsum, sc);
    if (t0) record(a, l, kNorm2, global_ns());
    consume(a, kGateUp, ring, item, vec, gsum, sc, wait_acc(kGateUp), [&](int r, float g, float u) {
      static_cast<Bf16*>(a.act)[r] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
    });
    barrier(l, kGuDone);
    load_vec(a, a.act, a.d_ff, vec, gsum);
    if (t0) record(a, l, kActLoaded, global_ns());
    consume(a, kDown, ring, item, vec, gsum, sc, wait_acc(kDown),
            [&](int r, float v, float) { a.x[r] = fmaf(bf(v), a.residual, __ldcg(a.x + r)); });
    if (l + 1 < a.n_layers) {
      barrier(l, kDownDone);
    } else if (t0) {
      record(a, l, kDownDone, global_ns());
    }
    if (t0)
      for (int ph = 0; ph < 4; ++ph)
        record(a, l, kWaitData + ph, static_cast<unsigned long long>(waited[ph]));
    if constexpr (kTiming)
      for (long long& w : waited) w = 0;
  }
}

// The input vector, its group sums (4-bit), or the attention phase's scratch: they take turns.
int vec_bytes_of(const MegaArgs& a) {
  const int n = vec_elems(a);
  const int grp = a.n_heads / a.n_kv;
  const int attn = (grp * a.head_dim + 2 * a.head_dim + kConsumerWarps * grp * (a.head_dim + 2)) * 4;
  return (std::max(n * 2 + (n / 64 + 1) * 4, attn) + 127) / 128 * 128;
}

int splits_of(const MegaArgs& a) {
  return std::clamp(sm_count() / std::max(a.n_kv, 1), 1, kMegaMaxSplits);
}

using Kernel = void (*)(MegaArgs, int, int, int);

template <bool kTiming>
Kernel kernel_of(int head_dim) {
  if (head_dim == 16) return decode_mega_kernel<1, kTiming>;
  if (head_dim % 32 != 0) return nullptr;
  switch (head_dim / 32) {
    case 1:
      return decode_mega_kernel<1, kTiming>;
    case 2:
      return decode_mega_kernel<2, kTiming>;
    case 4:
      return decode_mega_kernel<4, kTiming>;
    case 8:
      return decode_mega_kernel<8, kTiming>;
    default:
      return nullptr;
  }
}
Kernel kernel_of(const MegaArgs& a) {
  return a.timing != nullptr ? kernel_of<true>(a.head_dim) : kernel_of<false>(a.head_dim);
}

// Dynamic shared memory for n stages.
size_t smem_bytes(const MegaArgs& a, int n) {
  return static_cast<size_t>(n) * kStageBytes + vec_bytes_of(a) + sizeof(Scratch) + 2 * n * sizeof(uint64_t) +
         n * sizeof(unsigned);
}

int stages_of(const MegaArgs& a) {
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()),
             "decode_mega", [] { return std::string("shared memory limit"); });
  int n = kMaxStages;
  while (n > 2 && smem_bytes(a, n) > static_cast<size_t>(optin)) --n;
  return smem_bytes(a, n) <= static_cast<size_t>(optin) ? n : 0;
}

// The timing record (mega_timing_buffer): one device buffer for the process, written to a file at exit.
struct TimingRecord {
  unsigned long long* dev = nullptr;
  int64_t words = 0, grid = 0, n_layers = 0;
  std::string path;
};
TimingRecord& timing_record() {
  static TimingRecord r;
  return r;
}
// Writes the last step's record: four int64 (grid, layers, slots per layer, SM clock kHz), then the words.
void write_timing() {
  TimingRecord& r = timing_record();
  if (r.dev == nullptr || cudaDeviceSynchronize() != cudaSuccess) return;
  std::vector<unsigned long long> host(static_cast<size_t>(r.words));
  if (cudaMemcpy(host.data(), r.dev, host.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, current_device());
  const int64_t head[4] = {r.grid, r.n_layers, kMegaTimingSlots, khz};
  if (FILE* f = std::fopen(r.path.c_str(), "wb")) {
    std::fwrite(head, sizeof head, 1, f);
    std::fwrite(host.data(), 8, host.size(), f);
    std::fclose(f);
  }
}

}  // namespace

unsigned long long* mega_timing_buffer(const MegaArgs& a, const std::string& path) {
  TimingRecord& r = timing_record();
  const int64_t words = static_cast<int64_t>(sm_count()) * a.n_layers * kMegaTimingSlots;
  if (r.dev == nullptr) {
    check_cuda(cudaMalloc(&r.dev, static_cast<size_t>(words) * 8), "decode_mega",
               [] { return std::string("timing record"); });
    check_cuda(cudaMemset(r.dev, 0, static_cast<size_t>(words) * 8), "decode_mega",
               [] { return std::string("timing record"); });
    r.words = words;
    r.path = path;
    std::atexit(write_timing);
  }
  if (words > r.words) return nullptr;  // a larger model later in the process: not recorded
  r.grid = sm_count();
  r.n_layers = a.n_layers;
  return r.dev;
}

bool mega_supported(const MegaArgs& a) {
  int major = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()),
             "decode_mega", [] { return std::string("compute capability"); });
  const int grp = a.n_kv > 0 ? a.n_heads / a.n_kv : 0;
  return major >= 9 && kernel_of(a) != nullptr && grp >= 1 && grp <= 8 && a.n_heads % a.n_kv == 0 &&
         a.n_layers >= 1 && a.n_layers <= kMegaMaxLayers && a.rotary_dim <= a.head_dim &&
         a.rotary_dim <= kMegaMaxRotary && a.d % 16 == 0 && a.d_ff % 16 == 0 &&
         (a.n_heads * a.head_dim) % 16 == 0 && stages_of(a) >= 4;
}

void decode_mega(void* stream, const MegaArgs& a) {
  const char* op = "decode_mega";
  auto detail = [&] {
    return strfmt("%d layers, d %d, heads %d/%d x %d, d_ff %d", a.n_layers, a.d, a.n_heads, a.n_kv,
                  a.head_dim, a.d_ff);
  };
  const Kernel k = kernel_of(a);
  const int n = stages_of(a);
  if (k == nullptr || n < 4) throw Error("cuda", std::string(op) + ": unsupported shape: " + detail());
  const size_t bytes = smem_bytes(a, n);
  check_cuda(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
             op, detail);
  auto* s = static_cast<cudaStream_t>(stream);
  unsigned* sync = counters_of(a);
  check_cuda(cudaMemsetAsync(sync, 0, sizeof(unsigned) * mega_counters(a.n_heads), s), op, detail);
  k<<<sm_count(), kThreads, bytes, s>>>(a, n, splits_of(a), vec_bytes_of(a));
  check_launch(op, detail);
}

}  // namespace bunsen::kernels::cuda
