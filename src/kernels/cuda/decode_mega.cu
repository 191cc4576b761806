// The persistent batch-1 decode step (decode_mega.h): one block per SM runs every layer of a llama-like
// model for one token. Why: at batch 1 the per-op kernels leave the memory idle between launches (each
// phase after the q/k/v GEMV is a dependent round trip of 2-3.5 us, docs/PERFORMANCE.md), while the
// weights, ~all of the bytes, depend on nothing. Here a producer warp per block copies the block's weight
// rows of every projection of every layer, and each layer's cached keys and values for the block's attention
// tasks, in the order the block consumes them, into a ring of 19 KB stages (cp.async.bulk onto a per-stage
// mbarrier), and only stops when the ring is full; the 8 consumer warps wait for the grid-wide barrier of
// each phase (q/k/v -> attention -> o -> gate/up -> down) and find the next phase's weights already landed.
// Phases of a layer (tasks dealt round-robin over the blocks, blockIdx.x first):
//   A q/k/v: h = bf16(rms_norm(x) * in_norm) computed by every block into shared memory; rows of [q; k; v]
//     -> bf16 q/k/v buffers.
//   B attention: (kv head, key slice) tasks on the tensor cores (q heads as MMA rows); the old keys and
//   values
//     came through the ring during phase A (they depend on nothing this step computes); q and the new key
//     rotated (RoPE table of the step), the new key and value written into the paged cache by the slice that
//     holds the position; per q head the slice's (max, sum, unnormalised acc) into `partials`.
//     The block that finishes a kv head's last slice merges its q heads' slices into bf16 attn (a counter
//     per layer and kv head), so no grid barrier separates the slices from the merge.
//   C o-projection: x[row] += bf16(o . attn) * residual (each row owned by one task).
//   D gate/up: h = bf16(rms_norm(x) * post_norm); act = bf16(silu(gate . h) * (up . h)).
//   E down: x[row] += bf16(down . act) * residual.
// Work split: a projection is cut into tiles of 16 rows (gate/up: 8 gate rows and the same 8 up rows) over
// K in parts of kBfCols columns (bf16) or kQ4Codes / kQ8Codes codes, one ring stage per (tile, part); or,
// where K allows (seg_plan, MegaArgs::segs), tiles of 16 / S rows whose parts are S segments of one row, so
// each row is one longer copy; every form runs on the tensor cores (mma.m16n8k16). Warp w of a block takes
// the block's stages w, w + 8, ..., so consecutive stages are read by different warps at once; a tile's parts
// meet in shared memory in part order (tile_add), and the warp adding the last part emits the rows. No stage
// needs a block synchronisation. Every output's summation order depends on the shapes and the grid size only,
// not on timing (not bit-identical to the per-op kernels: different orders). Invariants: grid = SM count, one
// block per SM (the shared-memory ring enforces it), so every block is resident and the spin barriers cannot
// deadlock; data another block wrote in this launch is read with ld.global.cg (L2), never through L1 or the
// non-coherent path; the producer never waits on a phase barrier (weights are read-only, and the cached keys
// it copies were written by earlier steps), only on its ring's free slots.
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
#include "kernels/cuda/decode_mega_stages.cuh"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda {
namespace {
using namespace mega;  // the stage layouts and their dot products (decode_mega_stages.cuh)

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers + 32;  // + the producer warp
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
struct alignas(16) Scratch {  // a multiple of 16 bytes: the ring's mbarriers follow it
  float red[kConsumerWarps];  // block reductions
  int last;                   // attention: this block finished a kv head's last slice
  int pad[kConsumerWarps - 1];
  float tile_sum[kTileSlots][16];   // a tile's rows summed over its parts so far
  unsigned tile_parts[kTileSlots];  // parts in tile_sum (0: the slot is free)
  // RoPE at this step's position (the same for every layer): cos of pair j at [j], sin at [kMegaMaxRotary / 2
  // + j], both times rope_scaling.
  float rope_cs[kMegaMaxRotary];
};
static_assert(sizeof(Scratch) % 16 == 0, "the ring's mbarriers after Scratch stay aligned");

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

// The geometry of one projection phase (the producer and the consumers derive the same one): tiles of R
// stage rows (gated: R / 2 gate rows, then the same R / 2 up rows: nr output rows) over K, in P parts of kc
// columns (bf16) or codes (quantized); one stage per (tile, part), tile-major. R = 16 / S for S segments per
// stage row (seg_plan: S = 1 is 16 rows of one kBfCols / kQ4Codes / kQ8Codes part; S > 1 the segmented form).
struct Geo {
  int M, rows, K, nr, P, kc, ntiles, S, sl, R, pitch, sbp;
};

enum Phase { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };

__device__ __forceinline__ Geo geo(const MegaArgs& a, int ph) {
  Geo g;
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  g.M = ph == kGateUp ? 2 : 1;
  g.rows = ph == kQkv ? qd + 2 * kvd : ph == kGateUp ? a.d_ff : a.d;
  g.K = ph == kQkv || ph == kGateUp ? a.d : ph == kO ? qd : a.d_ff;
  seg_plan(g.K, a.bits, a.segs, g.S, g.sl, g.P);
  g.kc = g.S * g.sl;
  g.R = 16 / g.S;
  g.nr = g.M == 2 ? g.R / 2 : g.R;
  g.ntiles = (g.rows + g.nr - 1) / g.nr;
  g.pitch = seg_pitch(a.bits, g.S, g.sl);
  g.sbp = seg_sb_pitch(a.bits, g.S, g.sl);
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

// One (kv head, key slice) task of the attention phase: task t is kv head t / n_splits, slice t % n_splits,
// keys [j0, j0 + per) of positions 0..pos with per a multiple of kAttnKeys (slices past the keys are empty).
// Its old keys (< pos: in the cache before this step) come through the ring, kAttnKeys per stage; the new one
// (pos) is computed this step.
struct Slice {
  int kvh, sp, j0, n_old;
  bool has_new;
};
__device__ __forceinline__ Slice slice_of(int t, int n_splits, int pos) {
  const int T = pos + 1, per = ((T + n_splits - 1) / n_splits + kAttnKeys - 1) / kAttnKeys * kAttnKeys;
  Slice s;
  s.kvh = t / n_splits;
  s.sp = t % n_splits;
  s.j0 = s.sp * per;
  s.n_old = max(0, min(pos, s.j0 + per) - s.j0);
  s.has_new = s.j0 <= pos && pos < s.j0 + per;
  return s;
}

// Elements of the input vector's shared copy: the widest of d, n_heads * head_dim and d_ff (each % 8 == 0).
__host__ __device__ __forceinline__ int vec_elems(const MegaArgs& a) {
  const int qd = a.n_heads * a.head_dim, n = a.d > qd ? a.d : qd;
  return n > a.d_ff ? n : a.d_ff;
}

// The 8-bit input vector's scale-backs 2^-s per group, after its group sums (vec_bytes_of).
__device__ __forceinline__ float* gback_of(const MegaArgs& a, float* gsum) {
  return gsum + vec_elems(a) / 64 + 1;
}
__device__ __forceinline__ const float* gback_of(const MegaArgs& a, const float* gsum) {
  return gsum + vec_elems(a) / 64 + 1;
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
// (kWaitFree + phase), the %globaltimer when it issued the phase's last stage (kIssued + phase), and warp 0's
// SM clocks waiting for the attention phase's staged keys (kWaitKeys).
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
  kWaitKeys = kIssued + 4,  // warp 0's SM clocks waiting for the attention phase's staged keys
  kSlotsUsed
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

// The producer's lane 0 waits for the ring's slot of `item` to be free (SM clocks added to waited) and arms
// its barrier for `bytes`; returns the stage once the warp's lanes may issue their copies onto
// ring.full[item % n].
template <bool kTiming>
__device__ __forceinline__ char* arm_stage(const Ring& ring, unsigned item, unsigned bytes,
                                           long long& waited) {
  const unsigned n = static_cast<unsigned>(ring.n), stage = item % n;
  if ((threadIdx.x & 31) == 0) {
    long long t0 = 0;
    if constexpr (kTiming) t0 = clock64();
    mbar_wait(&ring.empty[stage], ((item / n) & 1u) ^ 1u);
    if constexpr (kTiming) waited += clock64() - t0;
    mbar_arrive_expect_tx(&ring.full[stage], bytes);
    *reinterpret_cast<volatile unsigned*>(ring.seq + stage) = item;
  }
  __syncwarp();
  fence_proxy_async_smem();  // the lanes' earlier cp.async writes before new bulk copies
  return ring.base + static_cast<size_t>(stage) * kStageBytes;
}

// Whether a row of `bytes` bytes reaches its stage by the TMA (one bulk copy onto the stage's transaction
// count) or by the producer's lanes as 16-byte cp.async (the LSU), per MegaArgs::copy_mode: 0 rows under 256
// bytes by the LSU (quantized scales and biases: the TMA takes ~80 ns per copy whatever its size, so 32 tiny
// copies per stage capped the quantized streams near 1.2 TB/s on the H100), 1 every row by the LSU, 2 every
// row by the TMA.
__device__ __forceinline__ bool by_tma(const MegaArgs& a, unsigned bytes) {
  return a.copy_mode == 2 || (a.copy_mode == 0 && bytes >= 256);
}

// Copies n rows of `bytes` (a multiple of 16) into a stage, row i from src(i) to dst + i * pitch (by_tma).
template <typename Src>
__device__ __forceinline__ void copy_rows(const MegaArgs& a, char* dst, int pitch, int n, unsigned bytes,
                                          uint64_t* bar, Src&& src) {
  const int lane = threadIdx.x & 31;
  if (by_tma(a, bytes)) {
    for (int i = lane; i < n; i += 32) bulk_copy_g2s(dst + i * pitch, src(i), bytes, bar);
  } else {
    const int cpr = static_cast<int>(bytes / 16);
    for (int c = lane; c < n * cpr; c += 32) {
      const int i = c / cpr, j = c - i * cpr;
      cp_async_16(dst + i * pitch + j * 16, static_cast<const char*>(src(i)) + j * 16);
    }
  }
}

// Every producer lane's arrival on the stage's full barrier once its cp.async copies have landed (the
// barrier counts 1 + 32 arrivals: lane 0's expect_tx and these).
__device__ __forceinline__ void arrive_copies(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#else
  __trap();
#endif
}

// The attention stages of layer L for this block's tasks (slice_of), kAttnKeys old keys each: stage rows
// 0-15 the keys' K rows, 16-31 their V rows, from the paged cache (written by earlier steps: the copies
// depend on nothing this step computes, so they land while the q/k/v phase runs).
template <bool kTiming>
__device__ void produce_keys(const MegaArgs& a, const MegaLayer& L, const Ring& ring, unsigned& item,
                             int n_splits, long long& waited) {
  const int hd = a.head_dim, pos = a.positions[0], row = attn_row_bytes(hd);
  const int64_t row_elems = static_cast<int64_t>(a.n_kv) * hd;
  for (int t = blockIdx.x; t < a.n_kv * n_splits; t += gridDim.x) {
    const Slice s = slice_of(t, n_splits, pos);
    for (int k0 = 0; k0 < s.n_old; k0 += kAttnKeys, ++item) {
      const unsigned bytes = static_cast<unsigned>(hd * 2);
      char* dst = arm_stage<kTiming>(ring, item, by_tma(a, bytes) ? 2u * kAttnKeys * bytes : 0u, waited);
      uint64_t* full = &ring.full[item % static_cast<unsigned>(ring.n)];
      copy_rows(a, dst, row, 2 * kAttnKeys, bytes, full, [&](int i) {
        const int j = s.j0 + min(k0 + (i & (kAttnKeys - 1)), s.n_old - 1);
        const int64_t sl =
            static_cast<int64_t>(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size;
        return static_cast<const void*>(static_cast<const Bf16*>(i < kAttnKeys ? L.k_cache : L.v_cache) +
                                        sl * row_elems + s.kvh * hd);
      });
      arrive_copies(full);
    }
  }
}

// The producer warp: every stage of every projection this block consumes, in consumption order (the layer's
// attention keys after its q/k/v rows). Lane 0 waits for the stage's slot and arms its barrier, then the
// lanes issue the stage's copies: the R tile rows' part (quantized: codes, scales and biases) and arrive
// once their cp.async copies land. Rows past the matrix re-read its last row (their outputs are dropped).
// The usual stage (a full part, rows by the TMA) takes a fixed share per lane: code row `lane` (lane < R),
// then scale / bias row `lane` (lane < 2R, by the TMA) or up to kSbChunks 16-byte chunks of them (cp.async);
// the shares are set once per phase and their source rows once per tile, so a stage costs each lane a few
// instructions (per-chunk divisions and row lookups had capped the quantized streams near 1.4 TB/s: the
// consumers spun waiting for stages the producer had not yet armed). Other stages (a short last part,
// copy_mode 1) take copy_rows.
constexpr int kSbChunks = 4;  // 2R rows x S sl / 512 chunks = sl / 16 <= 32 x 4 (seg_plan: sl <= kQ4Codes)
template <bool kTiming>
__device__ void produce(const MegaArgs& a, const Ring& ring, int n_splits) {
  const int lane = threadIdx.x & 31;
  unsigned item = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    for (int ph = 0; ph < 4; ++ph) {
      const Geo g = geo(a, ph);
      const int n_i = block_tiles(g);
      long long waited = 0;
      const unsigned full_row = static_cast<unsigned>(a.bits < 16 ? g.kc * a.bits / 8 : g.kc * 2);
      const unsigned full_sb = static_cast<unsigned>(g.kc / 32);
      const bool sb_tma = by_tma(a, full_sb), rows_tma = by_tma(a, full_row);
      // This lane's scale / bias chunks (cp.async): chunk c = lane + 32 q is row c / cpr, bytes 16 (c % cpr).
      const int cpr = static_cast<int>(full_sb / 16);
      int ch_row[kSbChunks], ch_off[kSbChunks];
#pragma unroll
      for (int q = 0; q < kSbChunks; ++q) {
        const int c = lane + 32 * q;
        ch_row[q] = a.bits < 16 && !sb_tma && c < 2 * g.R * cpr ? c / cpr : -1;
        ch_off[q] = ch_row[q] >= 0 ? (c - ch_row[q] * cpr) * 16 : 0;
      }
      for (int i = 0; i < n_i; ++i) {
        const int r0 = tile_row0(g, i);
        // Tile row r's matrix (w) and its row in it (gated: nr gate rows, then the same nr up rows).
        auto row_of = [&](int r, int& w) {
          const int m = g.M == 2 ? r / g.nr : 0;
          int row = min(r0 + r - m * g.nr, g.rows - 1);
          w = matrix_of(a, ph, m, row);
          return static_cast<int64_t>(row);
        };
        // Scale (i < R) or bias row i's first group of the tile's rows.
        auto sb_row = [&](int i) {
          int w;
          const int64_t row = row_of(i & (g.R - 1), w);
          return reinterpret_cast<const char*>(static_cast<const Bf16*>(i < g.R ? L.sc[w] : L.bi[w]) +
                                               row * (g.K / 64));
        };
        const char* my_row = nullptr;  // code row `lane`, from column 0
        const char* my_sb = nullptr;   // (TMA) scale / bias row `lane`
        const char* my_ch[kSbChunks];  // (cp.async) the chunks' rows
        if (lane < g.R) {
          int w;
          const int64_t row = row_of(lane, w);
          my_row = static_cast<const char*>(L.w[w]) + row * g.K * a.bits / 8;
        }
        if (a.bits < 16 && sb_tma && lane < 2 * g.R) my_sb = sb_row(lane);
#pragma unroll
        for (int q = 0; q < kSbChunks; ++q)
          my_ch[q] = ch_row[q] >= 0 ? sb_row(ch_row[q]) + ch_off[q] : nullptr;
        for (int p = 0; p < g.P; ++p, ++item) {
          const int len = min(g.kc, g.K - p * g.kc);
          const int64_t k0 = static_cast<int64_t>(p) * g.kc;
          // Rows of codes (bf16: of weights), then (quantized) R rows of scales and R of biases.
          const unsigned row_bytes = static_cast<unsigned>(a.bits < 16 ? len * a.bits / 8 : len * 2);
          const unsigned sb_bytes = static_cast<unsigned>(len / 32);
          const unsigned tx = (by_tma(a, row_bytes) ? static_cast<unsigned>(g.R) * row_bytes : 0u) +
                              (a.bits < 16 && by_tma(a, sb_bytes) ? 2u * g.R * sb_bytes : 0u);
          char* dst = arm_stage<kTiming>(ring, item, tx, waited);
          uint64_t* full = &ring.full[item % static_cast<unsigned>(ring.n)];
          char* dst_sb = dst + g.R * g.pitch;
          if (len == g.kc && rows_tma) {
            if (lane < g.R) bulk_copy_g2s(dst + lane * g.pitch, my_row + k0 * a.bits / 8, row_bytes, full);
            if (my_sb != nullptr) bulk_copy_g2s(dst_sb + lane * g.sbp, my_sb + k0 / 32, sb_bytes, full);
#pragma unroll
            for (int q = 0; q < kSbChunks; ++q)
              if (my_ch[q] != nullptr)
                cp_async_16(dst_sb + ch_row[q] * g.sbp + ch_off[q], my_ch[q] + k0 / 32);
          } else {
            copy_rows(a, dst, g.pitch, g.R, row_bytes, full, [&](int r) {
              int w;
              const int64_t row = row_of(r, w);
              return static_cast<const void*>(static_cast<const unsigned char*>(L.w[w]) +
                                              (row * g.K + k0) * a.bits / 8);
            });
            if (a.bits < 16)
              copy_rows(a, dst_sb, g.sbp, 2 * g.R, sb_bytes, full,
                        [&](int i) { return static_cast<const void*>(sb_row(i) + k0 / 32); });
          }
          arrive_copies(full);
        }
      }
      if (ph == kQkv && !(a.debug & 1)) produce_keys<kTiming>(a, L, ring, item, n_splits, waited);
      if constexpr (kTiming) {
        if (lane == 0) {
          record(a, l, kWaitFree + ph, static_cast<unsigned long long>(waited));
          record(a, l, kIssued + ph, global_ns());
        }
      }
    }
  }
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

// One stage's dots in the phase's form (form = S * 32 + bits; Geo): lanes t == 0 return rows g (x) and g + 8
// (y) of the tile (gated: gate row g, its up row).
__device__ __forceinline__ float2 stage_dot(int form, const char* st, int pitch, int sbp, const Bf16* vec,
                                            const float* gsum, const float* gback, int k0, int len) {
  const auto* sq = reinterpret_cast<const unsigned char*>(st);
  const auto* xv = reinterpret_cast<const uint4*>(vec);
  float c0, c2;
  switch (form) {
    case 32 + 8:
      stage_dot_q<8>(sq, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 32 + 4:
      stage_dot_q<4>(sq, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 32 + 16:
      stage_dot_bf16(st, vec, k0, len, c0, c2);
      break;
    case 64 + 8:
      stage_dot_q_seg<2, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 128 + 8:
      stage_dot_q_seg<4, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 256 + 8:
      stage_dot_q_seg<8, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 64 + 4:
      stage_dot_q_seg<2, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 128 + 4:
      stage_dot_q_seg<4, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 256 + 4:
      stage_dot_q_seg<8, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 64 + 16:
      stage_dot_bf16_seg<2>(st, pitch, vec, k0, len, c0, c2);
      break;
    case 128 + 16:
      stage_dot_bf16_seg<4>(st, pitch, vec, k0, len, c0, c2);
      break;
    default:
      stage_dot_bf16_seg<8>(st, pitch, vec, k0, len, c0, c2);
      break;
  }
  return make_float2(c0, c2);
}

// Consumes this block's stages of one projection phase: warp w takes the block's items w, w + 8, ... (item =
// tile x P + part; consecutive items go to different warps, so the ring's stages are read in parallel), sums
// a tile's parts in order (tile_add) and, for the tile's last part, writes the rows from the lanes holding
// them (q/k/v: bf16 q, k, v; o and down: the residual add into x; gate/up: act = silu(gate) * up). `item`:
// the block's first stage of the phase (stages count through the step, as the producer counts them);
// returns the phase's stage count. waited: the timing instance's warp 0 adds its SM clocks waiting for
// staged data (else nullptr). The kernel calls it from one site, so each kernel instance holds one inlined
// copy of the twelve stage forms (inlined per phase they grew the binaries by ~9 MB compressed; a non-inlined
// consume, its shared-memory pointers generic, measured 6-20 % slower).
__device__ __forceinline__ unsigned consume(const MegaArgs& a, int ph, const Ring& ring, unsigned item,
                                            const Bf16* vec, const float* gsum, Scratch& sc,
                                            long long* waited) {
  const Geo g = geo(a, ph);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2;
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  const int n_items = block_tiles(g) * g.P;
  auto emit = [&](int r, float v, float u) {
    if (ph == kQkv) {
      Bf16* dst = r < qd         ? static_cast<Bf16*>(a.q) + r
                  : r < qd + kvd ? static_cast<Bf16*>(a.k) + (r - qd)
                                 : static_cast<Bf16*>(a.v) + (r - qd - kvd);
      *dst = __float2bfloat16_rn(v);
    } else if (ph == kGateUp) {
      static_cast<Bf16*>(a.act)[r] = __float2bfloat16_rn(v / (1.0f + expf(-v)) * u);
    } else {
      a.x[r] = fmaf(bf(v), a.residual, __ldcg(a.x + r));
    }
  };
  for (int j = warp; j < n_items; j += kConsumerWarps) {
    const int i = j / g.P, p = j - i * g.P, k0 = p * g.kc, len = min(g.kc, g.K - k0);
    const unsigned it = item + static_cast<unsigned>(j);
    const long long t0 = waited != nullptr ? clock64() : 0;
    const char* st = wait_item(ring, it);
    if (waited != nullptr) *waited += clock64() - t0;
    const float2 c = stage_dot(g.S * 32 + a.bits, st, g.pitch, g.sbp, vec, gsum, gback_of(a, gsum), k0,
                               g.S == 1 ? len : g.sl);
    float c0 = c.x, c2 = c.y;
    release_item(ring, it);
    if (g.P > 1 && !tile_add(sc, i, p, g.P, c0, c2)) continue;
    // Lanes t == 0 hold rows gq (c0) and gq + 8 (c2) of the tile (gated: gate row gq in c0, its up row in
    // c2).
    if ((lane & 3) == 0 && gq < g.nr) {
      const int r0 = tile_row0(g, i);
      if (g.M == 2) {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, c2);
      } else {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, 0.0f);
        if (gq + 8 < g.nr && r0 + 8 + gq < g.rows) emit(r0 + 8 + gq, c2, 0.0f);
      }
    }
  }
  return static_cast<unsigned>(n_items);
}

// Stores chunk c (8 consecutive values, already bf16) of the input vector: as they are (bits 16), in the
// 4-bit codes' pair order (qmma::perm4), or (8-bit) as f16 scaled by the group's 2^s (qmma::group_shift) with
// 2^-s in gback; quantized: the sum of each group of 64 (8 chunks: 8 consecutive lanes, since chunk c is
// thread c % 256's) in gsum. Every consumer lane calls it (the shuffles); ok: c is a chunk.
__device__ __forceinline__ void put_chunk(int bits, bool ok, int c, uint4 u, Bf16* vec, float* gsum,
                                          float* gback) {
  if (bits < 16) {
    float f[8], s, mx;
    qmma::bf16x8_group_stats<8>(u, f, s, mx);
    if (bits == 8) {
      const int sh = qmma::group_shift(mx);
      u = qmma::half8_scaled(f, qmma::pow2(sh));
      if (ok && (c & 7) == 0) gback[c >> 3] = qmma::pow2(-sh);
    } else {
      u = qmma::perm4(u);
    }
    if (ok && (c & 7) == 0) gsum[c >> 3] = s;
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
    put_chunk(a.bits, ok, c, make_uint4(h[0], h[1], h[2], h[3]), vec, gsum, gback_of(a, gsum));
  }
  consumer_sync();  // vec complete; sc.red free
}

// vec = the n bf16 values at src (another block's output: from L2). Each thread issues up to kVecBatch chunk
// loads before it stores any (put_chunk's shared-memory stores would otherwise order each next L2 load after
// them: the 8B's 14,336-wide activation took 7 dependent L2 trips, ~4.8 us per layer); MegaArgs::vec_batch 1:
// one at a time (the A/B's base).
constexpr int kVecBatch = 8;
__device__ void load_vec(const MegaArgs& a, const void* src, int n, Bf16* vec, float* gsum) {
  const int n8 = n / 8, tid = static_cast<int>(threadIdx.x);
  if (a.vec_batch <= 1) {
    for (int base = 0; base < n8; base += kConsumers) {
      const int c = base + tid;
      const uint4 u = c < n8 ? __ldcg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
      put_chunk(a.bits, c < n8, c, u, vec, gsum, gback_of(a, gsum));
    }
    consumer_sync();
    return;
  }
  for (int base = 0; base < n8; base += kConsumers * kVecBatch) {
    uint4 u[kVecBatch];
#pragma unroll
    for (int b = 0; b < kVecBatch; ++b) {
      const int c = base + b * kConsumers + tid;
      u[b] = c < n8 ? __ldcg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kVecBatch; ++b) {
      const int c = base + b * kConsumers + tid;
      // uniform: every consumer lane calls put_chunk (its shuffles) for a block of chunks
      if (base + b * kConsumers < n8) put_chunk(a.bits, c < n8, c, u[b], vec, gsum, gback_of(a, gsum));
    }
  }
  consumer_sync();
}

// A bf16 value another block wrote in this launch (from L2).
__device__ __forceinline__ Bf16 ldcg_bf16(const Bf16* p) {
  return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}

// Element i of the rotated (or plain) bf16 head row src[hd], rounded to bf16: the first rotary_dim dims
// rotate as rotate_half pairs (rope_math.cuh) by the step's table, the rest pass.
__device__ __forceinline__ Bf16 rope_elem(const MegaArgs& a, const Scratch& sc, const Bf16* src, int i,
                                          bool rope) {
  const int half = a.rotary_dim / 2;
  if (!rope || i >= 2 * half) return ldcg_bf16(src + i);
  const int j = i < half ? i : i - half;
  const float2 y =
      rotate_values(__bfloat162float(ldcg_bf16(src + j)), __bfloat162float(ldcg_bf16(src + j + half)),
                    sc.rope_cs[j], sc.rope_cs[kMegaMaxRotary / 2 + j]);
  return __float2bfloat16_rn(i < half ? y.x : y.y);
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

// Phase B: the (kv head, key slice) tasks (slice_of) on the tensor cores, FlashAttention-style with the
// block's q heads of the kv head as the MMA rows (rows >= grp zero): warp w takes the task's stages w, w + 8,
// ... (kAttnKeys old keys each, landed during the q/k/v phase), S = q K^T (K rows through ldmatrix), an
// online softmax per row, P rounded to bf16 (its row sum taken of the rounded values) times V
// (ldmatrix.trans). The slice holding pos rotates the new key, writes it and its value into the cache, and
// one warp adds it to its state in f32. The warps' states merge in shared memory in warp order, then the
// slice's (max, sum, unnormalised acc) per q head goes to `partials`; the block finishing a kv head's last
// slice merges them.
template <int kHd>
__device__ void attention(const MegaArgs& a, const MegaLayer& L, const Ring& ring, unsigned& item,
                          unsigned* done, int n_splits, char* smem, Scratch& sc, long long* waited) {
  constexpr int kK = kHd / 16, kN = kHd / 8;
  const int grp = a.n_heads / a.n_kv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
            t4 = lane & 3;
  const int pos = a.positions[0], row = attn_row_bytes(kHd);
  const int64_t slot = a.slot_mapping[0];
  const bool rope = L.rope != 0;
  float* qs = reinterpret_cast<float*>(smem);  // [grp][hd]
  float* kn = qs + grp * kHd;                  // [hd]
  float* vn = kn + kHd;                        // [hd]
  float* ws = vn + kHd;                        // [warps][grp][hd + 2]
  const Bf16* qb = static_cast<const Bf16*>(a.q);
  const Bf16* kb = static_cast<const Bf16*>(a.k);
  const Bf16* vb = static_cast<const Bf16*>(a.v);
  Bf16* kcache = static_cast<Bf16*>(L.k_cache);
  Bf16* vcache = static_cast<Bf16*>(L.v_cache);
  const int64_t row_elems = static_cast<int64_t>(a.n_kv) * kHd;
  // ldmatrix addresses: lane l names row l % 8 of matrix l / 8. K (B of q K^T, k = dims, n = keys): matrices
  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15); V (.trans, B
  // of P V, k = keys, n = dims): (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, 8-15), (8-15, 8-15).
  const int mi = lane >> 3, rr = lane & 7;
  const int k_off = (rr + 8 * (mi >> 1)) * row + (mi & 1) * 16;
  const int v_off = (kAttnKeys + rr + 8 * (mi & 1)) * row + (mi >> 1) * 16;
  for (int t = blockIdx.x; t < a.n_kv * n_splits; t += gridDim.x) {
    const Slice s = slice_of(t, n_splits, pos);
    const int kvh = s.kvh, ns = (s.n_old + kAttnKeys - 1) / kAttnKeys;
    for (int i = threadIdx.x; i < grp * kHd; i += kConsumers)
      qs[i] = __bfloat162float(
          rope_elem(a, sc, qb + static_cast<int64_t>(kvh * grp + i / kHd) * kHd, i % kHd, rope));
    if (s.has_new) {
      for (int i = threadIdx.x; i < 2 * kHd; i += kConsumers) {
        const int dd = i % kHd;
        const int64_t off = static_cast<int64_t>(kvh) * kHd;
        const Bf16 b = i < kHd ? rope_elem(a, sc, kb + off, dd, rope) : ldcg_bf16(vb + off + dd);
        (i < kHd ? kn : vn)[dd] = __bfloat162float(b);
        if (slot >= 0) (i < kHd ? kcache : vcache)[slot * row_elems + off + dd] = b;
      }
    }
    consumer_sync();
    uint32_t qa[kK][2];  // A fragments of q (row g: head g of the kv head's group)
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float* q = qs + g * kHd + 16 * k + 2 * t4;
      qa[k][0] = g < grp ? qmma::pack_bf16x2(q[0], q[1]) : 0u;
      qa[k][1] = g < grp ? qmma::pack_bf16x2(q[8], q[9]) : 0u;
    }
    float m = -INFINITY, l = 0.0f, acc[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int si = warp; si < ns; si += kConsumerWarps) {
      const unsigned it = item + static_cast<unsigned>(si);
      const long long t0 = waited != nullptr ? clock64() : 0;
      const char* st = wait_item(ring, it);
      if (waited != nullptr) *waited += clock64() - t0;
      const int count = min(kAttnKeys, s.n_old - si * kAttnKeys);
      float sf[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        uint32_t r[4];
        ldsm_x4(r, st + k_off + k * 32);
        qmma::mma_bf16(sf[0], qa[k][0], 0u, qa[k][1], 0u, r[0], r[1]);
        qmma::mma_bf16(sf[1], qa[k][0], 0u, qa[k][1], 0u, r[2], r[3]);
      }
      // Row g's logits of keys 8 n + 2 t4 + e (n: the key tile) in sv[2 n + e]; masked past count.
      float sv[4], mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = (i >> 1) * 8 + 2 * t4 + (i & 1);
        sv[i] = key < count ? sf[i >> 1][i & 1] * a.scale : -INFINITY;
        mx = fmaxf(mx, sv[i]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m, mx), corr = expf(m - m_new);
      const uint32_t pa0 = qmma::pack_bf16x2(expf(sv[0] - m_new), expf(sv[1] - m_new));
      const uint32_t pa2 = qmma::pack_bf16x2(expf(sv[2] - m_new), expf(sv[3] - m_new));
      const float psum = __uint_as_float(pa0 << 16) + __uint_as_float(pa0 & 0xffff0000u) +
                         __uint_as_float(pa2 << 16) + __uint_as_float(pa2 & 0xffff0000u);
      l = fmaf(l, corr, psum);
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] *= corr;
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        uint32_t r[4];
        ldsm_x4_trans(r, st + v_off + k * 32);
        qmma::mma_bf16(acc[2 * k], pa0, 0u, pa2, 0u, r[0], r[1]);
        qmma::mma_bf16(acc[2 * k + 1], pa0, 0u, pa2, 0u, r[2], r[3]);
      }
      m = m_new;
      release_item(ring, it);
    }
    if (s.has_new && warp == ns % kConsumerWarps) {  // the new key, in f32
      float s_new = -INFINITY;
      for (int h = 0; h < grp; ++h) {
        float d = 0.0f;
        for (int i = lane; i < kHd; i += 32) d = fmaf(qs[h * kHd + i], kn[i], d);
        d = warp_sum(d) * a.scale;
        if (h == g) s_new = d;
      }
      if (g < grp) {
        const float m_new = fmaxf(m, s_new), corr = expf(m - m_new), p = expf(s_new - m_new);
        l = fmaf(l, corr, t4 == 0 ? p : 0.0f);
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          acc[n][0] = fmaf(acc[n][0], corr, p * vn[n * 8 + 2 * t4]);
          acc[n][1] = fmaf(acc[n][1], corr, p * vn[n * 8 + 2 * t4 + 1]);
        }
        m = m_new;
      }
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < grp) {
      float* w = ws + (warp * grp + g) * (kHd + 2);
      if (t4 == 0) {
        w[0] = m;
        w[1] = l;
      }
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        w[2 + n * 8 + 2 * t4] = acc[n][0];
        w[2 + n * 8 + 2 * t4 + 1] = acc[n][1];
      }
    }
    item += static_cast<unsigned>(ns);
    consumer_sync();
    for (int i = threadIdx.x; i < grp * (kHd + 2); i += kConsumers) {
      const int h = i / (kHd + 2), c = i % (kHd + 2);
      float mx = -INFINITY;
      for (int w = 0; w < kConsumerWarps; ++w) mx = fmaxf(mx, ws[(w * grp + h) * (kHd + 2)]);
      float v = 0.0f;
      if (c == 0) {
        v = mx;
      } else if (mx != -INFINITY) {
        for (int w = 0; w < kConsumerWarps; ++w) {
          const float* r = ws + (w * grp + h) * (kHd + 2);
          if (r[0] != -INFINITY) v = fmaf(expf(r[0] - mx), r[c], v);
        }
      }
      a.partials[(static_cast<int64_t>(kvh * grp + h) * n_splits + s.sp) * (kHd + 2) + c] = v;
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

template <int kHd, bool kTiming>
__global__ void __launch_bounds__(kThreads, 1)
    decode_mega_kernel(const __grid_constant__ MegaArgs a, int n_stages, int n_splits, int vec_bytes) {
  extern __shared__ __align__(128) char smem[];
  Ring ring{smem, nullptr, nullptr, nullptr, n_stages};
  Bf16* vec = reinterpret_cast<Bf16*>(smem + static_cast<size_t>(n_stages) * kStageBytes);
  float* gsum = reinterpret_cast<float*>(vec + vec_elems(a));  // quantized: the group sums of vec (gback_of)
  Scratch& sc = *reinterpret_cast<Scratch*>(smem + static_cast<size_t>(n_stages) * kStageBytes + vec_bytes);
  ring.full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&sc) + sizeof(Scratch));
  ring.empty = ring.full + n_stages;
  ring.seq = reinterpret_cast<unsigned*>(ring.empty + n_stages);
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) {
      mbar_init(&ring.full[s], 33);  // the producer's lane 0 (expect_tx), then each lane's arrive_copies
      mbar_init(&ring.empty[s], 1);  // the consuming warp
      ring.seq[s] = ~0u;
    }
    for (unsigned& n : sc.tile_parts) n = 0;
  }
  if (threadIdx.x < a.rotary_dim / 2) {
    float sn, c;
    sincosf(static_cast<float>(a.positions[0]) * a.inv_freq[threadIdx.x], &sn, &c);
    sc.rope_cs[threadIdx.x] = c * a.rope_scaling;
    sc.rope_cs[kMegaMaxRotary / 2 + threadIdx.x] = sn * a.rope_scaling;
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    produce<kTiming>(a, ring, n_splits);
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
  long long waited[5] = {0, 0, 0, 0, 0};  // the projection phases, then the attention keys
  auto wait_acc = [&](int ph) -> long long* { return kTiming && threadIdx.x < 32 ? &waited[ph] : nullptr; };
  unsigned item = 0;
  const int qd = a.n_heads * a.head_dim;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    // The four projection phases through one consume call site (one inlined copy of the stage forms per
    // kernel instance), each after its input: the normed x, the attention, the normed x, the activation.
#pragma unroll 1
    for (int ph = kQkv; ph <= kDown; ++ph) {
      if (ph == kQkv) {
        if (t0) record(a, l, kStart, global_ns());
        norm_into(a, L.in_norm, vec, gsum, sc);
        if (t0) record(a, l, kNorm1, global_ns());
      } else if (ph == kO) {
        if (!(a.debug & 1)) {
          attention<kHd>(a, L, ring, item, sync + 64 + l * a.n_heads, n_splits, reinterpret_cast<char*>(vec),
                         sc, wait_acc(4));
          barrier(l, kAttnDone);
        }
        load_vec(a, a.attn, qd, vec, gsum);
        if (t0) record(a, l, kOLoaded, global_ns());
      } else if (ph == kGateUp) {
        norm_into(a, L.post_norm, vec, gsum, sc);
        if (t0) record(a, l, kNorm2, global_ns());
      } else {
        load_vec(a, a.act, a.d_ff, vec, gsum);
        if (t0) record(a, l, kActLoaded, global_ns());
      }
      item += consume(a, ph, ring, item, vec, gsum, sc, wait_acc(ph));
      const int done = ph == kQkv ? kQkvDone : ph == kO ? kODone : ph == kGateUp ? kGuDone : kDownDone;
      if (ph != kDown || l + 1 < a.n_layers) {
        barrier(l, done);
      } else if (t0) {
        record(a, l, kDownDone, global_ns());
      }
    }
    if (t0) {
      for (int ph = 0; ph < 4; ++ph)
        record(a, l, kWaitData + ph, static_cast<unsigned long long>(waited[ph]));
      record(a, l, kWaitKeys, static_cast<unsigned long long>(waited[4]));
    }
    if constexpr (kTiming)
      for (long long& w : waited) w = 0;
  }
}

// The input vector, its group sums (4-bit), or the attention phase's scratch: they take turns.
int vec_bytes_of(const MegaArgs& a) {
  const int n = vec_elems(a);
  const int grp = a.n_heads / a.n_kv;
  const int attn = (grp * a.head_dim + 2 * a.head_dim + kConsumerWarps * grp * (a.head_dim + 2)) * 4;
  return (std::max(n * 2 + 2 * (n / 64 + 1) * 4, attn) + 127) / 128 * 128;
}

int splits_of(const MegaArgs& a) {
  return std::clamp(sm_count() / std::max(a.n_kv, 1), 1, kMegaMaxSplits);
}

using Kernel = void (*)(MegaArgs, int, int, int);

template <bool kTiming>
Kernel kernel_of(int head_dim) {
  switch (head_dim) {
    case 16:
      return decode_mega_kernel<16, kTiming>;
    case 32:
      return decode_mega_kernel<32, kTiming>;
    case 64:
      return decode_mega_kernel<64, kTiming>;
    case 128:
      return decode_mega_kernel<128, kTiming>;
    case 256:
      return decode_mega_kernel<256, kTiming>;
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
