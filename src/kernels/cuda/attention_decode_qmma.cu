// The packed tensor-core flash-decoding kernel for a quantized KV cache (--kv-quant 8 | 4 | fp8: int8, int4
// or e4m3 codes with an affine (scale, bias) per group of 32/64/128 dims; head_dim 64/128, <= 8 query heads
// per kv head, bf16 or f32 q): batched decode steps, laid out as attention_decode_mma.cu's packed instances
// (block = 4 or 8 warps, each warp one kv head of a row over one key slice, a private 3-stage cp.async ring
// of 16-key tiles, online softmax in the log2 domain, partials merged by combine_kernel). What differs is the
// operand path: each tile's code rows (half or a quarter of the bytes of a bf16 tile) and their params are
// copied as they are, and the warp dequantizes inside the MMA fragments. ldmatrix loads the byte rows as if
// they were b16 pairs, so a lane gets four bytes of one key (K, plain) or two bytes of each of two keys (V,
// .trans). int8: one prmt per two codes builds the f16 pair 1024 + c (exact), one sub removes the 1024, one
// fma applies (scale, bias) in f16; int4: a shift and a mask-or per two nibbles, then the same; e4m3: one cvt
// per two codes, then the fma. The m16n8k16 MMAs then run on f16 with f32 accumulation. Since a lane holds
// dims 4t..4t+3 of a 16-dim step (int4: 8t..8t+7 of a 32-dim chunk, as two steps) the reduction order of S =
// Q·Kᵀ is permuted, and Q's fragments are loaded in the same order; a V chunk's dims become two (int4: four)
// MMA column tiles, so a lane's O holds a run of 4 (8) dims per chunk. Q is converted to f16 scaled by a
// power of two that keeps the warp's largest |q| below 2^14 (exact; undone in the score scale); P is split
// into f16 hi + lo parts as the bf16 kernel splits it into bf16. Accuracy: K and V reach the MMA rounded once
// to f16 (relative 2^-11, finer than a bf16 cache's 2^-8); a group whose scale is below f16's normal range
// (2^-14: an int8 group's range below 2^-6) loses relative precision (absolute error <= 255 x 2^-25 per
// element), and a value beyond f16's range (65,504) becomes inf: such a cache belongs on the SIMT kernel.
// BUNSEN_DECODE_QUANT_MMA=1 turns the kernel on (default off until measured on the device); other group
// sizes take the SIMT kernel.
// Invariants: masks as the reference; a visible key with an invalid block id has NaN K params (a NaN row,
// never read from global memory), keys past the slice zero codes and params (V finite, P zero); launched
// with programmatic dependent launch, it reads nothing before its wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/env.h"
#include "kernels/cuda/attention_decode_common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::decode {
namespace {

constexpr int kTile = 16;      // keys per tile
constexpr int kDepth = 3;      // ring stages per warp
constexpr int kMinGroup = 32;  // the smallest (scale, bias) group the kernel takes

template <int kD, int F>
struct QShape {
  static constexpr bool kI4 = F == kKvI4;
  static constexpr int kRowBytes = kI4 ? kD / 2 : kD;   // code bytes per row
  static constexpr int kChunks = kRowBytes / 16;        // 16-byte chunks of a code row
  static constexpr int kDc = kI4 ? 32 : 16;             // dims per chunk: 1 (2 for int4) MMA k-steps
  static constexpr int kNt = kDc / 8;                   // MMA column tiles of a chunk in P·V
  static constexpr int kMat = kTile * kRowBytes;        // one K or V code tile
  static constexpr int kParPitch = kD / kMinGroup * 8;  // a key's (scale, bias) pairs, at most kD / 32 groups
  static constexpr int kPar = kTile * kParPitch;        // one K or V params tile
  static constexpr int kStage = 2 * kMat + 2 * kPar;    // K codes, V codes, K params, V params
  static constexpr int kWarp = kDepth * kStage;         // a warp's ring
  static constexpr int kPerLane = 2 * kTile * kChunks / 32;  // 16-byte code copies per lane per tile
  static_assert(kD == 64 || kD == 128, "head_dim 64 or 128");
};

// Byte offset of 16-byte chunk c of code row r in a tile, XOR-swizzled so the 8 rows an ldmatrix phase reads
// at one chunk column hit 8 different bank groups (128-byte rows: chunk ^ row; 64-byte rows, two per 128
// bytes: chunk ^ (row / 2); 32-byte rows, four per 128 bytes: chunk ^ (row / 4)).
template <int kRowBytes>
__device__ __forceinline__ int qswz(int row, int chunk) {
  static_assert(kRowBytes == 128 || kRowBytes == 64 || kRowBytes == 32, "code rows of 32, 64 or 128 bytes");
  if constexpr (kRowBytes == 128)
    return row * 128 + ((chunk ^ (row & 7)) << 4);
  else if constexpr (kRowBytes == 64)
    return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
  else
    return row * 32 + ((chunk ^ ((row >> 2) & 1)) << 4);
}

__device__ __forceinline__ uint32_t h2u(__half2 h) {
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ __half2 u2h(uint32_t u) {
  return *reinterpret_cast<__half2*>(&u);
}

// The two codes of `w` that selector `sel` moves into bytes 0 and 2 (f16 pair, low half first) as f16, times
// s plus b (per half). int8: prmt builds 1024 + c (f16 0x64cc, exact), minus 1024; e4m3: cvt.
template <int F>
__device__ __forceinline__ uint32_t deq2(uint32_t w, uint32_t sel, __half2 s, __half2 b) {
  __half2 c;
  if constexpr (F == kKvF8) {
    const uint32_t two = __byte_perm(w, 0u, sel) & 0xffffu;  // selector: the codes into bytes 0, 1
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    c = __half2(h);
  } else {
    c = __hsub2(u2h(__byte_perm(w, 0x64646464u, sel)), u2h(0x64006400u));
  }
  return h2u(__hfma2(c, s, b));
}

// int4: nibbles i and 4 + i of w (bits 4i.. and 16 + 4i..) as f16 (1024 + n, exact, minus 1024), times s
// plus b.
__device__ __forceinline__ uint32_t deq_nib(uint32_t w, int i, __half2 s, __half2 b) {
  const __half2 c = __hsub2(u2h(((w >> (4 * i)) & 0x000f000fu) | 0x64006400u), u2h(0x64006400u));
  return h2u(__hfma2(c, s, b));
}

// Selectors: K (4 codes of one key, dims 4t..4t+3): dims 4t, 4t+1 | 4t+2, 4t+3. V (bytes: key 2t dims 2n,
// 2n+1, then key 2t+1 the same): even dims (bytes 0, 2) | odd dims (1, 3). int8 puts 0x64 (byte 4 of the
// pair) above each code; e4m3 only needs the two codes in bytes 0 and 1.
template <int F>
struct Sel {
  static constexpr uint32_t kLo = F == kKvF8 ? 0x0010u : 0x4140u;
  static constexpr uint32_t kHi = F == kKvF8 ? 0x0032u : 0x4342u;
  static constexpr uint32_t kEven = F == kKvF8 ? 0x0020u : 0x4240u;
  static constexpr uint32_t kOdd = F == kKvF8 ? 0x0031u : 0x4341u;
};

// Loads Q's A fragments (f16) in the permuted k order of the K fragments: k-step s, row gq: a0 = dims 16s +
// 4tq + {0, 1}, a2 = + {2, 3} (int8 / fp8); int4 (k-steps 2c + h of chunk c): a0 = dims 32c + 8tq + 2h + {0,
// 4}, a2 = + {1, 5}; rows 8..15 (a1, a3) are zero. Returns the power-of-two factor applied.
template <int kD, int F>
__device__ __forceinline__ float load_q_f16(const DecodeArgs& a, const Where& w, int lane, int gq, int tq,
                                            uint32_t (&qa)[kD / 16][4]) {
  const int G = a.group;
  const int64_t base = w.t * a.q_ts + static_cast<int64_t>(w.g) * G * a.q_hs;
  auto q_at = [&](int row, int d) -> float {
    const int64_t i = base + row * a.q_hs + d;
    return a.q_dtype == DType::kBF16 ? __bfloat162float(static_cast<const Bf16*>(a.q)[i])
                                     : static_cast<const float*>(a.q)[i];
  };
  float amax = 0.0f;
  for (int i = lane; i < G * kD; i += 32) amax = fmaxf(amax, fabsf(q_at(i / kD, i % kD)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  // 2^-e with e the least that brings amax below 2^14 (finite amax; inf or NaN q poisons the row anyway).
  const float mul =
      amax >= 16384.0f && amax <= 3.0e38f ? exp2f(-ceilf(log2f(amax * (1.0f / 16384.0f)))) : 1.0f;
#pragma unroll
  for (int s = 0; s < kD / 16; ++s)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int d = F == kKvI4 ? 32 * (s / 2) + 8 * tq + 2 * (s % 2) + half : 16 * s + 4 * tq + 2 * half;
      const int d2 = F == kKvI4 ? d + 4 : d + 1;
      qa[s][2 * half] = gq < G ? h2u(__floats2half2_rn(q_at(gq, d) * mul, q_at(gq, d2) * mul)) : 0u;
      qa[s][2 * half + 1] = 0u;  // rows 8..15: at most 8 query heads per kv head
    }
  return mul;
}

// f16 (hi, lo) parts of (x, y): hi + lo == (x, y) to ~2^-22 relative for values in [2^-14, 1].
__device__ __forceinline__ void split_h(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 hf = __half22float2(h);
  hi = h2u(h);
  lo = h2u(__floats2half2_rn(x - hf.x, y - hf.y));
}

// Grid [n_tokens, ceil(kv heads / kPack), n_splits], kPack warps; warp i: kv head blockIdx.y * kPack + i.
template <int kD, int F, int kPack>
__global__ void __launch_bounds__(32 * kPack, kPack == 4 ? 2 : 1) decode_qmma_kernel(const DecodeArgs a) {
  using S = QShape<kD, F>;
  constexpr int kAhead = kDepth - 1;
  extern __shared__ __align__(128) unsigned char smem[];
  slice_prologue();  // reads nothing before the wait
  Where w = where_am_i(a);
  if (!w.live) return;  // uniform over the block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3, G = a.group;
  w.g = blockIdx.y * kPack + warp;
  if (w.g * G >= a.n_heads) return;  // past the last kv head: uniform over the warp (no block barriers)
  uint32_t qa[kD / 16][4];
  const float qmul = load_q_f16<kD, F>(a, w, lane, gq, tq, qa);
  // o[kNt c + i]: column tile i of chunk c (dims kDc c + kNt n + i, n the MMA column); c0, c1 = head gq, c2,
  // c3 = head gq + 8
  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // head gq; l sums this lane's keys only (the quad adds up at the end)
  const uint8_t* kc = static_cast<const uint8_t*>(a.k_cache) + w.g * a.k_s2;
  const uint8_t* vc = static_cast<const uint8_t*>(a.v_cache) + w.g * a.v_s2;
  const float* kp = a.k_params + w.g * a.kp_s2;
  const float* vp = a.v_params + w.g * a.vp_s2;
  const bool seq_ok = w.seq >= 0 && w.seq < a.n_seqs;
  const int32_t* table = a.block_tables + (seq_ok ? static_cast<int64_t>(w.seq) * a.table_stride : 0);
  const int n_it = w.k0 < w.k1 ? (w.k1 - w.k0 + kTile - 1) / kTile : 0;
  const int groups = kD / a.kv_group;  // 1, 2 or 4 (host: a group of 32, 64 or 128 dividing kD)
  const int gshift = 31 - __clz(a.kv_group);
  unsigned char* ring = smem + warp * S::kWarp;
  // The block id of key lane % 16 of tile `it` (-1: past the slice, or invalid); the code copies take the
  // ids of their rows from the lanes that looked them up. Looked up a tile ahead of the copies.
  auto lookup = [&](int it) {
    const int key = w.k0 + it * kTile + (lane & (kTile - 1));
    int off = 0;
    return it < n_it && key < w.k1 ? block_of(a, table, seq_ok, key, off) : -1;
  };
  auto issue = [&](int it, int blk) {
    if (it < n_it) {
      unsigned char* st = ring + (it % kDepth) * S::kStage;
#pragma unroll
      for (int i = 0; i < S::kPerLane; ++i) {
        const int idx = i * 32 + lane, mat = idx / (kTile * S::kChunks);
        const int row = (idx % (kTile * S::kChunks)) / S::kChunks, c = idx % S::kChunks;
        const int b = __shfl_sync(kFull, blk, row);
        const int key = w.k0 + it * kTile + row;
        const int off = key - block_index(a, key) * a.block_size;
        const void* src = b < 0      ? a.k_cache  // (zero-fill: nothing is read)
                          : mat == 0 ? kc + b * a.k_s0 + off * a.k_s1 + c * 16
                                     : vc + b * a.v_s0 + off * a.v_s1 + c * 16;
        cp_async_16_zfill(st + mat * S::kMat + qswz<S::kRowBytes>(row, c), src, b >= 0 ? 16 : 0);
      }
      // Params: lanes 0-15 the K row of key lane, 16-31 the V row of key lane - 16.
      const int row = lane & (kTile - 1), key = w.k0 + it * kTile + row;
      const bool is_v = lane >= kTile;
      unsigned char* dst = st + 2 * S::kMat + (is_v ? S::kPar : 0) + row * S::kParPitch;
      if (blk < 0 && key < w.k1) {  // a visible key of an invalid block: NaN K (a NaN row), zero V
        const float fill = is_v ? 0.0f : __int_as_float(0x7fc00000);
        for (int gi = 0; gi < groups; ++gi)
          *reinterpret_cast<float2*>(dst + gi * 8) = make_float2(fill, fill);
      } else {
        const int off = blk >= 0 ? key - block_index(a, key) * a.block_size : 0;
        const float* src = blk < 0 ? a.k_params
                           : is_v  ? vp + blk * a.vp_s0 + off * a.vp_s1
                                   : kp + blk * a.kp_s0 + off * a.kp_s1;
        for (int gi = 0; gi < groups; ++gi)
          cp_async_8_zfill(dst + gi * 8, blk >= 0 ? src + 2 * gi : src, blk >= 0 ? 8 : 0);
      }
    }
    cp_async_commit_group();
  };
  int blk = 0;
#pragma unroll
  for (int i = 0; i < kAhead; ++i) issue(i, lookup(i));
  blk = lookup(kAhead);
  const float qk_scale = a.scale * kLog2e / qmul;
  const float soft_in = a.scale / qmul;
  const int mi = lane >> 3, r8 = lane & 7;  // ldmatrix: this lane addresses row r8 of matrix mi
  for (int it = 0; it < n_it; ++it) {
    cp_async_wait_group<kDepth - 2>();  // this lane's copies of tile `it` have landed
    __syncwarp();                       // ... and every other lane's; all lanes are done with tile it - 1
    issue(it + kAhead, blk);            // refills the stage of tile it - 1
    const int next = lookup(it + kAhead + 1);
    const unsigned char* kt = ring + (it % kDepth) * S::kStage;
    const unsigned char* vt = kt + S::kMat;
    const unsigned char* kpar = kt + 2 * S::kMat;
    const unsigned char* vpar = kpar + S::kPar;
    float sc[2][4] = {};  // S of keys 0-7 and 8-15: c0, c1 = head gq, keys 2tq (+1); c2, c3 = head gq + 8
    __half2 ks[2] = {}, kb[2] = {};  // (scale, bias) of keys gq and 8 + gq in the current group
#pragma unroll
    for (int j = 0; j < S::kChunks / 2; ++j) {
      uint32_t r[4];  // keys 0-7 | 8-15 (r[0, 1] | r[2, 3]) x chunks 2j | 2j + 1: 4 bytes of key gq (8 + gq)
      ldsm_x4(r, kt + qswz<S::kRowBytes>((mi >> 1) * 8 + r8, 2 * j + (mi & 1)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = 2 * j + h;
        if (((S::kDc * c) & (a.kv_group - 1)) == 0) {  // the first chunk of a group (uniform)
          const int gi = (S::kDc * c) >> gshift;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const float2 p = *reinterpret_cast<const float2*>(kpar + (8 * n + gq) * S::kParPitch + gi * 8);
            ks[n] = __float2half2_rn(p.x);
            kb[n] = __float2half2_rn(p.y);
          }
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint32_t w4 = r[2 * n + h];
          if constexpr (S::kI4) {  // dims 32c + 8tq + {0, 4 | 1, 5} (k-step 2c), {2, 6 | 3, 7} (2c + 1)
            mma_m16n8k16_f16(sc[n], qa[2 * c], deq_nib(w4, 0, ks[n], kb[n]), deq_nib(w4, 1, ks[n], kb[n]));
            mma_m16n8k16_f16(sc[n], qa[2 * c + 1], deq_nib(w4, 2, ks[n], kb[n]),
                             deq_nib(w4, 3, ks[n], kb[n]));
          } else {
            mma_m16n8k16_f16(sc[n], qa[c], deq2<F>(w4, Sel<F>::kLo, ks[n], kb[n]),
                             deq2<F>(w4, Sel<F>::kHi, ks[n], kb[n]));
          }
        }
      }
    }
    const int key0 = w.k0 + it * kTile + 2 * tq;
    float p[2][2], tmax = -INFINITY;  // head gq only (rows 8..15 are zero)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = sc[n][e];
        x = a.softcap > 0.0f ? a.softcap * tanhf(x * soft_in / a.softcap) * kLog2e : x * qk_scale;
        x = key0 + n * 8 + e < w.k1 ? x : -INFINITY;
        p[n][e] = x;
        tmax = fmaxf(tmax, x);  // ignores NaN: it poisons l and o, not m
      }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 2));
    const float mx = fmaxf(m, tmax), alpha = rescale(m, mx);
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      o[i][0] *= alpha;
      o[i][1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = p[n][e];
        x = x == -INFINITY ? 0.0f : exp2f(x - mx);
        l += x;
      }
    m = mx;
    uint32_t ph[4] = {0u, 0u, 0u, 0u}, pl[4] = {0u, 0u, 0u, 0u};  // A fragments of P (rows 8..15 zero)
    split_h(p[0][0], p[0][1], ph[0], pl[0]);                      // keys 2tq (+1)
    split_h(p[1][0], p[1][1], ph[2], pl[2]);                      // keys 8 + 2tq (+1)
    __half2 vs[2] = {}, vb[2] = {};  // (scale, bias) of keys 2tq, 2tq + 1 | 8 + 2tq, 9 + 2tq in the group
#pragma unroll
    for (int j = 0; j < S::kChunks / 2; ++j) {
      uint32_t
          r[4];  // keys 0-7 | 8-15 (r[0] | r[1]: chunk 2j; r[2] | r[3]: 2j + 1), .trans: keys 2tq, 2tq + 1
      ldsm_x4_trans(r, vt + qswz<S::kRowBytes>((mi & 1) * 8 + r8, 2 * j + (mi >> 1)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = 2 * j + h;
        if (((S::kDc * c) & (a.kv_group - 1)) == 0) {
          const int gi = (S::kDc * c) >> gshift;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const float2 p0 =
                *reinterpret_cast<const float2*>(vpar + (8 * n + 2 * tq) * S::kParPitch + gi * 8);
            const float2 p1 =
                *reinterpret_cast<const float2*>(vpar + (8 * n + 2 * tq + 1) * S::kParPitch + gi * 8);
            vs[n] = __floats2half2_rn(p0.x, p1.x);
            vb[n] = __floats2half2_rn(p0.y, p1.y);
          }
        }
        if constexpr (S::kI4) {  // the bytes of dims 4n..4n + 3 of keys 2tq, 2tq + 1: tile i = dims 4n + i
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t b0 = deq_nib(r[2 * h], i, vs[0], vb[0]),
                           b1 = deq_nib(r[2 * h + 1], i, vs[1], vb[1]);
            mma_m16n8k16_f16(o[4 * c + i], ph, b0, b1);
            mma_m16n8k16_f16(o[4 * c + i], pl, b0, b1);
          }
        } else {  // the bytes of dims 2n, 2n + 1 of keys 2tq, 2tq + 1: tile 0 = even dims, 1 = odd
          const uint32_t e0 = deq2<F>(r[2 * h], Sel<F>::kEven, vs[0], vb[0]);
          const uint32_t e1 = deq2<F>(r[2 * h + 1], Sel<F>::kEven, vs[1], vb[1]);
          const uint32_t d0 = deq2<F>(r[2 * h], Sel<F>::kOdd, vs[0], vb[0]);
          const uint32_t d1 = deq2<F>(r[2 * h + 1], Sel<F>::kOdd, vs[1], vb[1]);
          mma_m16n8k16_f16(o[2 * c], ph, e0, e1);
          mma_m16n8k16_f16(o[2 * c], pl, e0, e1);
          mma_m16n8k16_f16(o[2 * c + 1], ph, d0, d1);
          mma_m16n8k16_f16(o[2 * c + 1], pl, d0, d1);
        }
      }
    }
    blk = next;
  }
  cp_async_wait_group<0>();
  // The epilogue (as attention_decode_mma.cu's write_warp): this lane's dims kDc c + 2 kNt tq + j (j < 2 kNt)
  // are o[kNt c + j % kNt][j / kNt] (int8 / fp8: o[2c][0], o[2c + 1][0], o[2c][1], o[2c + 1][1]).
  constexpr int kNt = S::kNt, kDc = S::kDc;
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  if (gq >= G) return;
  const int head = w.g * G + gq;
  if (w.sl.n_act == 1) {
    const int64_t at = w.t * a.o_ts + head * a.o_hs;
#pragma unroll
    for (int c = 0; c < kD / kDc; ++c)
#pragma unroll
      for (int j = 0; j < 2 * kNt; ++j)
        store_any(a.out, a.out_dtype, at + kDc * c + 2 * kNt * tq + j, o[kNt * c + j % kNt][j / kNt] / l);
  } else {
    float* part = partial_of(a, w, head);
    if (tq == 0) {
      part[0] = m;
      part[1] = l;
    }
#pragma unroll
    for (int c = 0; c < kD / kDc; ++c)  // (D + 2) and the arena are even: 8-byte aligned pairs
#pragma unroll
      for (int j = 0; j < 2 * kNt; j += 2)
        *reinterpret_cast<float2*>(part + 2 + kDc * c + 2 * kNt * tq + j) =
            make_float2(o[kNt * c + j % kNt][j / kNt], o[kNt * c + (j + 1) % kNt][(j + 1) / kNt]);
  }
}

template <int kD, int F, int kPack>
void launch_one(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  constexpr size_t kSmem = size_t{kPack} * QShape<kD, F>::kWarp;
  auto kernel = decode_qmma_kernel<kD, F, kPack>;
  static std::atomic<uint64_t> done{0};  // the shared memory limit, once per device
  const int dev = current_device();
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit == 0 || (done.load() & bit) == 0) {
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem, "paged_attention");
    done.fetch_or(bit);
  }
  const dim3 grid(a.n_tokens, (n_kv_heads + kPack - 1) / kPack, a.n_splits);
  check_cuda(launch_pdl(kernel, grid, dim3(32 * kPack), kSmem, s, a), "paged_attention", [&] {
    return strfmt("(packed flash-decoding kernel, quantized cache, %d warps, grid [%d, %u, %d], %zu bytes)",
                  kPack, a.n_tokens, grid.y, a.n_splits, kSmem);
  });
}

template <int kD, int F>
void launch_fmt(cudaStream_t s, const DecodeArgs& a, int n_kv_heads, int warps) {
  if (warps == 4)
    launch_one<kD, F, 4>(s, a, n_kv_heads);
  else
    launch_one<kD, F, 8>(s, a, n_kv_heads);
}

std::atomic<int> g_quant_mma{0};  // set_attention_decode_quant_mma_for_testing

bool quant_mma_wanted() {
  const int mode = g_quant_mma.load();
  if (mode != 0) return mode == 2;
  static const bool on = env_flag("BUNSEN_DECODE_QUANT_MMA", false);
  return on;
}

}  // namespace

bool qmma_packed_ok(const DevCache& c, int64_t head_dim, int64_t group, DType q_dtype) {
  if (!quant_mma_wanted() || (c.bits != 8 && (c.bits != 4 || c.fp8)) || c.dtype != DType::kU8) return false;
  if ((head_dim != 64 && head_dim != 128) || group < 1 || group > 8) return false;
  if (q_dtype != DType::kBF16 && q_dtype != DType::kF32) return false;
  const int gs = c.group_size;
  if ((gs != 32 && gs != 64 && gs != 128) || head_dim % gs != 0) return false;
  bool ok = reinterpret_cast<uintptr_t>(c.k) % 16 == 0 && reinterpret_cast<uintptr_t>(c.v) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(c.k_params) % 8 == 0 &&
            reinterpret_cast<uintptr_t>(c.v_params) % 8 == 0;
  for (int i = 0; i < 3; ++i)
    ok = ok && c.k_strides[i] % 16 == 0 && c.v_strides[i] % 16 == 0 && c.kp_strides[i] % 2 == 0 &&
         c.vp_strides[i] % 2 == 0;
  return ok;
}

int qmma_packed_blocks_per_sm(int head_dim, int warps, int bits) {
  const size_t ring = head_dim == 64 ? (bits == 4 ? QShape<64, kKvI4>::kWarp : QShape<64, kKvI8>::kWarp)
                                     : (bits == 4 ? QShape<128, kKvI4>::kWarp : QShape<128, kKvI8>::kWarp);
  return std::max(1, static_cast<int>((227u << 10) / (ring * static_cast<size_t>(warps) + 1024)));
}

void launch_decode_qmma_packed(cudaStream_t s, const DecodeArgs& a, int n_kv_heads, int warps,
                               const DevCache& c) {
  if (a.counters != nullptr || (a.head_dim != 64 && a.head_dim != 128) || (warps != 4 && warps != 8))
    throw Error("cuda",
                strfmt("paged_attention: the quantized packed decode kernel takes head_dim 64 or 128, 4 or 8 "
                       "warps and no fused combine; got head_dim %d, %d warps, counters %s",
                       a.head_dim, warps, a.counters ? "set" : "null"));
  with_quant_fmt(c, [&](auto fmt) {  // (throws for a format that is not int8, int4 or fp8)
    constexpr int F = decltype(fmt)::value;
    if (a.head_dim == 64)
      launch_fmt<64, F>(s, a, n_kv_heads, warps);
    else
      launch_fmt<128, F>(s, a, n_kv_heads, warps);
  });
}

}  // namespace bunsen::kernels::cuda::decode

namespace bunsen::kernels::cuda {

void set_attention_decode_quant_mma_for_testing(int mode) {
  decode::g_quant_mma.store(mode);
}

}  // namespace bunsen::kernels::cuda
