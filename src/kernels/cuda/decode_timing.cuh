// Block timelines of the decode attention kernels, a diagnostic (BUNSEN_DECODE_TIMING=file.csv): thread 0 of
// every slice-kernel and combine-kernel block appends one record of %globaltimer stamps (entry, after the
// PDL wait, first key tile landed, after the key loop, exit) with its SM and block index, so a launch's
// straggler can be named (late placement, a long wait, a slow loop or a slow epilogue). The kernels check one
// pointer argument (null in production: one uniform branch per stamp). Host side in attention_decode.cu: the
// buffer is allocated on the first eager (not captured) launch and written out at process exit; launches
// while a graph is captured before that record nothing. Invariant: records past `cap` are dropped, never
// written.
#pragma once
#include <cstdint>

namespace bunsen::kernels::cuda::decode {

enum : uint32_t { kTimingSlice = 0, kTimingCombine = 1 };

struct BlockTimes {
  // ns: entry, after the PDL wait, warp 0's first tile landed (slice) / loads issued (combine), after the key
  // loop (slice) / merge (combine), exit
  uint64_t t[5];
  uint32_t smid, block;  // slice kernel: x | y << 12 | z << 22 (row, kv head, slice); combine: x
  uint32_t tag;          // kind | layer << 4 (layer: the host's ordinal of the cache pointer)
  uint32_t keys;         // keys of the slice (slice kernel) or slices merged (combine)
};

struct TimingBuffer {
  unsigned next;  // records appended so far (may pass cap)
  unsigned cap;
  BlockTimes rec[1];  // cap records
};

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 appends (t0, t1, t2, t3, now) for this block; no-op when `buf` is null.
__device__ __forceinline__ void record_block(TimingBuffer* buf, uint32_t kind, int layer, uint32_t block,
                                             uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3, int keys) {
  if (buf == nullptr || threadIdx.x != 0) return;
  const uint64_t t4 = global_ns();
  const unsigned i = atomicAdd(&buf->next, 1u);
  if (i >= buf->cap) return;
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  BlockTimes& r = buf->rec[i];
  r.t[0] = t0;
  r.t[1] = t1;
  r.t[2] = t2;
  r.t[3] = t3;
  r.t[4] = t4;
  r.smid = smid;
  r.block = block;
  r.tag = kind | static_cast<uint32_t>(layer) << 4;
  r.keys = static_cast<uint32_t>(keys);
}

__device__ __forceinline__ uint64_t stamp_if(const TimingBuffer* buf) {
  return buf != nullptr ? global_ns() : 0;
}

}  // namespace bunsen::kernels::cuda::decode
