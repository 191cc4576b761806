// The split-KV merge prologue of gemv.cu's GEMV kernels (linear.cuh's GemvMerge): the o-projection after a
// batch-1 flash-decoding step merges the slice kernel's partials itself, so the decode step has no combine
// launch (one grid completion and one L2 round trip fewer on the attention's critical path) and the GEMV's
// blocks get resident, with their first weight loads, while the slice kernel still runs.
// Every GEMV block needs the whole attention row as its x, so the blocks form thread-block clusters of
// kGemvMergeCluster: block r of a cluster merges the (head, 32-dim chunk) tasks r, r + C, ... and stores each
// merged bf16 value into the shared memory of every block of its cluster (distributed shared memory), then
// the cluster barrier; the GEMV then reads x from its own shared memory as after the norm prologue. The row's
// partials cross L2 once per cluster instead of once per block.
// Invariants: a task's arithmetic is combine_kernel's (attention_decode.cu) for that dim: the same loads,
// slice weights (decode::slice_weights, identical bits in every warp), four chains by slice index mod 4 and
// bf16 rounding, so x is the combined row bit for bit; a row left in one slice is read from `out`, where the
// slice kernel wrote it. Every thread of every block runs arrive() before its PDL wait and prologue() after
// it (uniform: the cluster barriers are aligned). Device code only, included by gemv.cu.
#pragma once
#include <cooperative_groups.h>

#include "kernels/cuda/attention_decode_common.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::gemv_merge {

// A warp's merge stages GemvMerge::batch slices x 32 dims of acc in shared memory (8-byte cp.async, so the
// values take no registers beside the GEMV's early weight loads: the small launches have 64) and sums them
// from there. batch 8, 16 or 32 (32: combine_kernel's kCombineBatch, one round trip for <= 32 slices); the
// batch changes no sum's order.
constexpr int kMaxBatch = 32;
static_assert(kMaxBatch * decode::kSlicesPerLane == decode::kMaxSplits, "slice s's weight is lane s % 32's");

// Shared memory of a launch: x [k] bf16 (16-byte aligned), then each warp's stage.
__host__ __device__ constexpr int64_t smem_bytes(int64_t k, int warps, int batch) {
  return (k * 2 + 15) / 16 * 16 + static_cast<int64_t>(warps) * batch * 32 * 4;
}

// This block is resident: its cluster peers may store into its shared memory once every block arrived
// (the wait at the start of prologue()). Relaxed: nothing is published by it.
__device__ __forceinline__ void arrive() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}

// Copies acc dims [d0, d0 + 32) of slices s0 .. s0 + batch - 1 into stage[j][32] (zeros past the row's n
// slices or head_dim D; D even, so a lane's pair of dims is whole), one commit group.
__device__ __forceinline__ void stage_acc(const float* part, int D, int n, int d0, int s0, int batch,
                                          float* stage, int lane) {
#pragma unroll 4
  for (int i = 0; i < batch / 2; ++i) {
    const int e = i * 32 + lane, j = e / 16, c = 2 * (e % 16);  // slice s0 + j, dims d0 + c, + 1
    const bool ok = s0 + j < n && d0 + c < D;
    cp_async_8_zfill(stage + j * 32 + c, ok ? part + (s0 + j) * (D + 2) + 2 + d0 + c : part, ok ? 8 : 0);
  }
  cp_async_commit_group();
}

// The merged value of dim d0 + lane of one head whose n > 1 partials start at `part`: all lanes of the warp
// call it (the shuffles), combine_kernel's arithmetic.
__device__ __forceinline__ float merge_dim(const float* part, int D, int n, int d0, int batch, int lane,
                                           float* stage) {
  stage_acc(part, D, n, d0, 0, batch, stage, lane);  // in flight with slice_weights' loads: one round trip
  float ws[decode::kSlicesPerLane];
  const float den = decode::slice_weights(part, n, D, lane, ws);
  const float inv_den = 1.0f / den;
  const int n4 = n & ~3;
  float num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = 0; s0 < n; s0 += batch) {
    if (s0 != 0) {
      __syncwarp();  // every lane is done with the previous batch
      stage_acc(part, D, n, d0, s0, batch, stage, lane);
    }
    cp_async_wait_group<0>();
    __syncwarp();        // ... and every lane's copies have landed
    float wsrc = ws[0];  // slice s's weight is lane s % 32's ws[s / 32]
#pragma unroll
    for (int i = 1; i < decode::kSlicesPerLane; ++i)
      if (i == s0 / 32) wsrc = ws[i];
    for (int j0 = 0; j0 < batch; j0 += 8) {
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int j = j0 + jj, s = s0 + j;
        const float w = __shfl_sync(decode::kFull, wsrc, s % 32);
        const float v = stage[j * 32 + lane];
        if (s < n4)
          num[jj % 4] = fmaf(w, v, num[jj % 4]);
        else if (s < n)
          num[0] = fmaf(w, v, num[0]);
      }
    }
  }
  __syncwarp();  // the stage is free for the warp's next task
  return (num[0] + num[1] + num[2] + num[3]) * inv_den;
}

// After the PDL wait (the slice kernel has completed): x [n_heads * head_dim] bf16 into `smem` of every block
// of the cluster, then the cluster barrier (release / acquire), so x is complete in this block's shared
// memory on return.
template <int kWarps>
__device__ __forceinline__ void prologue(const GemvMerge& g, char* smem) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every peer is resident (arrive())
  const int C = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int D = g.head_dim, chunks = (D + 31) / 32, tasks = g.n_heads * chunks;
  const int n = decode::slices_for(g.window, g.n_splits, g.min_keys, g.positions[0]).n_act;
  Bf16* xs = reinterpret_cast<Bf16*>(smem);
  float* stage = reinterpret_cast<float*>(smem + smem_bytes(static_cast<int64_t>(g.n_heads) * D, 0, 0)) +
                 warp * g.batch * 32;
  for (int task = rank + C * warp; task < tasks; task += C * kWarps) {  // warp-uniform
    const int h = task / chunks, d0 = (task % chunks) * 32, d = d0 + lane;
    const int64_t at = static_cast<int64_t>(h) * D + d;
    Bf16 x;
    if (n <= 1) {
      x = d < D ? __ldcg(g.out + at) : Bf16{};
    } else {
      const float* part = g.partials + static_cast<int64_t>(h) * g.n_splits * (D + 2);
      x = __float2bfloat16_rn(merge_dim(part, D, n, d0, g.batch, lane, stage));
      if (d < D) g.out[at] = x;
    }
    if (d < D) {  // into every block of the cluster (its own included)
      const unsigned local = smem_u32(xs + at);
      const unsigned short bits = __bfloat16_as_ushort(x);
      for (int r = 0; r < C; ++r) {
        unsigned remote;  // (asm volatile: computed per store, not held in registers across the tasks)
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(r));
        asm volatile("st.shared::cluster.b16 [%0], %1;\n" ::"r"(remote), "h"(bits) : "memory");
      }
    }
  }
  cluster.sync();
}

}  // namespace bunsen::kernels::cuda::gemv_merge
