// Pieces shared by the flash-decoding kernels (attention_decode.cu: SIMT, any head_dim % 8 == 0 up to 256;
// attention_decode_mma.cu: tensor cores, head_dim 64/128/256/512, bf16 q): the launch arguments, the per-row
// key slicing both the slice kernels and the combine kernel derive on the device, block-table lookup,
// cp.async wrappers and the block epilogue that merges the warps' softmax states and writes a row or a
// partial. Not a public interface. Invariants: scores live in the log2 domain (q·k·scale·log2e); a state is
// (max m, sum l, acc); NaN poisons l and acc but never m (fmaxf ignores NaN).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cuda_common.cuh"

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

// Lets the combine kernel (launched as a programmatic dependent) get its blocks resident while this
// grid runs; it still waits (griddepcontrol.wait) for this grid's completion before reading partials.
__device__ __forceinline__ void allow_combine_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Physical block of `key` (< the row's end) and its offset in it; -1 for an invalid sequence or block id.
__device__ __forceinline__ int block_of(const DecodeArgs& a, const int32_t* table, bool seq_ok, int key,
                                        int& off) {
  if (!seq_ok) return -1;
  const int bi = a.block_shift >= 0 ? key >> a.block_shift : key / a.block_size;
  if (bi >= a.max_blocks) return -1;
  const int b = table[bi];
  off = key - bi * a.block_size;
  return b >= 0 && b < a.n_blocks ? b : -1;
}

// 16-byte asynchronous copy global -> shared; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Block epilogue. red [kStates][kG][kD + 2] f32 holds each warp's (or key stream's) (m, l, acc[head_dim])
// per head of the group; merges them and writes out[t, head] (one slice) or this slice's partial.
template <int kG, int kD, int kStates = kWarps>
__device__ __forceinline__ void write_block(const DecodeArgs& a, const float* red, const Where& w) {
  __syncthreads();
  const int D = a.head_dim, G = a.group;
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int h = idx / D, d = idx - h * D, head = w.g * G + h;
    float mx = -INFINITY;
#pragma unroll
    for (int v = 0; v < kStates; ++v) mx = fmaxf(mx, red[(v * kG + h) * (kD + 2)]);
    float den = 0.0f, num = 0.0f;
#pragma unroll
    for (int v = 0; v < kStates; ++v) {
      const float* r = red + (v * kG + h) * (kD + 2);
      const float f = rescale(r[0], mx);
      den += f * r[1];
      num += f * r[2 + d];
    }
    if (w.sl.n_act == 1) {
      store_any(a.out, a.out_dtype, w.t * a.o_ts + head * a.o_hs + d, num / den);
    } else {
      float* part =
          a.partials + ((static_cast<int64_t>(w.t) * a.n_heads + head) * a.n_splits + w.split) * (D + 2);
      if (d == 0) {
        part[0] = mx;
        part[1] = den;
      }
      part[2 + d] = num;
    }
  }
}

// The tensor-core slice kernel (attention_decode_mma.cu) for head_dim 64/128/256/512 with bf16 q and cache
// and up to kMmaMaxGroup query heads per kv head.
constexpr int kMmaMaxGroup = 16;
bool mma_decode_ok(int64_t head_dim, int64_t group);
void launch_decode_mma(cudaStream_t s, const DecodeArgs& a, int n_kv_heads);
int mma_min_keys(int head_dim, int group);  // one key tile per key stream of a block
// Resident blocks of that kernel per SM (shared memory bound).
int mma_blocks_per_sm(int head_dim, int group);

}  // namespace bunsen::kernels::cuda::decode
