// The tensor-core flash-decoding slice kernel (head_dim 64/128/256/512, bf16 q, bf16 cache, <= 16 query heads
// per kv head): the block's warps form key streams; each stream takes 16-key tiles of its slice in turn.
// A warp owns at most 128 dims of the head (head_dim 256: two warps per stream, 512: four), streams its
// dims of each tile's K and V rows through a private 3-stage cp.async ring in shared memory (16-byte
// chunks, XOR-swizzled for conflict-free ldmatrix; one stage, a third of the memory, for launches whose
// block table allows no slice more than one tile per key stream: see one_stage), and computes its part
// of S = Q·Kᵀ (query heads as the 16 MMA rows) with mma.m16n8k16 in f32; the warps of a stream add their
// parts of S through shared memory (a named barrier per tile, fixed order, so every warp sees the same
// bits), run the same online softmax
// (log2 domain, as the SIMT kernel) and each accumulates O += P·V over its own dims. P is split into bf16
// hi + lo parts (two MMAs) so P·V keeps ~f32 accuracy. Not for f32 q (not exact in bf16), quantized caches
// or other head dims: attention_decode.cu's SIMT kernel takes those. The epilogue (write_block) writes the
// row or the slice's partial, and the last slice block of a row merges them (fused combine). The cluster
// instance (kCluster, BUNSEN_DECODE_ATTN=cluster) runs the same loop with the slices of a row in one
// thread-block cluster merged by cluster_merge, and starts its first tiles' copies before the wait.
// The packed instances (kPack = 4 or 8 warps, batched decode steps, BUNSEN_DECODE_BATCHED) give each warp its
// own kv head (block = kPack kv heads of a row, one key slice): every warp is one key stream over the whole
// slice, so there is no cross-warp merge, no block barrier, and the block's warps read adjacent 256-byte
// head rows of the same cache blocks (kPack x 256 contiguous bytes per key in the [block, slot, kv head,
// dim] layout instead of 256 scattered ones); each writes its row or partial straight from registers.
// Invariants: every warp of a (non-packed) block passes the same number of barriers before each block
// barrier (head_dim 256 pads the stream with fewer tiles), so racecheck's count-paired barrier phases are
// the real ones; `red` overlays the rings only after a __syncthreads that follows every ring read and
// cp.async wait; masks as ref; a visible key with an invalid block id is a NaN row of K (never read from
// global memory); launched with programmatic dependent launch, nothing an earlier kernel of the step writes
// is read before the wait: the packed instances (and the split ones with BUNSEN_DECODE_EARLY=0) read nothing
// before it; the cluster and split instances read before it only the step metadata (positions, seq_index,
// block tables: copied from the host before the step's first kernel) and cache rows of keys below the block
// holding the row's position (a decode step writes only its rows' positions: one token per sequence, n_tokens
// <= n_seqs), Q and the newest block after it. Every split and cluster instance also has a lean form (kLean,
// see lean_kind): the same loads and arithmetic with the code of the features a launch does not use compiled
// out, because a batch-1 launch fetches its instructions cold and its code size is latency.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/env.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_decode_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::decode {
namespace {

constexpr int kTile = 16;       // keys per stream tile
constexpr int kStages = 3;      // cp.async ring depth per warp (the default instances)
constexpr int kMaxPartD = 128;  // dims one warp owns (registers: its O fragments and Q fragments)

// kRows: MMA rows in use, 8 (groups of <= 8 query heads; rows 8..15 of A are zero) or 16. kRingStages: the
// ring depth (1: the short-slice instance, see one_stage: a third of the shared memory, no prefetch).
template <int kD, int kRows, int kRingStages = kStages>
struct MmaShape {
  static constexpr int kDepth = kRingStages;
  static constexpr int kParts = kD > kMaxPartD ? kD / kMaxPartD : 1;  // warps sharing a key tile
  static constexpr int kPartD = kD / kParts;                          // dims each of them owns
  static constexpr int kStreams = kWarps / kParts;                    // key streams per block
  static constexpr int kR = kRows / 8;                                // row halves: gq (and gq + 8)
  static constexpr int kChunks = kPartD / 8;                          // 16-byte chunks per row part
  static constexpr int kRowBytes = kPartD * 2;
  static constexpr int kMatBytes = kTile * kRowBytes;  // one K or V tile (this warp's dims)
  static constexpr int kStageBytes = 2 * kMatBytes;
  static constexpr int kWarpBytes = kDepth * kStageBytes;
  static constexpr int kPerLane = kTile * kChunks / 32;  // chunks each lane copies per matrix
  static constexpr size_t kRing = size_t{kWarps} * kWarpBytes;
  // S exchange: [2 buffers][kWarps][kR][32 lanes] float4 (this lane's S values of one row half).
  static constexpr size_t kXchg = kParts > 1 ? sizeof(float4) * (2 * 32 * kR * kWarps) : 0;
  static constexpr size_t kRed = size_t{kStreams} * kRows * (kD + 2) * sizeof(float);
  static constexpr size_t kSmem = kRing + kXchg > kRed ? kRing + kXchg : kRed;
  static constexpr size_t kState = size_t{kRows} * (kD + 2) * sizeof(float);  // cluster_merge's st
  static_assert(kDepth != kStages || kRed + kState <= kSmem, "the cluster state fits behind red");
  // Blocks per SM the shared memory allows (as mma_blocks_per_sm), for the launch bounds: with the
  // default bound ptxas capped the registers at 168 once the fused combine was inlined, and spilled.
  static constexpr int kMinBlocks = kD == 64 ? 4 : 2;
  static_assert(kWarps % kParts == 0 && kPartD % 16 == 0 && (kTile * kChunks) % 32 == 0, "tiling");
};

// Byte offset of 16-byte chunk c of row r in a tile: chunks XOR-swizzled by row, so the 8 rows of an
// ldmatrix phase hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk, int row_bytes) {
  return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

// A warp's ring of K / V tiles. The cp.async instances XOR-swizzle rows of kRowBytes; the bulk-copy
// instances (kBulk, packed only) copy each key row with one bulk copy, which cannot swizzle, so their rows
// are padded by 16 bytes instead (row r starts r x 16 bytes further into the bank groups: the 8 rows of an
// ldmatrix phase still hit 8 different ones). The bulk rings' mbarriers (one per stage and warp) follow the
// block's rings in shared memory.
template <class S, bool kBulk>
struct Ring {
  static constexpr int kPitch = kBulk ? S::kRowBytes + 16 : S::kRowBytes;  // bytes per key row of a tile
  static constexpr int kMat = kTile * kPitch;                              // one K or V tile
  static constexpr int kStage = 2 * kMat;
  static constexpr int kWarp = S::kDepth * kStage;
  static constexpr int kBarBytes = kBulk ? S::kDepth * 8 : 0;  // per warp
};

// Byte offset of 16-byte chunk c of row r in a tile of the ring above.
template <bool kBulk>
__device__ __forceinline__ int tile_at(int row, int chunk, int row_bytes) {
  return kBulk ? row * (row_bytes + 16) + (chunk << 4) : swz(row, chunk, row_bytes);
}

// Named barrier kId (1..15; 0 is __syncthreads) over kThreadsIn threads. Immediate ids, so ptxas reserves
// only the barriers used.
template <int kId, int kThreadsIn>
__device__ __forceinline__ void named_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreadsIn) : "memory");
}

__device__ __forceinline__ uint32_t pack(Bf16 lo, Bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | static_cast<uint32_t>(__bfloat16_as_ushort(hi))
                                                               << 16;
}

// (x, y) as bf16 pairs hi + lo with hi + lo == (x, y) to ~2^-17 relative.
__device__ __forceinline__ void split(float x, float y, uint32_t& hi, uint32_t& lo) {
  const Bf16 hx = __float2bfloat16_rn(x), hy = __float2bfloat16_rn(y);
  hi = pack(hx, hy);
  lo = pack(__float2bfloat16_rn(x - __bfloat162float(hx)), __float2bfloat16_rn(y - __bfloat162float(hy)));
}

// The named barrier of key stream `stream` (its kParts warps): id 1 + stream, so the two streams of
// head_dim 256 never wait for each other; head_dim 512 (one stream) uses id 1 over the whole block.
template <class S>
__device__ __forceinline__ void stream_barrier(int stream) {
  static_assert(S::kStreams <= 2, "one named barrier per key stream");
  if (S::kStreams == 1 || stream == 0)
    named_barrier<1, 32 * S::kParts>();
  else
    named_barrier<2, 32 * S::kParts>();
}

// Adds the partial S of the kParts warps of this stream (this warp's own part included), in part order.
// sc[nt][2r + e]: row half r, keys nt * 8 + 2tq + e.
template <class S>
__device__ __forceinline__ void exchange_scores(unsigned char* smem, int it, int warp, int lane,
                                                float (&sc)[2][4]) {
  float4* x = reinterpret_cast<float4*>(smem + S::kRing);
  const int buf = it & 1, stream = warp / S::kParts;
#pragma unroll
  for (int r = 0; r < S::kR; ++r)
    x[((buf * kWarps + warp) * S::kR + r) * 32 + lane] =
        make_float4(sc[0][2 * r], sc[0][2 * r + 1], sc[1][2 * r], sc[1][2 * r + 1]);
  // Double-buffered: a warp writes this buffer again two tiles later, after the next barrier, which
  // every reader of this tile passes only after reading.
  stream_barrier<S>(stream);
#pragma unroll
  for (int r = 0; r < S::kR; ++r) {
    float4 sum = x[((buf * kWarps + stream * S::kParts) * S::kR + r) * 32 + lane];
#pragma unroll
    for (int p = 1; p < S::kParts; ++p) {
      const float4 v = x[((buf * kWarps + stream * S::kParts + p) * S::kR + r) * 32 + lane];
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    sc[0][2 * r] = sum.x;
    sc[0][2 * r + 1] = sum.y;
    sc[1][2 * r] = sum.z;
    sc[1][2 * r + 1] = sum.w;
  }
}

// Q's A fragments for this warp's dims: qa[kd][r + 2 * half] = heads gq + 8r, dims kd*16 + half*8 + 2tq (+1).
template <class S>
__device__ __forceinline__ void load_q(const DecodeArgs& a, const Where& w, int d_base, int gq, int tq,
                                       uint32_t (&qa)[S::kPartD / 16][4]) {
  const int G = a.group;
  const Bf16* q = static_cast<const Bf16*>(a.q) + w.t * a.q_ts + w.g * G * a.q_hs + d_base;
#pragma unroll
  for (int kd = 0; kd < S::kPartD / 16; ++kd)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = gq + 8 * r, d = kd * 16 + half * 8 + 2 * tq;
        uint32_t v = 0u;  // bf16 zeros: rows past the group (and rows 8..15 when kRows is 8)
        if (r < S::kR && row < G) v = pack(q[row * a.q_hs + d], q[row * a.q_hs + d + 1]);
        qa[kd][r + 2 * half] = v;
      }
}

// The packed instance's epilogue: this warp's (row, kv head) state straight from its registers, as
// write_block with one stream (merge weight 1): out = acc / l for a row of one slice, else the partial.
template <class S>
__device__ __forceinline__ void write_warp(const DecodeArgs& a, const Where& w, int gq, int tq,
                                           const float (&m)[S::kR], float (&l)[S::kR],
                                           const float (&o)[S::kPartD / 8][4]) {
  const int G = a.group;
#pragma unroll
  for (int r = 0; r < S::kR; ++r) {
    l[r] += __shfl_xor_sync(kFull, l[r], 1);
    l[r] += __shfl_xor_sync(kFull, l[r], 2);
    const int h = gq + 8 * r, head = w.g * G + h;
    if (h >= G) continue;
    if (w.sl.n_act == 1) {
#pragma unroll
      for (int dn = 0; dn < S::kPartD / 8; ++dn)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          store_any(a.out, a.out_dtype, w.t * a.o_ts + head * a.o_hs + dn * 8 + 2 * tq + e,
                    o[dn][2 * r + e] / l[r]);
    } else {
      float* part = partial_of(a, w, head);
      if (tq == 0) {
        part[0] = m[r];
        part[1] = l[r];
      }
#pragma unroll
      for (int dn = 0; dn < S::kPartD / 8; ++dn)  // (D + 2) and the arena are even: 8-byte aligned pairs
        *reinterpret_cast<float2*>(part + 2 + dn * 8 + 2 * tq) = make_float2(o[dn][2 * r], o[dn][2 * r + 1]);
    }
  }
}

// kCluster: the cluster instance (see the file comment); surplus slice blocks stay for the cluster barriers.
// kPack > 0: a packed instance (kPack warps of one kv head each, blockIdx.y = kv heads / kPack; see the
// file comment); its shared memory is its kPack warps' rings. kBulk (packed only): each lane of a warp
// copies one key row of a tile (lanes 0-15 K, 16-31 V) with one bulk copy (the TMA's non-tensor form) that
// completes on the stage's mbarrier, instead of 8 16-byte cp.async per lane per matrix, which cap a warp's
// copy rate (H100, 5-stage rings, the copies alone: 1.56x a warp's rate with bulk copies; the cp.async
// kernel stops at ~2.9 TB/s on the H100 and the H200 alike). Same tiles in the same order, same arithmetic:
// the same bits.
template <int kD, int kRows, bool kCluster, int kPack = 0, int kDepth = kStages, bool kBulk = false,
          int kLean = 0>
__global__ void __launch_bounds__(kPack > 0 ? 32 * kPack : kThreads,
                                  kPack > kWarps ? 1 : MmaShape<kD, kRows, kDepth>::kMinBlocks)
    decode_mma_kernel(const DecodeArgs a) {
  using S = MmaShape<kD, kRows, kDepth>;
  // Tiles in flight before the loop: kDepth - 1 (a one-stage ring holds one; its refill waits for the
  // compute).
  constexpr int kAhead = kDepth > 1 ? kDepth - 1 : 1;
  constexpr int kR = S::kR, kPartD = S::kPartD;
  constexpr bool kPacked = kPack > 0;
  constexpr bool kPow2Blocks = kLean != 0;  // lean instances: the host checked block_shift >= 0
  static_assert(!kPacked || (S::kParts == 1 && !kCluster), "packed: one warp covers the head, split slices");
  static_assert(!kBulk || (kPacked && kDepth > 1), "bulk copies: the packed instances' deep rings only");
  using R = Ring<S, kBulk>;
  constexpr int kStreams = kPacked ? 1 : S::kStreams;  // key streams per (row, kv head)
  extern __shared__ __align__(128) unsigned char smem[];
  // Early copies (the cluster instance; the split instance when a.early_kv): the row's older keys are
  // copied before the PDL wait, Q and the newest block after it. The packed instance waits first.
  const bool early = kCluster || kLean || (!kPacked && a.early_kv != 0);  // uniform over the grid
  const uint64_t t_entry = stamp_if(a.timing);
  if (!early) slice_prologue();
  uint64_t t_wait = stamp_if(a.timing);  // the early instances stamp again after their wait below
  Where w = where_am_i(a);  // cluster: step metadata, before the wait
  if constexpr (!kCluster)
    if (!w.live) return;  // uniform over the block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3, G = a.group;
  if constexpr (kPacked) {
    w.g = blockIdx.y * kPack + warp;
    if (w.g * G >= a.n_heads) return;  // past the last kv head: uniform over the warp (no block barriers)
  }
  const int stream = kPacked ? 0 : warp / S::kParts, part = warp % S::kParts, d_base = part * kPartD;
  uint32_t qa[kPartD / 16][4];
  if (!early) load_q<S>(a, w, d_base, gq, tq, qa);
  float o[kPartD / 8][4];  // O fragments: c0, c1 = head gq, dims 2tq (+1); c2, c3 = head gq + 8
#pragma unroll
  for (int i = 0; i < kPartD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  // Rows gq (+ 8); l sums this lane's keys only (the quad adds up at the end).
  float m[kR], l[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const Bf16* kc = static_cast<const Bf16*>(a.k_cache) + w.g * a.k_s2 + d_base;
  const Bf16* vc = static_cast<const Bf16*>(a.v_cache) + w.g * a.v_s2 + d_base;
  const bool seq_ok = w.seq >= 0 && w.seq < a.n_seqs;
  const int32_t* table = a.block_tables + (seq_ok ? static_cast<int64_t>(w.seq) * a.table_stride : 0);
  const int base0 = w.k0 + stream * kTile, stride = kStreams * kTile;
  const int n_it = base0 < w.k1 ? (w.k1 - base0 + stride - 1) / stride : 0;  // uniform over the stream
  unsigned char* ring = smem + warp * R::kWarp;
  // The bulk ring's mbarriers: stage i's completes a phase when tile i (+ kDepth, ...) has landed.
  static_assert(!kBulk || kTile == 16, "bulk: lanes 0-15 copy a tile's K rows, 16-31 its V rows");
  uint64_t* bars = kBulk ? reinterpret_cast<uint64_t*>(smem + kPack * R::kWarp) + warp * kDepth : nullptr;
  if constexpr (kBulk) {
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kDepth; ++i) mbar_init(bars + i, 1);
    __syncwarp();
  }
  // Block ids of the rows this lane copies for tile `it` (-1: past the slice or invalid). Looked up one
  // tile ahead of the copies, so the table's latency hides behind a tile of compute. Bulk: one row (key
  // lane % 16 of the tile; lanes 0-15 copy its K row, 16-31 its V row).
  constexpr int kLookups = kBulk ? 1 : S::kPerLane;
  auto lookup = [&](int it, int(&blk)[kLookups]) {
#pragma unroll
    for (int i = 0; i < kLookups; ++i) {
      const int key = base0 + it * stride + (kBulk ? lane & (kTile - 1) : (i * 32 + lane) / S::kChunks);
      int off = 0;
      blk[i] = it < n_it && key < w.k1 ? block_of<kPow2Blocks>(a, table, seq_ok, key, off) : -1;
    }
  };
  // Keys from fresh_lo on (the block of the row's position) may be written by the kernel before this one.
  const int fresh_lo =
      w.sl.n_keys > 0 ? block_index<kPow2Blocks>(a, w.sl.lo + w.sl.n_keys - 1) * a.block_size : 0;
  // which: 0 every chunk, 1 chunks of keys below fresh_lo, 2 the others; commits one group unless which is 1.
  auto issue = [&](int it, const int(&blk)[kLookups], int which = 0) {
    if constexpr (kBulk) {
      if (it >= n_it) return;  // (the loop waits on tiles below n_it only)
      const int row = lane & (kTile - 1), key = base0 + it * stride + row;
      const bool is_v = lane >= kTile, copy = blk[0] >= 0;
      unsigned char* dst = ring + (it % kDepth) * R::kStage + (is_v ? R::kMat : 0) + row * R::kPitch;
      uint64_t* bar = bars + it % kDepth;
      if (!copy) {  // as the cp.async instance: a visible key of an invalid block reads as NaN K and zero V,
                    // keys past the slice as zeros (V must be finite: their P is 0)
        const uint32_t fill = !is_v && key < w.k1 ? 0x7fc07fc0u : 0u;
#pragma unroll
        for (int c = 0; c < S::kChunks; ++c)
          reinterpret_cast<uint4*>(dst)[c] = make_uint4(fill, fill, fill, fill);
        fence_proxy_async_smem();  // before a later bulk copy into this row
      }
      const unsigned n_copies = __popc(__ballot_sync(kFull, copy));
      if (lane == 0) mbar_arrive_expect_tx(bar, n_copies * S::kRowBytes);
      __syncwarp();  // the phase expects the bytes before any copy can complete on it
      if (copy) {
        const int bi = block_index<kPow2Blocks>(a, key);
        const int off = key - bi * a.block_size;
        const Bf16* src = is_v ? vc + blk[0] * a.v_s0 + off * a.v_s1 : kc + blk[0] * a.k_s0 + off * a.k_s1;
        bulk_copy_g2s(dst, src, S::kRowBytes, bar);
      }
      return;
    }
    if (it < n_it) {
      unsigned char* ks = ring + (it % kDepth) * R::kStage;
      unsigned char* vs = ks + R::kMat;
#pragma unroll
      for (int i = 0; i < S::kPerLane; ++i) {
        const int idx = i * 32 + lane, row = idx / S::kChunks, c = idx % S::kChunks;
        const int key = base0 + it * stride + row;
        if (which != 0 && (key < fresh_lo) != (which == 1)) continue;
        const int bi = block_index<kPow2Blocks>(a, key);
        const int off = key - bi * a.block_size;
        unsigned char* kd = ks + swz(row, c, S::kRowBytes);
        unsigned char* vd = vs + swz(row, c, S::kRowBytes);
        if (key < w.k1 && blk[i] < 0) {
          *reinterpret_cast<uint4*>(kd) =
              make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u);  // NaN
          *reinterpret_cast<uint4*>(vd) = make_uint4(0u, 0u, 0u, 0u);
        } else {
          const bool ok = blk[i] >= 0;
          cp_async_16_zfill(kd, ok ? kc + blk[i] * a.k_s0 + off * a.k_s1 + c * 8 : a.k_cache, ok ? 16 : 0);
          cp_async_16_zfill(vd, ok ? vc + blk[i] * a.v_s0 + off * a.v_s1 + c * 8 : a.v_cache, ok ? 16 : 0);
        }
      }
    }
    if (which != 1) cp_async_commit_group();
  };
  int blk[kLookups];
  if (early) {
    // The first kAhead tiles' keys below the newest block before the wait (they join the first commit
    // group), that block's keys and Q after it; tile i's group is committed by issue(i, .., 2), so the
    // ring sees the same kAhead groups as the split instance.
    int first[kAhead][kLookups];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      lookup(i, first[i]);
      issue(i, first[i], 1);
    }
    lookup(kAhead, blk);
    pdl_wait();
    pdl_launch_dependents();
    t_wait = stamp_if(a.timing);
    // The newest block's copies before Q's loads, whose packing would stall the issue behind them.
#pragma unroll
    for (int i = 0; i < kAhead; ++i) issue(i, first[i], 2);  // commits after each: kAhead groups
    load_q<S>(a, w, d_base, gq, tq, qa);
  } else {
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      lookup(i, blk);
      issue(i, blk);
    }
    lookup(kAhead, blk);
  }
  const float qk_scale = a.scale * kLog2e;
  const int mi = lane >> 3, r8 = lane & 7;  // ldmatrix: this lane addresses row r8 of matrix mi
  uint64_t t_first = t_wait;
  // The lean split instance: a slice holds at most one tile per stream (lean_kind), so no refill and no
  // lookahead in the loop.
  constexpr bool kOneTile = kLean && !kCluster && kDepth == 1;
  if constexpr (kOneTile)
    if (n_it > 1) __trap();  // (a launch outside lean_kind's bounds: never silently wrong)
  for (int it = 0; it < (kOneTile ? 1 : n_it); ++it) {
    if (kOneTile && it >= n_it) break;
    if constexpr (kBulk)
      mbar_wait(bars + it % kDepth, (it / kDepth) & 1);  // tile `it` has landed
    else
      cp_async_wait_group<(kDepth > 1 ? kDepth - 2 : 0)>();  // this lane's copies of tile `it` have landed
    __syncwarp();  // ... and every other lane's; all lanes are done with tile it - 1
    if (it == 0) t_first = stamp_if(a.timing);
    if constexpr (kDepth > 1) issue(it + kAhead, blk);  // refills the stage of tile it - 1
    int next[kLookups];
    if constexpr (!kOneTile) lookup(it + kAhead + 1, next);  // in flight while this tile computes
    const unsigned char* ks = ring + (it % kDepth) * R::kStage;
    const unsigned char* vs = ks + R::kMat;
    float sc[2][4] = {};  // S tiles of keys 0-7 and 8-15: c0, c1 = head gq, keys 2tq (+1); c2, c3 = gq + 8
#pragma unroll
    for (int kd = 0; kd < kPartD / 16; ++kd) {
      uint32_t b[4];  // K rows (keys 0-7 | 8-15) x dims (kd*16 + 0-7 | 8-15)
      ldsm_x4(b, ks + tile_at<kBulk>((mi >> 1) * 8 + r8, kd * 2 + (mi & 1), S::kRowBytes));
      mma_m16n8k16(sc[0], qa[kd], b[0], b[1]);
      mma_m16n8k16(sc[1], qa[kd], b[2], b[3]);
    }
    if constexpr (S::kParts > 1) exchange_scores<S>(smem, it, warp, lane, sc);
    const int key0 = base0 + it * stride + 2 * tq;
    float p[2][4], mx[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float tmax = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = sc[nt][2 * r + e];
          x = !kLean && a.softcap > 0.0f ? a.softcap * tanhf(x * a.scale / a.softcap) * kLog2e : x * qk_scale;
          x = key0 + nt * 8 + e < w.k1 ? x : -INFINITY;
          p[nt][2 * r + e] = x;
          tmax = fmaxf(tmax, x);  // ignores NaN: it poisons l and o, not m
        }
      tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 2));
      mx[r] = fmaxf(m[r], tmax);
      const float alpha = rescale(m[r], mx[r]);
      l[r] *= alpha;
#pragma unroll
      for (int i = 0; i < kPartD / 8; ++i) {
        o[i][2 * r] *= alpha;
        o[i][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = p[nt][2 * r + e];
          x = x == -INFINITY ? 0.0f : exp2f(x - mx[r]);
          l[r] += x;
        }
      m[r] = mx[r];
    }
    uint32_t ph[4] = {0u, 0u, 0u, 0u}, pl[4] = {0u, 0u, 0u, 0u};  // A fragments of P, hi and lo parts
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      split(p[0][2 * r], p[0][2 * r + 1], ph[r], pl[r]);          // keys 2tq (+1)
      split(p[1][2 * r], p[1][2 * r + 1], ph[r + 2], pl[r + 2]);  // keys 8 + 2tq (+1)
    }
#pragma unroll
    for (int dp = 0; dp < kPartD / 16; ++dp) {
      uint32_t b[4];  // V rows (keys 0-7 | 8-15) x dims (dp*16 + 0-7 | 8-15), transposed
      ldsm_x4_trans(b, vs + tile_at<kBulk>((mi & 1) * 8 + r8, dp * 2 + (mi >> 1), S::kRowBytes));
      mma_m16n8k16(o[2 * dp], ph, b[0], b[1]);
      mma_m16n8k16(o[2 * dp + 1], ph, b[2], b[3]);
      mma_m16n8k16(o[2 * dp], pl, b[0], b[1]);
      mma_m16n8k16(o[2 * dp + 1], pl, b[2], b[3]);
    }
    if constexpr (kDepth == 1 && !kOneTile) {  // the one stage is free once every lane is done with this tile
      __syncwarp();
      issue(it + 1, blk);
    }
    if constexpr (!kOneTile)
#pragma unroll
      for (int i = 0; i < kLookups; ++i) blk[i] = next[i];
  }
  if constexpr (S::kParts > 1 && S::kStreams > 1) {
    // Barrier balance (head_dim 256: two streams of two warps). Stream 1 starts a tile later, so when the
    // slice has an odd tile count it passes one exchange barrier fewer than stream 0. No real hazard comes
    // of it (each stream waits on its own barrier id, and the __syncthreads below orders every warp's last
    // ring read before `red`, which overlays warp 0's ring, is written), but compute-sanitizer racecheck
    // evidently pairs a thread's barriers by their count, not their id: the two hazards it reported on
    // MixedLengthsGqaAndHeadDims are exactly stream 1's `red` writes against stream 0's last V ldmatrix
    // and stream 0's `red` writes against stream 1's merge_streams reads, each one barrier count apart. Stream 1 therefore passes its barrier again for
    // each tile it lacks (0 or 1 times, no shared-memory access), so every warp reaches the block barriers
    // after the same number of barriers. a.balance_barriers = 0 (BUNSEN_DECODE_BARRIER_BALANCE=0) skips
    // it, to reproduce the report.
    const int n_most = w.k0 < w.k1 ? (w.k1 - w.k0 + stride - 1) / stride : 0;  // stream 0's tiles
    if (a.balance_barriers)
      for (int it = n_it; it < n_most; ++it) stream_barrier<S>(stream);  // uniform over the stream
  }
  if constexpr (!kBulk) cp_async_wait_group<0>();  // (bulk: every issued tile was waited for)
  if constexpr (kPacked) {
    write_warp<S>(a, w, gq, tq, m, l, o);
    return;
  }
  __syncthreads();  // every warp is done with its ring and the exchange: the shared memory becomes `red`
  const uint64_t t_loop = stamp_if(a.timing);
  float* red = reinterpret_cast<float*>(smem);  // [kStreams][kRows][kD + 2]
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    l[r] += __shfl_xor_sync(kFull, l[r], 1);
    l[r] += __shfl_xor_sync(kFull, l[r], 2);
    const int h = gq + 8 * r;
    if (h < G) {
      float* rr = red + (stream * kRows + h) * (kD + 2);
      if (tq == 0 && part == 0) {  // the stream's warps hold the same m and l
        rr[0] = m[r];
        rr[1] = l[r];
      }
#pragma unroll
      for (int dn = 0; dn < kPartD / 8; ++dn) {
        rr[2 + d_base + dn * 8 + 2 * tq] = o[dn][2 * r];
        rr[2 + d_base + dn * 8 + 2 * tq + 1] = o[dn][2 * r + 1];
      }
    }
  }
  if constexpr (kCluster)
    cluster_merge<kRows, kD, S::kStreams>(a, red, red + S::kRed / sizeof(float), w);
  else
    write_block<kRows, kD, S::kStreams, kLean == 0 ? 1 : (kLean == 2 ? 2 : 0)>(a, red, w);
  record_block(a.timing, kTimingSlice, a.timing_layer, blockIdx.x | blockIdx.y << 12 | blockIdx.z << 22,
               t_entry, t_wait, t_first, t_loop, w.k1 - w.k0);
}

// Raises the kernel's dynamic shared memory limit and asks for the largest shared-memory carveout (so
// two ~100 KB blocks fit one SM), once per device and instance; the cluster instance may also form
// clusters of up to kMaxCluster (16, non-portable) blocks.
template <int kD, int kRows, bool kCluster, int kPack, int kDepth, bool kBulk, int kLean = 0>
void prepare(const void* kernel, size_t smem) {
  static std::atomic<uint64_t> done{0};
  const int dev = current_device();
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load() & bit) != 0) return;
  allow_dynamic_smem(kernel, smem, "paged_attention");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared),
             "paged_attention", [] { return std::string("(shared memory carveout)"); });
  if (kCluster)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "paged_attention",
               [] { return std::string("(non-portable cluster size)"); });
  done.fetch_or(bit);
}

// Dynamic shared memory of an instance: a packed one holds only its warps' rings (and the bulk rings'
// mbarriers).
template <int kD, int kRows, int kPack, int kDepth = kStages, bool kBulk = false>
constexpr size_t smem_of() {
  using S = MmaShape<kD, kRows, kDepth>;
  using R = Ring<S, kBulk>;
  return kPack > 0 ? size_t{kPack} * (R::kWarp + R::kBarBytes) : S::kSmem;
}

// Whether the packed instances copy with bulk copies: the testing switch, else BUNSEN_DECODE_BULK (0 / 1,
// read once; default off until measured), and only where the loaded binary of the instance is sm_90+.
std::atomic<int> g_bulk{0};  // set_attention_decode_bulk_for_testing: 0 BUNSEN_DECODE_BULK; 1 off; 2 on
std::atomic<int> g_probe_depth{0};  // set_attention_decode_packed_depth_for_testing
bool bulk_wanted() {
  const int mode = g_bulk.load();
  if (mode != 0) return mode == 2;
  static const bool on = env_flag("BUNSEN_DECODE_BULK", false);
  return on;
}
bool bulk_binary_ok(const void* kernel) {
  static const bool ok = [kernel] {  // once per process: the file's instances share their targets
    cudaFuncAttributes fa{};
    return cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion >= 90;
  }();
  return ok;
}

// BUNSEN_DECODE_BARRIER_BALANCE=0 turns the head_dim-256 barrier balance off (read once; default on).
bool barrier_balance() {
  static const bool on = env_flag("BUNSEN_DECODE_BARRIER_BALANCE", true);
  return on;
}

// BUNSEN_DECODE_EARLY=0: the split instance reads nothing before its PDL wait (read once; default: it copies
// the row's keys below its newest block first, see decode_mma_kernel).
bool early_kv() {
  static const bool on = env_flag("BUNSEN_DECODE_EARLY", true);
  return on;
}

// The split instances of head_dim 64/128 take a one-stage ring when no slice of the launch can hold more than
// one tile per key stream (a.max_slice_keys, from the block table's width: graph-safe): the deeper ring then
// only costs shared memory, and a third of it lets a block get resident beside other kernels' blocks (two
// ~90 KB 4-bit GEMV tiles). H200, 1k context, same call: 8B bf16 217.5 / 219.0 vs 212.3 / 213.4 tok/s, 4-bit
// 388.5 / 396.7 vs 372.8 / 368.1, 1B 890.9 / 888.3 vs 864.9 / 855.3. BUNSEN_DECODE_STAGES=1 / 3 (read once)
// forces one depth for every such launch.
// The lean instances (kLean): the split kernel with its copies before the PDL wait, without the softcap, the
// fused combine's merge and the division by a block size that is not a power of two, and at one stage with
// its key loop as one tile (lean_kind); the cluster kernel without the softcap and the division
// (cluster_lean_ok). At head_dim 128 the one-stage split instance is 46 instead of 143 KB of sm_90a code, the
// three-stage one 91 instead of 205 KB, the cluster one 100 instead of 136 KB. A batch-1 launch is
// latency-bound and its SMs fetch its instructions cold every layer (the weight streams between evict them),
// so the code size is time: the one-stage block's phases after its PDL wait took 4.7 + 6.2 + 2.7 us with the
// full instance, 1.3 + 1.4 + 1.4 us lean (H100, 8B 4-bit, block timeline; decode +13 %).
// attention_decode_lean() (BUNSEN_DECODE_LEAN=0: the full instances) switches them.
bool cluster_lean_ok(const DecodeArgs& a) {
  return attention_decode_lean() && a.softcap <= 0.0f && a.block_shift >= 0;
}

// Which split instance a launch takes: 0 the full one, 1 the lean one, 2 the lean one with the lean fused
// combine (merge_if_last_lean: BUNSEN_DECODE_FUSED_COMBINE=1 at 8-row tiles, head_dim <= 128 and <= 32
// slices; other fused launches take the full instance and its merge_if_last). The fused combine stays opt-in:
// even lean it measured 2.2-4.4 % slower end to end than the combine kernel (H100: 1B, 8B bf16 and 4-bit).
template <int kD, int kRows, int kDepth>
int lean_kind(const DecodeArgs& a) {
  const bool lean =
      cluster_lean_ok(a) && early_kv() &&
      (kDepth > 1 || (a.max_slice_keys > 0 && a.max_slice_keys <= MmaShape<kD, kRows>::kStreams * kTile));
  if (!lean) return 0;
  if (a.counters == nullptr) return 1;
  return kRows == 8 && kD <= 128 && a.n_splits <= kLeanMergeSlices ? 2 : 0;
}

template <int kD, int kRows>
bool one_stage(const DecodeArgs& a) {
  static const int forced = env_int("BUNSEN_DECODE_STAGES", 0);
  if (forced == 1 || forced == kStages) return forced == 1;
  return a.max_slice_keys > 0 && a.max_slice_keys <= MmaShape<kD, kRows>::kStreams * kTile;
}

template <int kD, int kRows, bool kCluster, int kPack, int kDepth = kStages, bool kBulk = false,
          int kLean = 0>
void launch_shape(cudaStream_t s, const DecodeArgs& args, int n_kv_heads) {
  if constexpr (!kCluster && kPack == 0 && kDepth == kStages && kD <= 128)
    if (one_stage<kD, kRows>(args)) return launch_shape<kD, kRows, false, 0, 1>(s, args, n_kv_heads);
  if constexpr (!kCluster && kPack == 0 && !kLean && (kDepth == 1 || kDepth == kStages)) {
    const int kind = lean_kind<kD, kRows, kDepth>(args);
    if (kind == 1) return launch_shape<kD, kRows, false, 0, kDepth, false, 1>(s, args, n_kv_heads);
    if constexpr (kRows == 8 && kD <= 128)
      if (kind == 2) return launch_shape<kD, kRows, false, 0, kDepth, false, 2>(s, args, n_kv_heads);
  }
  if constexpr (kCluster && !kLean)
    if (cluster_lean_ok(args)) return launch_shape<kD, kRows, true, 0, kDepth, false, 1>(s, args, n_kv_heads);
  if constexpr (kPack > 0 && !kBulk)
    if (bulk_wanted() && bulk_binary_ok(reinterpret_cast<const void*>(
                             decode_mma_kernel<kD, kRows, false, kPack, kDepth, true>)))
      return launch_shape<kD, kRows, false, kPack, kDepth, true>(s, args, n_kv_heads);
  if constexpr (kPack == 4 && kD == 128 && kRows == 8 && kDepth == kStages)  // (a measurement tool)
    if (g_probe_depth.load() == 5)
      return launch_shape<kD, kRows, false, kPack, 5, kBulk>(s, args, n_kv_heads);
  DecodeArgs a = args;
  a.balance_barriers = barrier_balance() ? 1 : 0;
  a.early_kv = !kCluster && kPack == 0 && early_kv() ? 1 : 0;
  constexpr size_t kSmem = smem_of<kD, kRows, kPack, kDepth, kBulk>();
  auto kernel = decode_mma_kernel<kD, kRows, kCluster, kPack, kDepth, kBulk, kLean>;
  prepare<kD, kRows, kCluster, kPack, kDepth, kBulk, kLean>(reinterpret_cast<const void*>(kernel), kSmem);
  const dim3 grid(a.n_tokens, kPack > 0 ? (n_kv_heads + kPack - 1) / kPack : n_kv_heads, a.n_splits);
  if constexpr (kPack > 0) {
    check_cuda(launch_pdl(kernel, grid, dim3(32 * kPack), kSmem, s, a), "paged_attention", [&] {
      return strfmt("(packed flash-decoding kernel%s, %d warps, grid [%d, %u, %d], %zu bytes)",
                    kBulk ? " (bulk copies)" : "", kPack, a.n_tokens, grid.y, a.n_splits, kSmem);
    });
  } else if constexpr (!kCluster) {
    check_cuda(launch_pdl(kernel, grid, dim3(kThreads), kSmem, s, a), "paged_attention",
               [] { return std::string("(flash-decoding slice kernel)"); });
  } else {
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = static_cast<unsigned>(a.n_splits);  // a row's slices: one cluster
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    check_cuda(cudaLaunchKernelEx(&cfg, kernel, a), "paged_attention", [&] {
      return strfmt("(flash-decoding cluster kernel, grid [%d, %d, %d], clusters of %d blocks of %zu bytes)",
                    a.n_tokens, n_kv_heads, a.n_splits, a.n_splits, kSmem);
    });
  }
}

template <int kD, bool kCluster, int kPack = 0>
void launch_head_dim(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  if (a.group <= 8)
    launch_shape<kD, 8, kCluster, kPack>(s, a, n_kv_heads);
  else
    launch_shape<kD, 16, kCluster, kPack>(s, a, n_kv_heads);
}

template <bool kCluster>
void launch_any(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  switch (a.head_dim) {
    case 64:
      return launch_head_dim<64, kCluster>(s, a, n_kv_heads);
    case 128:
      return launch_head_dim<128, kCluster>(s, a, n_kv_heads);
    case 256:
      return launch_head_dim<256, kCluster>(s, a, n_kv_heads);
    default:
      return launch_head_dim<512, kCluster>(s, a, n_kv_heads);
  }
}

// f(MmaShape<kD, kRows>{}) for the instance that serves (head_dim, group).
template <class F>
auto with_shape(int head_dim, int group, F&& f) {
  const bool wide = group > 8;
  switch (head_dim) {
    case 64:
      return wide ? f(MmaShape<64, 16>{}) : f(MmaShape<64, 8>{});
    case 128:
      return wide ? f(MmaShape<128, 16>{}) : f(MmaShape<128, 8>{});
    case 256:
      return wide ? f(MmaShape<256, 16>{}) : f(MmaShape<256, 8>{});
    default:
      return wide ? f(MmaShape<512, 16>{}) : f(MmaShape<512, 8>{});
  }
}

}  // namespace

bool mma_decode_ok(int64_t head_dim, int64_t group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512) && group >= 1 &&
         group <= kMmaMaxGroup;
}

int mma_min_keys(int head_dim, int group) {
  return with_shape(head_dim, group, [](auto s) { return decltype(s)::kStreams * kTile; });
}

int mma_blocks_per_sm(int head_dim, int group) {
  const size_t smem = with_shape(head_dim, group, [](auto s) { return decltype(s)::kSmem; });
  return std::max(1, static_cast<int>((227u << 10) / (smem + 1024)));
}

void launch_decode_mma(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  launch_any<false>(s, a, n_kv_heads);
}

bool mma_packed_ok(int64_t head_dim, int64_t group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kMmaMaxGroup;
}

int mma_packed_blocks_per_sm(int head_dim, int group, int warps) {
  const bool bulk = bulk_wanted();  // (a binary without sm_90 code falls back to the smaller cp.async ring)
  const size_t ring = with_shape(head_dim, group, [bulk](auto s) {
    using S = decltype(s);
    return bulk ? size_t{Ring<S, true>::kWarp + Ring<S, true>::kBarBytes} : size_t{Ring<S, false>::kWarp};
  });
  return std::max(1, static_cast<int>((227u << 10) / (ring * static_cast<size_t>(warps) + 1024)));
}

template <int kPack>
void launch_packed(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  if (a.head_dim == 64)
    launch_head_dim<64, false, kPack>(s, a, n_kv_heads);
  else
    launch_head_dim<128, false, kPack>(s, a, n_kv_heads);
}

void launch_decode_mma_packed(cudaStream_t s, const DecodeArgs& a, int n_kv_heads, int warps) {
  if (a.counters != nullptr || !mma_packed_ok(a.head_dim, a.group) || (warps != 4 && warps != 8))
    throw Error("cuda", strfmt("paged_attention: the packed decode kernel takes head_dim 64 or 128, <= %d heads "
                               "per kv head, 4 or 8 warps and no fused combine; got head_dim %d, group %d, "
                               "%d warps, counters %s",
                               kMmaMaxGroup, a.head_dim, a.group, warps, a.counters ? "set" : "null"));
  if (warps == 4)
    launch_packed<4>(s, a, n_kv_heads);
  else
    launch_packed<8>(s, a, n_kv_heads);
}

void launch_decode_mma_cluster(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  if (a.n_splits < 1 || a.n_splits > kMaxCluster)
    throw Error("cuda", strfmt("paged_attention: cluster decode needs 1..%d slices per row, got %d", kMaxCluster,
                               a.n_splits));
  launch_any<true>(s, a, n_kv_heads);
}

}  // namespace bunsen::kernels::cuda::decode

namespace bunsen::kernels::cuda {

void set_attention_decode_bulk_for_testing(int mode) {
  decode::g_bulk.store(mode);
}

void set_attention_decode_packed_depth_for_testing(int depth) {
  decode::g_probe_depth.store(depth);
}

}  // namespace bunsen::kernels::cuda
