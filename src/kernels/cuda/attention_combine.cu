// The combine kernel of flash-decoding's split and packed paths (attention_decode.cu): merges the partials
// of a row's key slices, one block per (query row, head), launched with programmatic dependent launch right
// after the slice kernel so its blocks are resident and wait for the partials. Rows with one slice were
// written by the slice kernel. Lean launches may take a staged form (combine_staged_kernel: the partials
// through shared memory, rolled loops, less code). The fused combine (merge_if_last, merge_if_last_lean in
// attention_decode_common.cuh) merges in the same order: the same bits. Not a public interface.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/env.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_decode_common.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda {
namespace {

using namespace decode;

// out[t, h] = sum_s w_s acc_s / sum_s w_s l_s, w_s = 2^(m_s - max m), over the row's n_act slices. Rows
// with one slice were written by the slice kernel. The unfused path (merge_if_last does the same in the
// slice kernel, in the same order: bit-identical); reads positions before its wait, which the slice kernel's
// prologue order allows. Latency-bound at batch 1 (a block per head, a few KB of partials), so every load
// a thread needs for its first dims is issued before any of them is used: each warp loads the (m, l) of
// slices lane + 32 i and each thread the acc of its dim for the first kCombineBatch slices, one L2 round
// trip after the wait; every warp then reduces m and l itself (slice_weights, as merge_if_last: the same bits
// in every warp) and takes a slice's weight from its lane by a shuffle.
constexpr int kCombineBatch = 32;  // slices whose acc a thread loads at once (one per lane: the shuffles)
constexpr int64_t kPrefetchPiece = 1 << 20;  // bytes per bulk L2 prefetch instruction
static_assert(kCombineBatch == 32, "slice s0 + j's weight is lane j's");
// A combine block's wait for the slice kernel; true (recorded, nothing to merge) for a row of n <= 1 slices,
// which the slice kernel wrote. Every block waits, rows with one slice too: the next kernel's wait covers
// this grid only, so this grid completes after the slice kernel (whose single-slice rows it reads) has.
__device__ __forceinline__ bool wait_for_partials(const DecodeArgs& a, int n, uint64_t t_entry,
                                                  uint64_t& t_wait) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the slice kernel's partials are complete
  // The slice kernel has completed (its blocks left the SMs): the next kernel (the o-projection) may get its
  // blocks resident and start its weight loads while this grid merges (BUNSEN_DECODE_COMBINE_TRIGGER=0: only
  // when this grid ends). Measured on the H200, 8B: bf16 +0.6 %, 4-bit +2.4 %, 8-bit +1.4 %; 1B within noise.
  // Earlier triggers lose on the H100 (tok/s): this kernel and the slice kernel both before their waits (the
  // o-projection's blocks resident while q/k/v and the slice kernel run) 1B -6.5 %, 8B -8.9 %, 8B 4-bit
  // +0.8 %; this kernel alone before its wait (resident during the slice kernel) 1B -4.3 %, 8B -8.6 %, 8B
  // 4-bit +0.9 %, 1B 4-bit +0.1 %, 8B 8-bit -30.8 %.
  if (a.combine_trigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  t_wait = stamp_if(a.timing);
  if (n > 1) return false;
  record_block(a.timing, kTimingCombine, a.timing_layer, blockIdx.x, t_entry, t_wait, t_wait, t_wait, n);
  return true;
}

// kLean (see combine_lean_ok): rows of at most kCombineBatch slices, head_dim <= kThreads and no prefetch, so
// one load batch, one pass over the dims and none of the general loops' code: the launch is latency-bound and
// fetches its instructions cold every layer, so its code size is time (39 -> 23 KB of sm_90a code).
template <bool kLean>
__global__ void __launch_bounds__(kThreads) combine_kernel(const DecodeArgs a) {
  const uint64_t t_entry = stamp_if(a.timing);
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row / a.n_heads), D = a.head_dim;
  const Slices sl = slices_of(a, a.positions[t]);  // positions are not written by the slice kernel
  // This block's slice of the next kernel's weights.
  if (!kLean && a.prefetch != nullptr && threadIdx.x == 0) {
    const int64_t total = a.prefetch_bytes & ~int64_t{15}, share = (total / gridDim.x + 15) & ~int64_t{15};
    const int64_t lo = row * share, hi = lo + share < total ? lo + share : total;
    for (int64_t p = lo; p < hi; p += kPrefetchPiece) {
      const unsigned n = static_cast<unsigned>(hi - p < kPrefetchPiece ? hi - p : kPrefetchPiece);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a.prefetch + p), "r"(n) : "memory");
    }
  }
  uint64_t t_wait;
  const int n = sl.n_act;
  if (wait_for_partials(a, n, t_entry, t_wait)) return;
  const int h = static_cast<int>(row % a.n_heads), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* part = a.partials + row * a.n_splits * (D + 2);
  float v[kCombineBatch];
  auto load_acc = [&](int d, int s0) {  // acc of dim d, slices s0 .. s0 + kCombineBatch - 1 (0 past the row)
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j)
      v[j] = d < D && s0 + j < n ? __ldcg(part + (s0 + j) * (D + 2) + 2 + d) : 0.0f;
  };
  const int dw0 = warp * 32;  // this warp's first 32 dims (warp-uniform loop bounds: the shuffles below)
  load_acc(dw0 + lane, 0);    // issued before slice_weights' loads and reductions: one round trip for all
  constexpr int kPer = kLean ? 1 : kSlicesPerLane;  // lean: n <= 32
  float ws[kPer];
  const float den = slice_weights<kPer>(part, n, D, lane, ws);
  const uint64_t t_loaded = stamp_if(a.timing);
  const float inv_den = 1.0f / den;
  const int n4 = n & ~3;  // chains by slice index mod 4 below n4, the tail into chain 0 (as merge_if_last)
  for (int dw = dw0; dw < D && (!kLean || dw == dw0); dw += kThreads) {  // lean: D <= kThreads, one pass
    const int d = dw + lane;
    float num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < (kLean ? 1 : n); s0 += kCombineBatch) {
      if (!kLean && (dw != dw0 || s0 != 0)) load_acc(d, s0);
      float wsrc = ws[0];  // the lanes' weights of slices s0 .. s0 + 31 (s0 / 32 selects the register)
#pragma unroll
      for (int i = 1; i < kPer; ++i)
        if (i == s0 / 32) wsrc = ws[i];
#pragma unroll
      for (int j = 0; j < kCombineBatch; ++j) {
        const float w = __shfl_sync(kFull, wsrc, j);
        const int s = s0 + j;
        if constexpr (kLean) {  // the same sums by selects instead of branches (less code)
          const float a4 = fmaf(w, v[j], num[j % 4]), a0 = fmaf(w, v[j], num[0]);
          num[j % 4] = s < n4 ? a4 : num[j % 4];
          num[0] = s >= n4 && s < n ? a0 : num[0];
        } else if (s < n4) {
          num[j % 4] = fmaf(w, v[j], num[j % 4]);
        } else if (s < n) {
          num[0] = fmaf(w, v[j], num[0]);
        }
      }
    }
    if (d < D)
      store_any(a.out, a.out_dtype, t * a.o_ts + h * a.o_hs + d,
                (num[0] + num[1] + num[2] + num[3]) * inv_den);
  }
  record_block(a.timing, kTimingCombine, a.timing_layer, blockIdx.x, t_entry, t_wait, t_loaded,
               stamp_if(a.timing), n);
}

// The staged lean combine (combine_staged(); the lean kernel's conditions: n <= 32 slices, D <= kThreads):
// after the wait the block copies the head's n partials (n x (D + 2) floats, <= 16.6 KB) into shared memory
// with 16-byte cp.async copies (L2 only) in a rolled loop, all in flight at once, then merges from shared
// memory with rolled loops in combine_kernel's order and arithmetic (the same bits). The lean kernel holds
// its 32 loads per thread in registers, unrolled: 23 KB of sm_90a code that a batch-1 launch fetches cold
// every layer (its 1.4 us of loads after the wait on the H100 1B timeline were more than one L2 trip).
// The copies cover the 16-byte-aligned span around the partials: up to 8 bytes of a neighbour before and
// after (never used; decode_attention asks the arena for 16 bytes past the last partial).
constexpr int kStagedFloats = kCombineBatch * (kThreads + 2) + 4;
__global__ void __launch_bounds__(kThreads) combine_staged_kernel(const DecodeArgs a) {
  __shared__ __align__(16) float sp[kStagedFloats];
  const uint64_t t_entry = stamp_if(a.timing);
  const int row = static_cast<int>(blockIdx.x);  // 32-bit index arithmetic: less code
  const int t = row / a.n_heads, h = row - t * a.n_heads, D = a.head_dim;
  const Slices sl = slices_of(a, a.positions[t]);       // positions are not written by the slice kernel
  uint64_t t_wait;
  const int n = sl.n_act;
  if (wait_for_partials(a, n, t_entry, t_wait)) return;
  const float* part = a.partials + static_cast<int64_t>(row) * a.n_splits * (D + 2);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(part), al = lo & ~uintptr_t{15};
  const int chunks =
      static_cast<int>((lo - al + static_cast<uintptr_t>(n) * (D + 2) * sizeof(float) + 15) / 16);
#pragma unroll 1
  for (int c = threadIdx.x; c < chunks; c += kThreads)
    cp_async_16(sp + 4 * c, reinterpret_cast<const void*>(al + 16 * static_cast<uintptr_t>(c)));
  cp_async_commit_group();
  cp_async_wait_group<0>();
  __syncthreads();
  const float* p = sp + (lo - al) / sizeof(float);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d = warp * 32 + lane;
  if (warp * 32 >= D) return;  // uniform over the warp; thread 0 (warp 0) records below
  float ws[1];
  const float den = slice_weights<1, true>(p, n, D, lane, ws);
  const uint64_t t_loaded = stamp_if(a.timing);
  const float inv_den = 1.0f / den;
  const float* v = p + 2 + (d < D ? d : D - 1);  // lanes past D read a valid dim and store nothing
  const int n4 = n & ~3;  // chains by slice index mod 4 below n4, the tail into chain 0 (as combine_kernel)
  float num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int s = 0;
#pragma unroll 1
  for (; s < n4; s += 4)
#pragma unroll
    for (int j = 0; j < 4; ++j) num[j] = fmaf(__shfl_sync(kFull, ws[0], s + j), v[(s + j) * (D + 2)], num[j]);
#pragma unroll 1
  for (; s < n; ++s) num[0] = fmaf(__shfl_sync(kFull, ws[0], s), v[s * (D + 2)], num[0]);
  if (d < D)
    store_any(a.out, a.out_dtype, t * a.o_ts + h * a.o_hs + d, (num[0] + num[1] + num[2] + num[3]) * inv_den);
  record_block(a.timing, kTimingCombine, a.timing_layer, blockIdx.x, t_entry, t_wait, t_loaded,
               stamp_if(a.timing), n);
}

// The lean combine instance takes the launch (see attention_decode_lean).
bool combine_lean_ok(const DecodeArgs& a) {
  return attention_decode_lean() && a.n_splits <= kCombineBatch && a.head_dim <= kThreads &&
         a.prefetch == nullptr;
}

// Whether lean launches take the staged form: the testing switch, else BUNSEN_DECODE_COMBINE_STAGED (0 / 1,
// read once; default off: against the lean kernel it measured 1B -5.8 %, 8B bf16 -2.9 %, 8B 4-bit +0.3 %,
// H200 batch-1 decode).
std::atomic<int> g_staged{0};  // set_attention_combine_staged_for_testing: 0 the environment; 1 off; 2 on
bool combine_staged() {
  const int mode = g_staged.load();
  if (mode != 0) return mode == 2;
  static const bool on = env_flag("BUNSEN_DECODE_COMBINE_STAGED", false);
  return on;
}

}  // namespace

namespace decode {

void launch_combine(cudaStream_t s, DecodeArgs a, const DevAttention& at) {
  const char* op = "paged_attention";
  auto detail = [&] { return heads_desc("q", at.q) + " (flash-decoding combine)"; };
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(at.q.n_tokens * at.q.n_heads));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  static const bool trigger = env_flag("BUNSEN_DECODE_COMBINE_TRIGGER", true);
  a.combine_trigger = trigger ? 1 : 0;
  static const int64_t prefetch_cap = int64_t{env_int("BUNSEN_L2_PREFETCH", 0)} << 20;
  const int64_t pf = std::min(at.prefetch_bytes, prefetch_cap);
  if (at.prefetch != nullptr && pf >= 16 && reinterpret_cast<uintptr_t>(at.prefetch) % 16 == 0) {
    a.prefetch = static_cast<const char*>(at.prefetch);
    a.prefetch_bytes = pf;
  }
  if (combine_lean_ok(a) && combine_staged())
    check_cuda(cudaLaunchKernelEx(&cfg, combine_staged_kernel, a), op, detail);
  else if (combine_lean_ok(a))
    check_cuda(cudaLaunchKernelEx(&cfg, combine_kernel<true>, a), op, detail);
  else
    check_cuda(cudaLaunchKernelEx(&cfg, combine_kernel<false>, a), op, detail);
}

}  // namespace decode

void set_attention_combine_staged_for_testing(int mode) {
  g_staged.store(mode);
}

}  // namespace bunsen::kernels::cuda
