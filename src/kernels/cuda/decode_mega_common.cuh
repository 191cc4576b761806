// The persistent decode step's shared state (decode_mega.cu): block shape, the shared-memory scratch, the
// grid barrier, the geometry of a projection phase and of an attention task, the ring of stages and the
// timing record's slots. The producer (decode_mega_produce.cuh), the attention phase
// (decode_mega_attention.cuh) and the kernel derive the same geometry from these. Only decode_mega.cu includes
// it (sm_90a device code).
#pragma once
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/decode_mega.h"
#include "kernels/cuda/decode_mega_layout.h"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::mega {

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

}  // namespace bunsen::kernels::cuda::mega
