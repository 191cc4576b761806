// The q/k/v projection with rope_kv_write folded into its store (linear_qkv_rope_kv), shared by the bf16
// GEMV (gemv.cu) and the 4-bit tiled tensor-core GEMV (gemv_qmma.cu): the launch parameters, the rotation
// pairs a warp's rows are grouped by, and the store of one value or one rotated pair.
// Invariants: the stores round q/k/v to bf16 as the plain projection stores them, rotate q and k pairs as
// rope_kv.cu rotates the stored values (sincosf of (float)pos * inv_freq, times scaling; rotate_values),
// round again, and write k and v into the cache slot of their row as rope_kv_write does: the two ops' bits.
#pragma once
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda {

// Launch parameters of the fold beside the projection's (parts 0, 1, 2 = q, k, v; bf16 outputs and cache).
struct RopeKvArgs {
  const int32_t* positions = nullptr;  // [m] of this launch's rows
  const int64_t* slots = nullptr;      // [m] cache slots (< 0 or past the cache: no write)
  Bf16* k_cache = nullptr;
  Bf16* v_cache = nullptr;
  int64_t k_s[3] = {}, v_s[3] = {};  // cache strides (elements): block, slot, kv head
  int64_t n_slots = 0, block_size = 0;
  int head_dim = 0, half = 0;  // half = rotary_dim / 2 (0: no rotation, the write only)
  float scaling = 1.0f;
  float inv_freq[kMaxRotaryDim / 2] = {};
};

// r's fold parameters (plain bf16 cache, head_dims agreeing, n_q / n_k / n_v the parts' rows); false when r
// does not allow the fold.
bool rope_kv_args_of(const DevRopeKv& r, int64_t n_q, int64_t n_k, int64_t n_v, RopeKvArgs& rk);

// Rows (first, second) of rotation pair q of a q or k part of n rows: pair j of a head is (j, j + half) for
// j < half, else the neighbours (2 half + 2 (j - half), + 1). False past the part.
__device__ __forceinline__ bool rope_pair(const RopeKvArgs& rk, int64_t q, int64_t n, int64_t& first,
                                          int64_t& second) {
  if (2 * q >= n) return false;
  const int64_t hp = rk.head_dim / 2, head = q / hp, j = q - head * hp;
  first = head * rk.head_dim + (j < rk.half ? j : 2 * rk.half + 2 * (j - rk.half));
  second = j < rk.half ? first + rk.half : first + 1;
  return true;
}

// The cache element of row `row` of token i (null: the slot is negative or past the cache).
__device__ __forceinline__ Bf16* rope_cache_at(const RopeKvArgs& rk, Bf16* cache, const int64_t (&st)[3],
                                               int64_t i, int64_t row) {
  const int64_t slot = rk.slots[i];
  if (slot < 0 || slot >= rk.n_slots) return nullptr;
  const int64_t block = slot / rk.block_size, off = slot - block * rk.block_size, head = row / rk.head_dim;
  return cache + block * st[0] + off * st[1] + head * st[2] + (row - head * rk.head_dim);
}

// v's row `row` of token i: y (the sum plus its bias) rounded into out (row stride out_stride) and the cache.
__device__ __forceinline__ void rope_store_v(const RopeKvArgs& rk, Bf16* out, int64_t out_stride, int64_t i,
                                             int64_t row, float y) {
  const Bf16 v = from_f32<Bf16>(y);
  out[i * out_stride + row] = v;
  if (Bf16* c = rope_cache_at(rk, rk.v_cache, rk.v_s, i, row)) *c = v;
}

// Pair q (rows first, second) of token i of part 0 (q) or 1 (k): y1, y2 (sums plus biases) rounded, rotated
// when the pair is within rotary_dim, rounded again into out; k's also into the cache.
__device__ __forceinline__ void rope_store_pair(const RopeKvArgs& rk, Bf16* out, int64_t out_stride, int part,
                                                int64_t i, int64_t q, int64_t first, int64_t second, float y1,
                                                float y2) {
  float x1 = to_f32(from_f32<Bf16>(y1)), x2 = to_f32(from_f32<Bf16>(y2));
  const int64_t j = q % (rk.head_dim / 2);
  if (j < rk.half) {
    float sn, cs;
    sincosf(static_cast<float>(rk.positions[i]) * rk.inv_freq[j], &sn, &cs);
    const float2 r = rotate_values(x1, x2, cs * rk.scaling, sn * rk.scaling);
    x1 = r.x;
    x2 = r.y;
  }
  const Bf16 b1 = from_f32<Bf16>(x1), b2 = from_f32<Bf16>(x2);
  out[i * out_stride + first] = b1;
  out[i * out_stride + second] = b2;
  if (part == 1) {
    if (Bf16* c = rope_cache_at(rk, rk.k_cache, rk.k_s, i, first)) *c = b1;
    if (Bf16* c = rope_cache_at(rk, rk.k_cache, rk.k_s, i, second)) *c = b2;
  }
}

}  // namespace bunsen::kernels::cuda
