// Pieces shared by the flash-decoding kernels (attention_decode.cu: SIMT, any head_dim % 8 == 0 up to 256;
// attention_decode_mma.cu: tensor cores, head_dim 64/128/256/512, bf16 q): the launch arguments, the per-row
// key slicing both the slice kernels and the combine derive on the device, block-table lookup, cp.async
// wrappers and the block epilogue that merges the warps' softmax states and writes a row or a partial, then
// (fused combine) lets the last slice block of a (row, kv head) to finish merge the partials into the row.
// Not a public interface. Invariants: scores live in the log2 domain (q·k·scale·log2e); a state is
// (max m, sum l, acc); NaN poisons l and acc but never m (fmaxf ignores NaN); arrival counters are zero
// between launches (the last block resets its own); a slice kernel calls pdl_wait() before it reads
// anything the step's kernels write and only then pdl_launch_dependents(), so a dependent (the combine
// kernel) may read positions at once.
// The cluster path (cluster_merge) instead merges a row's slices through distributed shared memory: the
// slice blocks of one (row, kv head) form one thread-block cluster, so no partials and no second launch.
#pragma once
#include <cooperative_groups.h>

#include <cstdint>

#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/decode_timing.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda::decode {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxSplits = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

struct DecodeArgs : PagedArgs {
  DType q_dtype = DType::kF32;
  int n_heads = 0, head_dim = 0;
  int n_splits = 1;           // gridDim.z: the most key slices one row may use
  int min_keys = 32;          // a row uses no more slices than ceil(visible keys / min_keys)
  int block_shift = -1;       // log2(block_size) when it is a power of two, else -1
  float* partials = nullptr;  // [n_tokens, n_heads, n_splits, head_dim + 2] f32: max (log2), sum, acc
  // [n_tokens, n_kv_heads] arrivals of a row's slice blocks (fused combine: the last one merges and
  // resets it to 0); null: combine_kernel merges the partials in a second launch.
  unsigned* counters = nullptr;
  // Tensor-core kernel, head_dim 256: the key stream with fewer tiles passes its named barrier again until
  // both streams passed as many (see decode_mma_kernel; for compute-sanitizer racecheck, which pairs
  // barriers by count). 0 only to reproduce racecheck's report (BUNSEN_DECODE_BARRIER_BALANCE=0).
  int balance_barriers = 1;
  // Tensor-core split instance: copy the row's keys below its newest block before the PDL wait (as the
  // cluster instance does), Q and the newest block after it. BUNSEN_DECODE_EARLY=0 turns it off.
  int early_kv = 0;
  // combine_kernel lets its dependent (the o-projection) launch once its own wait has returned (the slice
  // kernel has completed, so its blocks no longer hold the SMs); BUNSEN_DECODE_COMBINE_TRIGGER=0: at its end.
  int combine_trigger = 1;
  // combine_kernel's blocks ask L2 to fetch [prefetch, prefetch + prefetch_bytes) (a slice each, 16-byte
  // multiples) before their wait, while the slice kernel runs: the o-projection then streams its weights from
  // L2. Null: nothing. DevAttention::prefetch capped by BUNSEN_L2_PREFETCH (MB).
  const char* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
  // Host only: the longest slice any row of this launch can get (the block table's width / n_splits), so the
  // tensor-core split kernel can pick its ring depth by host scalars (graph-safe); 0 = unknown.
  int max_slice_keys = 0;
  // Diagnostics only (BUNSEN_DECODE_TIMING): per-block timestamps of the slice and combine kernels, see
  // decode_timing.cuh; null in production. timing_layer: which layer's launch (the host's ordinal).
  TimingBuffer* timing = nullptr;
  int timing_layer = 0;
};

// The visible key range [lo, lo + n_keys) of a query at `pos` and how it is sliced. Every slice below
// n_act is non-empty. Shared by all kernels, so they agree on which partials exist.
struct Slices {
  int lo, n_keys, n_act, len;
};

__device__ __forceinline__ Slices slices_of(const DecodeArgs& a, int pos) {
  Slices s;
  s.lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  s.n_keys = pos + 1 - s.lo;
  if (s.n_keys <= 0) {  // nothing visible: one empty slice, 0 / 0 = NaN as in the other kernels
    s.n_keys = 0;
    s.n_act = 1;
    s.len = 0;
    return s;
  }
  const int want = max(1, min(a.n_splits, (s.n_keys + a.min_keys - 1) / a.min_keys));
  s.len = (s.n_keys + want - 1) / want;
  s.n_act = (s.n_keys + s.len - 1) / s.len;
  return s;
}

// Weight of a state with max m when the merged max is mx (both -inf: keep the sums, which are 0 or NaN).
__device__ __forceinline__ float rescale(float m, float mx) {
  return mx == -INFINITY ? 1.0f : exp2f(m - mx);
}

// Where a block stands: its row t, kv head g, slice [k0, k1). `live` is false for surplus slice blocks
// (uniform over the block).
struct Where {
  int t, g, split, seq, k0, k1;
  bool live;
  Slices sl;
};

__device__ __forceinline__ Where where_am_i(const DecodeArgs& a) {
  Where w;
  w.t = blockIdx.x;
  w.g = blockIdx.y;
  w.split = blockIdx.z;
  w.seq = a.seq_index[w.t];
  w.sl = slices_of(a, a.positions[w.t]);
  w.live = w.split < w.sl.n_act;
  w.k0 = w.sl.lo + w.split * w.sl.len;
  w.k1 = min(w.sl.lo + w.sl.n_keys, w.k0 + w.sl.len);
  return w;
}

// Where slice w.split of row w.t writes head `head`'s partial: [m, l, o[0..head_dim)], the layout
// combine_kernel merges.
__device__ __forceinline__ float* partial_of(const DecodeArgs& a, const Where& w, int head) {
  return a.partials +
         ((static_cast<int64_t>(w.t) * a.n_heads + head) * a.n_splits + w.split) * (a.head_dim + 2);
}

// The slice kernels' prologue: waits for the kernel before it on the stream (they are launched with
// programmatic dependent launch, so their blocks get resident while that one finishes; the wait comes
// before any read), then lets a dependent (the combine kernel, or the next layer's kernel) get its blocks
// resident while this grid runs; a dependent still waits (griddepcontrol.wait) for this grid's completion.
__device__ __forceinline__ void slice_prologue() {
  pdl_wait();
  pdl_launch_dependents();
}

// Index of `key`'s block in its row's block table. kShift: the caller knows block_size is a power of two
// (block_shift >= 0), so no division is compiled (a lean instance's code size, see attention_decode_mma.cu).
template <bool kShift = false>
__device__ __forceinline__ int block_index(const DecodeArgs& a, int key) {
  return kShift || a.block_shift >= 0 ? key >> a.block_shift : key / a.block_size;
}

// Physical block of `key` (< the row's end) and its offset in it; -1 for an invalid sequence or block id.
template <bool kShift = false>
__device__ __forceinline__ int block_of(const DecodeArgs& a, const int32_t* table, bool seq_ok, int key,
                                        int& off) {
  if (!seq_ok) return -1;
  const int bi = block_index<kShift>(a, key);
  if (bi >= a.max_blocks) return -1;
  const int b = table[bi];
  off = key - bi * a.block_size;
  return b >= 0 && b < a.n_blocks ? b : -1;
}

// The merge weights of a row's n slices, whose partials (m, l, acc[D]) start at `part` every D + 2 floats:
// lane's slices s = lane + 32 i get ws[i] = 2^(m_s - max m) (0 past n); returns sum_s ws_s l_s. m and l of
// all slices in one round trip; the butterfly reductions give every lane of every warp the same bits, so the
// fused combine (merge_if_last) and combine_kernel merge identically.
constexpr int kSlicesPerLane = kMaxSplits / 32;
// kPer < kSlicesPerLane: the caller knows n <= 32 kPer (the same bits: the slices past n weigh nothing).
// kShared: `part` is a copy of the partials in shared memory (the staged combine), read with plain loads.
template <int kPer = kSlicesPerLane, bool kShared = false>
__device__ __forceinline__ float slice_weights(const float* part, int n, int D, int lane, float (&ws)[kPer]) {
  auto ld = [](const float* p) { return kShared ? *p : __ldcg(p); };
  float ms[kPer], ls[kPer];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int s = lane + 32 * i;
    ms[i] = s < n ? ld(part + s * (D + 2)) : -INFINITY;
    ls[i] = s < n ? ld(part + s * (D + 2) + 1) : 0.0f;
    mx = fmaxf(mx, ms[i]);
  }
  mx = warp_max(mx);
  float den = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    ws[i] = 0.0f;
    if (lane + 32 * i < n) {
      ws[i] = rescale(ms[i], mx);
      den += ws[i] * ls[i];
    }
  }
  return warp_sum(den);
}

// The fused combine's count, after every thread of this block wrote its part of its slice's partial: counts
// the block in (the partials made visible GPU-wide first); true in the last of the row's n_act blocks to
// arrive (atomicInc wraps its counter back to 0 for the next launch or graph replay). flag: a float of shared
// memory that no thread reads any more. Uniform over the block.
// Release: every thread fences its partial stores, the barrier orders them before thread 0's fence and count
// (the pattern of cooperative groups' grid sync); acquire: the last block's thread 0 fences after the count,
// the barrier orders the block's reads (through L2, not L1) after it.
__device__ __forceinline__ bool arrived_last(const DecodeArgs& a, const Where& w, float* flag) {
  const int n = w.sl.n_act;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned old =
        atomicInc(a.counters + static_cast<int64_t>(w.t) * gridDim.y + w.g, static_cast<unsigned>(n - 1));
    const bool last = old == static_cast<unsigned>(n - 1);
    if (last) __threadfence();
    *flag = last ? 1.0f : 0.0f;
  }
  __syncthreads();
  return *flag != 0.0f;
}

// The fused combine: the last slice block of a (row, kv head) to arrive (arrived_last) merges the n_act
// partials of the kG heads of its kv head into out[t, head] as combine_kernel does (same order:
// bit-identical). sm: kG * (kMaxSplits + 1) + 1 floats of shared memory that no thread reads any more.
template <int kG>
__device__ __forceinline__ void merge_if_last(const DecodeArgs& a, const Where& w, float* sm) {
  float* wts = sm;                           // [kG][kMaxSplits] slice weights 2^(m_s - max m)
  float* inv = sm + kG * kMaxSplits;         // [kG] 1 / sum_s w_s l_s
  float* flag = sm + kG * (kMaxSplits + 1);  // 1: this block arrived last
  const int n = w.sl.n_act;
  if (!arrived_last(a, w, flag)) return;
  const int D = a.head_dim, G = a.group, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* part0 = a.partials + (static_cast<int64_t>(w.t) * a.n_heads + w.g * G) * a.n_splits * (D + 2);
  for (int h = warp; h < G; h += kWarps) {
    const float* part = part0 + static_cast<int64_t>(h) * a.n_splits * (D + 2);
    float ws[kSlicesPerLane];
    const float den = slice_weights(part, n, D, lane, ws);
#pragma unroll
    for (int i = 0; i < kSlicesPerLane; ++i)
      if (lane + 32 * i < n) wts[h * kMaxSplits + lane + 32 * i] = ws[i];
    if (lane == 0) inv[h] = 1.0f / den;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int h = idx / D, d = idx - h * D;
    const float* part = part0 + static_cast<int64_t>(h) * a.n_splits * (D + 2) + 2 + d;
    const float* ws = wts + h * kMaxSplits;
    // Chains by slice index mod 4 and the tail into chain 0, as combine_kernel; the loads of 16 slices
    // are issued before their FMAs (one L2 round trip per 16 slices, not per 4).
    float num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int s = 0;
    for (; s + 16 <= n; s += 16) {
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = __ldcg(part + (s + i) * (D + 2));
#pragma unroll
      for (int i = 0; i < 16; ++i) num[i % 4] = fmaf(ws[s + i], v[i], num[i % 4]);
    }
    for (; s + 4 <= n; s += 4) {
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = __ldcg(part + (s + i) * (D + 2));
#pragma unroll
      for (int i = 0; i < 4; ++i) num[i] = fmaf(ws[s + i], v[i], num[i]);
    }
    for (; s < n; ++s) num[0] = fmaf(ws[s], __ldcg(part + s * (D + 2)), num[0]);
    store_any(a.out, a.out_dtype, w.t * a.o_ts + (w.g * G + h) * a.o_hs + d,
              (num[0] + num[1] + num[2] + num[3]) * inv[h]);
  }
}

// The lean fused combine (the lean split instances at kG 8, kD <= 128, rows of <= 32 slices; see
// attention_decode_mma.cu's lean_kind): merge_if_last's merge with its loads batched, since the last block's
// merge is on the step's critical path and an L2 round trip per 4 or 16 slices and output adds up. Thread i
// owns outputs i + kThreads j, taken kJ at a time (j chunks past G x D are skipped: uniform); a chunk's acc
// is loaded kB slices at a time (kJ x kB = 64 registers), the first batch together with the slice weights
// (one trip; at head_dim 64 and <= 32 slices that is the only one). Same weights, order and arithmetic as
// merge_if_last and combine_kernel: the same bits.
constexpr int kLeanMergeSlices = 32;  // the most slices merge_if_last_lean takes (one per lane)
static_assert(kLeanMergeSlices == 32, "slice_weights<1>: one slice per lane");
template <int kG, int kD>
__device__ __forceinline__ void merge_if_last_lean(const DecodeArgs& a, const Where& w, float* sm) {
  constexpr int kJ = kD <= 64 ? 2 : 4, kB = 64 / kJ, kOut = kG * kD / kThreads;
  static_assert(kOut % kJ == 0 && kLeanMergeSlices % kB == 0 && kB % 4 == 0,
                "batches of whole chains: s % 4 = i % 4");
  float* wts = sm;                          // [kG][kLeanMergeSlices] slice weights (0 past n)
  float* inv = sm + kG * kLeanMergeSlices;  // [kG] 1 / sum_s w_s l_s
  if (!arrived_last(a, w, inv + kG)) return;
  const int n = w.sl.n_act, D = a.head_dim, G = a.group, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hs = static_cast<int64_t>(a.n_splits) * (D + 2);  // one head's partials
  const float* part0 = a.partials + (static_cast<int64_t>(w.t) * a.n_heads + w.g * G) * hs;
  const int n4 = n & ~3;  // chains by slice index mod 4 below n4, the tail into chain 0
  for (int j0 = 0; j0 < kOut && kThreads * j0 < G * D; j0 += kJ) {
    const float* src[kJ];  // output j0 + j's acc in slice 0 (null past G x D)
    int hj[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int idx = threadIdx.x + kThreads * (j0 + j), h = idx / D;
      hj[j] = idx < G * D ? h : 0;
      src[j] = idx < G * D ? part0 + h * hs + 2 + (idx - h * D) : nullptr;
    }
    float num[kJ][4] = {};
    for (int s0 = 0; s0 < n; s0 += kB) {
      float v[kJ][kB];
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int i = 0; i < kB; ++i)
          v[j][i] = src[j] != nullptr && s0 + i < n ? __ldcg(src[j] + (s0 + i) * (D + 2)) : 0.0f;
      if (j0 == 0 && s0 == 0) {  // the weights, while the first batch flies (uniform)
        for (int h = warp; h < G; h += kWarps) {
          float ws[1];
          const float den = slice_weights<1>(part0 + h * hs, n, D, lane, ws);
          wts[h * kLeanMergeSlices + lane] = ws[0];
          if (lane == 0) inv[h] = 1.0f / den;
        }
        __syncthreads();
      }
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int i = 0; i < kB; ++i) {  // the same sums by selects instead of branches (less code)
          const int s = s0 + i;
          const float wt = wts[hj[j] * kLeanMergeSlices + s], a4 = fmaf(wt, v[j][i], num[j][i % 4]),
                      a0 = fmaf(wt, v[j][i], num[j][0]);
          num[j][i % 4] = s < n4 ? a4 : num[j][i % 4];
          num[j][0] = s >= n4 && s < n ? a0 : num[j][0];
        }
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      if (src[j] == nullptr) continue;
      const int idx = threadIdx.x + kThreads * (j0 + j), h = hj[j];
      store_any(a.out, a.out_dtype, w.t * a.o_ts + (w.g * G + h) * a.o_hs + (idx - h * D),
                (num[j][0] + num[j][1] + num[j][2] + num[j][3]) * inv[h]);
    }
  }
}

// The merge of a block's kStates key streams for head h, dim d of red [kStates][kG][kD + 2] (each stream's
// m, l, acc): the common max mx, the rescaled sum den and the rescaled acc num.
template <int kG, int kD, int kStates>
__device__ __forceinline__ void merge_streams(const float* red, int h, int d, float& mx, float& den, float& num) {
  mx = -INFINITY;
#pragma unroll
  for (int v = 0; v < kStates; ++v) mx = fmaxf(mx, red[(v * kG + h) * (kD + 2)]);
  den = 0.0f;
  num = 0.0f;
#pragma unroll
  for (int v = 0; v < kStates; ++v) {
    const float* r = red + (v * kG + h) * (kD + 2);
    const float f = rescale(r[0], mx);
    den += f * r[1];
    num += f * r[2 + d];
  }
}

// Block epilogue. red [kStates][kG][kD + 2] f32 holds each warp's (or key stream's) (m, l, acc[head_dim])
// per head of the group; merges them and writes out[t, head] (one slice) or this slice's partial, then
// (fused combine) reuses red for merge_if_last (kCombine 1) or merge_if_last_lean (2); 0: no fused combine.
template <int kG, int kD, int kStates = kWarps, int kCombine = 1>
__device__ __forceinline__ void write_block(const DecodeArgs& a, float* red, const Where& w) {
  static_assert(kStates * kG * (kD + 2) >= kG * (kMaxSplits + 1) + 1, "red holds merge_if_last's weights");
  __syncthreads();
  const int D = a.head_dim, G = a.group;
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int h = idx / D, d = idx - h * D, head = w.g * G + h;
    float mx, den, num;
    merge_streams<kG, kD, kStates>(red, h, d, mx, den, num);
    if (w.sl.n_act == 1) {
      store_any(a.out, a.out_dtype, w.t * a.o_ts + head * a.o_hs + d, num / den);
    } else {
      float* part = partial_of(a, w, head);
      if (d == 0) {
        part[0] = mx;
        part[1] = den;
      }
      part[2 + d] = num;
    }
  }
  if (w.sl.n_act > 1 && a.counters != nullptr) {  // uniform over the block
    if constexpr (kCombine == 1) merge_if_last<kG>(a, w, red);
    if constexpr (kCombine == 2) merge_if_last_lean<kG, kD>(a, w, red);
  }
}

// Cluster epilogue: red [kStates][kG][kD + 2] as for write_block; st [kG][kD + 2] f32 of this block's shared
// memory that no thread reads any more. Merges the block's streams into st (this slice's state: m, l, acc),
// then, after a cluster barrier, each block of the cluster (all gridDim.z slices of one (row, kv head), every
// one of them, live or not, arrives here) merges all slices' states read through distributed shared memory
// for its share of the kG x head_dim outputs, in slice order (deterministic), and writes them; a second
// cluster barrier keeps every block's st alive until the others have read it. A surplus slice's state is
// (-inf, 0, 0): weight 0 next to a live slice; a row with no visible key merges to 0 / 0 = NaN as before.
constexpr int kMaxCluster = 16;  // cluster size limit with cudaFuncAttributeNonPortableClusterSizeAllowed
template <int kG, int kD, int kStates>
__device__ __forceinline__ void cluster_merge(const DecodeArgs& a, const float* red, float* st, const Where& w) {
  namespace cg = cooperative_groups;
  __syncthreads();
  const int D = a.head_dim, G = a.group;
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int h = idx / D, d = idx - h * D;
    float mx, den, num;
    merge_streams<kG, kD, kStates>(red, h, d, mx, den, num);
    if (d == 0) {
      st[h * (kD + 2)] = mx;
      st[h * (kD + 2) + 1] = den;
    }
    st[h * (kD + 2) + 2 + d] = num;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // release / acquire: every slice's st is complete and visible cluster-wide
  const int n = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  for (int idx = rank * kThreads + threadIdx.x; idx < G * D; idx += n * kThreads) {
    const int h = idx / D, d = idx - h * D;
    float ms[kMaxCluster], ls[kMaxCluster], vs[kMaxCluster];
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) {  // all remote loads first: one DSMEM round trip
      if (s < n) {
        const float* r = cluster.map_shared_rank(st, s) + h * (kD + 2);
        ms[s] = r[0];
        ls[s] = r[1];
        vs[s] = r[2 + d];
      } else {
        ms[s] = -INFINITY;
        ls[s] = vs[s] = 0.0f;
      }
    }
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) mx = fmaxf(mx, ms[s]);
    float den = 0.0f, num = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) {
      if (s < n) {
        const float f = rescale(ms[s], mx);
        den += f * ls[s];
        num += f * vs[s];
      }
    }
    store_any(a.out, a.out_dtype, w.t * a.o_ts + (w.g * G + h) * a.o_hs + d, num / den);
  }
  cluster.sync();  // no block leaves (and frees its st) while another still reads it
}

// The tensor-core slice kernel (attention_decode_mma.cu) for head_dim 64/128/256/512 with bf16 q and cache
// and up to kMmaMaxGroup query heads per kv head.
constexpr int kMmaMaxGroup = 16;
bool mma_decode_ok(int64_t head_dim, int64_t group);
void launch_decode_mma(cudaStream_t s, const DecodeArgs& a, int n_kv_heads);
// Its cluster variant (BUNSEN_DECODE_ATTN=cluster): a.n_splits (<= kMaxCluster) slice blocks of a (row, kv
// head) form one cluster and merge through distributed shared memory (cluster_merge; a.partials unused);
// each block issues the cp.async copies of its first tiles' keys older than the block of the row's
// position before its programmatic-dependent-launch wait (the step metadata is copied from the host before
// the step; only the current block's keys are written by the kernel before), the rest and Q after it.
void launch_decode_mma_cluster(cudaStream_t s, const DecodeArgs& a, int n_kv_heads);
// Its packed variant for batched decode steps (BUNSEN_DECODE_BATCHED): head_dim 64/128, blocks of `warps` (4
// or 8) warps, each warp one kv head of the row (grid [n_tokens, ceil(n_kv_heads / warps), n_splits])
// streaming the whole slice; a.counters must be null (rows of several slices merge in combine_kernel); with
// BUNSEN_DECODE_BULK=1 on sm_90 each key row of a tile arrives by one bulk copy (see decode_mma_kernel).
bool mma_packed_ok(int64_t head_dim, int64_t group);
void launch_decode_mma_packed(cudaStream_t s, const DecodeArgs& a, int n_kv_heads, int warps);
int mma_packed_blocks_per_sm(int head_dim, int group, int warps);  // shared memory bound
int mma_min_keys(int head_dim, int group);  // one key tile per key stream of a block
// Resident blocks of that kernel per SM (shared memory bound).
int mma_blocks_per_sm(int head_dim, int group);
// The packed kernel for a quantized cache (attention_decode_qmma.cu): int8, int4 or fp8 codes in groups of
// 32, 64 or 128 dims, head_dim 64/128, <= 8 query heads per kv head, bf16 or f32 q; the same grid and
// partials as launch_decode_mma_packed; `c` is the quantized cache. Only where BUNSEN_DECODE_QUANT_MMA=1
// (or the testing switch) turns it on; else the SIMT kernel.
bool qmma_packed_ok(const DevCache& c, int64_t head_dim, int64_t group, DType q_dtype);
void launch_decode_qmma_packed(cudaStream_t s, const DecodeArgs& a, int n_kv_heads, int warps,
                               const DevCache& c);
int qmma_packed_blocks_per_sm(int head_dim, int warps, int bits);  // shared memory bound

// attention_combine.cu: the combine kernel for the partials of a (split or packed) launch of a.n_splits > 1
// slices, launched with programmatic dependent launch after it; at gives the grid (rows x heads) and the
// o-projection's weights to prefetch (BUNSEN_L2_PREFETCH).
void launch_combine(cudaStream_t s, DecodeArgs a, const DevAttention& at);

}  // namespace bunsen::kernels::cuda::decode
