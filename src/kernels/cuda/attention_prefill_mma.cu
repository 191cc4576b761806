// FlashAttention-2-style paged prefill attention on mma.sync, two kernels: flash2b_prefill_kernel (the
// default for bf16 caches: 3 blocks per SM at <= 168 registers, Q held in registers after staging through
// the K buffer, one barrier per tile, scores scaled inside the exp2 FFMA, masks from per-pass bounds) and
// flash2_prefill_kernel (quantized caches, BUNSEN_FLASH_PREFILL=mma); attention_prefill.cu's WMMA kernel
// stays selectable as the fallback. Common to both: a block of 4 warps owns 64 query
// rows that share one kv head (the same row mapping as the WMMA kernel: the group's heads of 64 / group
// consecutive tokens); each warp owns 16 rows. Q is loaded once into registers as m16n8k16 A fragments
// (ldmatrix); K/V tiles of 64 keys are staged through the block table into padded shared memory with
// cp.async (16-byte chunks, two stages, rows padded by 16 bytes so ldmatrix phases are conflict-free);
// S = Q·Kᵀ, the masks, the online softmax (exp2 of log2e-scaled scores, row max/sum over the lane quad)
// and O += P·V all stay in registers: the two n8 C fragments of 16 keys are the A fragment of one k16 step
// of P·V, and V's B fragments come from ldmatrix.trans. A warp skips the MMAs of tiles none of its rows
// can see (above the causal diagonal, below the sliding window). Rows of several sequences in one block
// are handled in passes, one sequence per pass. A quantized cache is dequantized to bf16 while staging
// (plain loads instead of cp.async). Invariants: masks as ref (causal, sliding window, soft-cap); a
// visible key whose block id is invalid yields NaN for its row and is never dereferenced; staged keys
// outside the pass's key range or in invalid blocks are zeros (so P = 0 never meets stale NaN); P is
// rounded to bf16 before P·V, as the WMMA kernel does. fa2b also splits the keys (gridDim.z slices, partials
// merged by attention.cu's combine kernel) when a chunk has too few query rows to fill the GPU
// (choose_prefill_splits: a short turn over a long cached conversation).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "core/env.h"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // query rows per block: 16 per warp (one m16 tile)
constexpr int kKeys = 64;           // keys per tile
constexpr int kStages = 2;          // cp.async double buffering
constexpr int kSlots = 4;           // block-id slots: tile t's ids are looked up while tile t - 2 is staged
constexpr unsigned kFull = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared memory: Q [kRows][kHd] then kStages x (K [kKeys][kHd], V [kKeys][kHd]), all bf16 rows padded
// by 16 bytes: a row stride of 16 * odd bytes puts the 8 rows of an ldmatrix phase in 8 bank groups.
template <int kHd>
struct Smem2 {
  static constexpr int kRowBytes = (kHd + 8) * 2;
  static constexpr int kChunks = kHd / 8;  // 16-byte chunks per row
  static constexpr size_t kQ = static_cast<size_t>(kRows) * kRowBytes;
  static constexpr size_t kTile = static_cast<size_t>(kKeys) * kRowBytes;
  static constexpr size_t kBytes = kQ + static_cast<size_t>(kStages) * 2 * kTile;
  static_assert(kRowBytes % 16 == 0 && (kRowBytes / 16) % 2 == 1, "padding");
  static_assert((kKeys * kChunks) % kThreads == 0, "staging");
};

struct RowInfo2 {
  int tok[kRows], head[kRows], pos[kRows], seq[kRows];
  int key_block[kSlots][kKeys];  // tile t (slot t % kSlots): each key's block id (-1: invalid) ...
  int key_off[kSlots][kKeys];    // ... and its row in that block
};

__device__ __forceinline__ int first_visible_key2(int pos, int window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}



__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo: the lower column
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

// Eight dequantized elements of a quantized row as bf16 (one 16-byte chunk of a staged tile).
template <int F>
__device__ __forceinline__ uint4 dequant_chunk2(const uint8_t* row, const float* params, int d0, int group) {
  float f[8];
  kv_dequant8<F>(row, params, d0, group, f);
  return make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]), pack_bf16(f[6], f[7]));
}

// The block's rows of kv head g into ri (token, head, position, sequence; token -1 / sequence INT_MIN past the tile),
// then the Q rows through qs (zeros for missing rows) into this warp's A fragments qa: rows warp*16 + 0..15,
// dims kk*16 + 0..15.
template <int kHd>
__device__ __forceinline__ void load_rows_and_q(const FlashArgs& a, RowInfo2& ri, unsigned char* qs, int warp, int lane,
                                                int g, uint32_t (&qa)[kHd / 16][4]) {
  constexpr int kRowB = Smem2<kHd>::kRowBytes, kChunks = Smem2<kHd>::kChunks;
  // Heaviest (latest) token tiles first: causal blocks near the end of a prompt see the most keys.
  const int n_token_tiles = (a.n_tokens + a.tokens_per_tile - 1) / a.tokens_per_tile;
  const int tile = n_token_tiles - 1 - static_cast<int>(blockIdx.x) / a.head_chunks;
  const int chunk = static_cast<int>(blockIdx.x) % a.head_chunks;

  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const int tt = r / a.heads_per_tile, hg = chunk * a.heads_per_tile + r % a.heads_per_tile;
    const int t = tile * a.tokens_per_tile + tt;
    const bool ok = tile >= 0 && tt < a.tokens_per_tile && t < a.n_tokens && hg < a.group;
    ri.tok[r] = ok ? t : -1;
    ri.head[r] = g * a.group + hg;
    ri.pos[r] = ok ? a.positions[t] : 0;
    ri.seq[r] = ok ? a.seq_index[t] : INT_MIN;
  }
  __syncthreads();
  // Q rows -> shared memory (zeros for missing rows), then this warp's A fragments -> registers.
  {
    const Bf16* q = static_cast<const Bf16*>(a.q);
    const bool vec = reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && a.q_ts % 8 == 0 && a.q_hs % 8 == 0;
    for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
      const int r = c / kChunks, d = (c - r * kChunks) * 8, t = ri.tok[r];
      uint4 v = make_uint4(0, 0, 0, 0);
      if (t >= 0) {
        const Bf16* src = q + static_cast<int64_t>(t) * a.q_ts + static_cast<int64_t>(ri.head[r]) * a.q_hs + d;
        if (vec) {
          v = *reinterpret_cast<const uint4*>(src);
        } else {
          Bf16 e[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) e[i] = src[i];
          memcpy(&v, e, sizeof(v));
        }
      }
      *reinterpret_cast<uint4*>(qs + r * kRowB + d * 2) = v;
    }
  }
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < kHd / 16; ++kk)  // lanes 0-15: rows 0-15 at dim +0; lanes 16-31: rows 0-15 at +8
    ldsm_x4(qa[kk], qs + (warp * 16 + (lane & 15)) * kRowB + (kk * 16 + (lane >> 4) * 8) * 2);
}

// F: the cache format (plain = bf16 via cp.async; else u8 codes, strides in bytes, plus params).
template <int kHd, int F>
__global__ void __launch_bounds__(kThreads) flash2_prefill_kernel(const FlashArgs a) {
  using S = Smem2<kHd>;
  constexpr int kRowB = S::kRowBytes, kChunks = S::kChunks;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ RowInfo2 ri;
  unsigned char* const qs = smem;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = blockIdx.y;
  uint32_t qa[kHd / 16][4];  // A fragments of Q: rows warp*16 + 0..15, dims kk*16 + 0..15
  load_rows_and_q<kHd>(a, ri, qs, warp, lane, g, qa);

  uint64_t todo = 0;
  for (int r = 0; r < kRows; ++r) todo |= ri.tok[r] >= 0 ? uint64_t{1} << r : 0;

  const int gq = lane >> 2, tq = lane & 3;   // fragment row group / column pair
  const int mi = lane >> 3, r8 = lane & 7;   // ldmatrix: this lane addresses row r8 of matrix mi
  const int row0 = warp * 16 + gq, row1 = row0 + 8;  // this lane's two rows (C fragment c0/c1, c2/c3)
  const float qk_scale = a.scale * kLog2e;
  const Bf16* kc = static_cast<const Bf16*>(a.k_cache);
  const Bf16* vc = static_cast<const Bf16*>(a.v_cache);

  while (todo != 0) {
    const int seq = ri.seq[__ffsll(static_cast<long long>(todo)) - 1];
    uint64_t pass = 0;
    int lo = INT_MAX, hi = -1;
    for (int r = 0; r < kRows; ++r)
      if ((todo >> r & 1u) && ri.seq[r] == seq) {
        pass |= uint64_t{1} << r;
        lo = min(lo, first_visible_key2(ri.pos[r], a.window));
        hi = max(hi, ri.pos[r]);
      }
    todo &= ~pass;
    // This warp's rows of the pass: the key range they see, and whether all 16 take part.
    int w_lo = INT_MAX, w_hi = -1, w_min_pos = INT_MAX, w_max_first = 0;
    const bool w_all = ((pass >> (warp * 16)) & 0xffffu) == 0xffffu;
    for (int r = warp * 16; r < warp * 16 + 16; ++r)
      if (pass >> r & 1u) {
        const int first = first_visible_key2(ri.pos[r], a.window);
        w_lo = min(w_lo, first);
        w_hi = max(w_hi, ri.pos[r]);
        w_min_pos = min(w_min_pos, ri.pos[r]);
        w_max_first = max(w_max_first, first);
      }
    const bool live0 = pass >> row0 & 1u, live1 = pass >> row1 & 1u;
    const int pos0 = ri.pos[row0], pos1 = ri.pos[row1];
    const int first0 = first_visible_key2(pos0, a.window), first1 = first_visible_key2(pos1, a.window);
    const bool seq_ok = seq >= 0 && seq < a.n_seqs;
    const int kb0 = lo - lo % kKeys;
    const int n_tiles = hi >= kb0 ? (hi - kb0) / kKeys + 1 : 0;

    // Threads < kKeys: the block-table entry of this thread's key of tile t (fetched one tile before it is
    // published, so the load's latency hides behind a tile of compute) ...
    auto fetch = [&](int t) {
      const int key = kb0 + t * kKeys + static_cast<int>(threadIdx.x), bi = key / a.block_size;
      return threadIdx.x < kKeys && t < n_tiles && seq_ok && bi < a.max_blocks
                 ? a.block_tables[static_cast<int64_t>(seq) * a.table_stride + bi]
                 : -1;
    };
    // ... and tile t's block ids and rows in slot t % kSlots (read after a later barrier).
    auto publish = [&](int t, int b) {
      if (threadIdx.x < kKeys && t < n_tiles) {
        const int key = kb0 + t * kKeys + static_cast<int>(threadIdx.x), bi = key / a.block_size;
        ri.key_block[t % kSlots][threadIdx.x] = b >= 0 && b < a.n_blocks ? b : -1;
        ri.key_off[t % kSlots][threadIdx.x] = key - bi * a.block_size;
      }
    };
    int pending = -1;  // fetch(it + 3) while tile `it` is staged and computed
    // Publishes tile it + 2, stages tile `it` (keys kb0 + 64 it ...) into stage `st`, commits one cp.async
    // group and fetches tile it + 3. Slot it % kSlots was published at least one barrier ago; slot
    // (it + 2) % kSlots was last read by tile it - 2, whose iteration ended with a barrier.
    auto stage = [&](int it, int st) {
      publish(it + 2, pending);
      const int kb = kb0 + it * kKeys, slot = it % kSlots;
      unsigned char* ks = smem + S::kQ + static_cast<size_t>(st) * 2 * S::kTile;
      unsigned char* vs = ks + S::kTile;
#pragma unroll 4
      for (int c = threadIdx.x; c < kKeys * kChunks; c += kThreads) {
        const int j = c / kChunks, ch = c - j * kChunks, key = kb + j;
        const int blk = key >= lo && key <= hi ? ri.key_block[slot][j] : -1;
        unsigned char* kd = ks + j * kRowB + ch * 16;
        unsigned char* vd = vs + j * kRowB + ch * 16;
        if (blk < 0) {
          *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
          continue;
        }
        const int64_t off = ri.key_off[slot][j];
        if constexpr (F == kKvPlain) {
          cp_async_16(kd, kc + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2 + ch * 8);
          cp_async_16(vd, vc + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2 + ch * 8);
        } else {
          const uint8_t* k8 = static_cast<const uint8_t*>(a.k_cache);
          const uint8_t* v8 = static_cast<const uint8_t*>(a.v_cache);
          *reinterpret_cast<uint4*>(kd) =
              dequant_chunk2<F>(k8 + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2,
                                a.k_params + blk * a.kp_s0 + off * a.kp_s1 + g * a.kp_s2, ch * 8, a.kv_group);
          *reinterpret_cast<uint4*>(vd) =
              dequant_chunk2<F>(v8 + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2,
                                a.v_params + blk * a.vp_s0 + off * a.vp_s1 + g * a.vp_s2, ch * 8, a.kv_group);
        }
      }
      cp_async_commit_group();
      pending = fetch(it + 3);
    };

    float o[kHd / 8][4];  // O: d tile n = dims 8n + 2tq (+1); [0], [1] row0, [2], [3] row1
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's partial sums

    publish(0, fetch(0));
    publish(1, fetch(1));
    pending = fetch(2);
    __syncthreads();  // slots 0 and 1 are written; slots of the previous pass are no longer read
    if (n_tiles > 0) stage(0, 0);
    for (int it = 0; it < n_tiles; ++it) {
      const int st = it & 1;
      if (it + 1 < n_tiles) {
        stage(it + 1, st ^ 1);  // that stage was last read in iteration it - 1, which ended with a barrier
        cp_async_wait_group<1>();
      } else {
        cp_async_wait_group<0>();
      }
      __syncthreads();  // tile `it` (and its key_block) is visible to every warp
      const int kb = kb0 + it * kKeys, slot = it % kSlots;
      if (kb <= w_hi && kb + kKeys - 1 >= w_lo) {  // warp-uniform: some row of this warp sees a key here
        const unsigned char* ks = smem + S::kQ + static_cast<size_t>(st) * 2 * S::kTile;
        const unsigned char* vs = ks + S::kTile;
        // S = Q Kᵀ: n tile nt = keys kb + 8 nt + 2tq (+1); [0], [1] row0, [2], [3] row1.
        float sc[kKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kHd / 16; ++kk)
#pragma unroll
          for (int np = 0; np < kKeys / 16; ++np) {
            uint32_t b[4];  // matrices: keys (np*16 + 0-7 | 8-15) x dims (kk*16 + 0-7 | 8-15)
            ldsm_x4(b, ks + (np * 16 + (mi >> 1) * 8 + r8) * kRowB + (kk * 16 + (mi & 1) * 8) * 2);
            mma_m16n8k16(sc[2 * np], qa[kk], b[0], b[1]);
            mma_m16n8k16(sc[2 * np + 1], qa[kk], b[2], b[3]);
          }
        // Masks and scaling. Tiles every row of the warp fully sees (and whose blocks are all valid) skip
        // the per-element tests.
        const bool blocks_ok =
            __all_sync(kFull, ri.key_block[slot][lane] >= 0 && ri.key_block[slot][lane + 32] >= 0);
        const bool full = w_all && blocks_ok && kb + kKeys - 1 <= w_min_pos && kb >= w_max_first;
        const bool soft = a.softcap > 0.0f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = sc[n][e];
            x = soft ? a.softcap * tanhf(x * a.scale / a.softcap) * kLog2e : x * qk_scale;
            if (!full) {
              const int j = n * 8 + 2 * tq + (e & 1), key = kb + j;
              const bool r1 = e >= 2;
              const bool vis = r1 ? live1 && key <= pos1 && key >= first1 : live0 && key <= pos0 && key >= first0;
              x = !vis ? -INFINITY : ri.key_block[slot][j] < 0 ? NAN : x;
            }
            sc[n][e] = x;
          }
        // Online softmax per row (quad-uniform m; l stays a per-lane partial until the end).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float tmax = -INFINITY;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) tmax = fmaxf(tmax, fmaxf(sc[n][2 * r], sc[n][2 * r + 1]));
          tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));  // fmaxf ignores NaN: it poisons l and o
          tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 2));
          const float m_new = fmaxf(m[r], tmax);
          const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
          // m_new == -inf: every score is -inf (p = 0) or NaN (an invalid block: p stays NaN and poisons
          // the row even when later tiles are valid, as in ref).
          const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = sc[n][2 * r + e];
              x = exp2f(x - m_sub);
              sum += x;
            }
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
#pragma unroll
          for (int n = 0; n < kHd / 8; ++n) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
          }
        }
        // O += P V, 16 keys per k step: P's A fragment is the C fragments of n tiles 2j and 2j + 1.
#pragma unroll
        for (int j = 0; j < kKeys / 16; ++j) {
          const uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]), pack_bf16(sc[2 * j][2], sc[2 * j][3]),
                                  pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                                  pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
#pragma unroll
          for (int dp = 0; dp < kHd / 16; ++dp) {
            uint32_t b[4];  // matrices: keys (j*16 + 0-7 | 8-15) x dims (dp*16 + 0-7 | 8-15), transposed
            ldsm_x4_trans(b, vs + (j * 16 + (mi & 1) * 8 + r8) * kRowB + (dp * 16 + (mi >> 1) * 8) * 2);
            mma_m16n8k16(o[2 * dp], pa, b[0], b[1]);
            mma_m16n8k16(o[2 * dp + 1], pa, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with stage st before iteration it + 1 refills it
    }
    // Normalise and store this lane's rows of the pass.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(kFull, l[r], 1);
      l[r] += __shfl_xor_sync(kFull, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r == 0 ? row0 : row1;
      if (!(r == 0 ? live0 : live1)) continue;
      const int64_t base = static_cast<int64_t>(ri.tok[row]) * a.o_ts + static_cast<int64_t>(ri.head[row]) * a.o_hs;
#pragma unroll
      for (int n = 0; n < kHd / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e)  // l == 0 (nothing visible): NaN, as ref's 0/0
          store_any(a.out, a.out_dtype, base + n * 8 + 2 * tq + e, o[n][2 * r + e] / l[r]);
    }
  }
}

template <int kHd, int F>
void launch_flash2(cudaStream_t s, const FlashArgs& a, int row_tiles, int n_kv_heads) {
  auto kernel = flash2_prefill_kernel<kHd, F>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Smem2<kHd>::kBytes, "paged_attention (flash2)");
  kernel<<<dim3(row_tiles, n_kv_heads), kThreads, Smem2<kHd>::kBytes, s>>>(a);
}

// ---- fa2b: the same kernel, tuned for occupancy (BUNSEN_FLASH_PREFILL=fa2b, or the testing switch 3) ----
// Same row mapping, masks and NaN rules as flash2_prefill_kernel; results differ only by rounding (the scale
// meets the scores in the exponent's FFMA). Launched for bf16 caches only (F = kKvPlain): its quantized
// staging compiles but spills at 168 registers, so flash_prefill sends quantized caches to
// flash2_prefill_kernel. Differences:
// - 3 blocks (12 warps) per SM instead of 2: __launch_bounds__(kThreads, 3) caps registers at 168 (Q's 32
//   fragment registers, O's 64 and S's 32 are the live sets; K's B fragments are loaded per k16 step), and
//   Q has no shared memory of its own: it is staged through stage 1's K buffer before the first pass, so a
//   block needs 4 tiles (hd 128: 68 KiB) instead of 5.
// - one barrier per tile instead of two: iteration it waits for tile it (issued a whole tile earlier), syncs,
//   then issues tile it + 1 into the other stage (every warp is past tile it - 1, which last read it), so
//   the copy of tile it + 1 overlaps all of tile it's compute. A barrier per pass protects the id slots.
// - cheaper softmax: unscaled scores, the max taken before scaling, p = ex2.approx(s * scale_log2e - m) as
//   one FFMA + MUFU; the soft-cap is a warp-uniform branch (no tanhf in the plain path); masks compare
//   against per-row bounds precomputed per pass, and invalid blocks are two ballots per tile instead of a
//   shared read per score. The staging loop gives each thread a fixed 16-byte column.
template <int kHd>
struct SmemB {
  static constexpr int kRowBytes = Smem2<kHd>::kRowBytes;
  static constexpr size_t kTile = Smem2<kHd>::kTile;
  static constexpr size_t kBytes = static_cast<size_t>(kStages) * 2 * kTile;  // K0 V0 K1 V1; Q aliases K1
  static_assert(kRows == kKeys, "Q is staged through one K tile");
};

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx.ftz: exp2(-inf) = 0, NaN stays NaN
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <int kHd, int F>
__global__ void __launch_bounds__(kThreads, 3) flash2b_prefill_kernel(const FlashArgs a, const FlashSplit sp) {
  using S = SmemB<kHd>;
  constexpr int kRowB = S::kRowBytes, kChunks = Smem2<kHd>::kChunks;
  constexpr int kKeysPerPass = kThreads / kChunks;  // staging: keys per loop step (fixed column per thread)
  static_assert(kThreads % kChunks == 0 && kKeys % kKeysPerPass == 0, "staging");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ RowInfo2 ri;
  unsigned char* const qs = smem + 2 * S::kTile;  // stage 1's K buffer, free until the first pass stages
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = blockIdx.y;
  uint32_t qa[kHd / 16][4];  // A fragments of Q: rows warp*16 + 0..15, dims kk*16 + 0..15
  load_rows_and_q<kHd>(a, ri, qs, warp, lane, g, qa);
  // qs is overwritten only by tile 1 of the first pass, staged after that pass's first barrier.
  uint64_t todo = 0;
  for (int r = 0; r < kRows; ++r) todo |= ri.tok[r] >= 0 ? uint64_t{1} << r : 0;

  const int gq = lane >> 2, tq = lane & 3;
  const int mi = lane >> 3, r8 = lane & 7;
  const int row0 = warp * 16 + gq, row1 = row0 + 8;
  const float qk_scale = a.scale * kLog2e;
  const Bf16* kc = static_cast<const Bf16*>(a.k_cache);
  const Bf16* vc = static_cast<const Bf16*>(a.v_cache);

  while (todo != 0) {
    const int seq = ri.seq[__ffsll(static_cast<long long>(todo)) - 1];
    uint64_t pass = 0;
    int lo = INT_MAX, hi = -1;
    for (int r = 0; r < kRows; ++r)
      if ((todo >> r & 1u) && ri.seq[r] == seq) {
        pass |= uint64_t{1} << r;
        lo = min(lo, first_visible_key2(ri.pos[r], a.window));
        hi = max(hi, ri.pos[r]);
      }
    todo &= ~pass;
    if (sp.n_splits > 1) {  // this block's key slice [z L, (z + 1) L): tile-aligned, so no tile straddles two
      lo = max(lo, static_cast<int>(blockIdx.z) * sp.split_len);
      hi = min(hi, (static_cast<int>(blockIdx.z) + 1) * sp.split_len - 1);
    }
    int w_lo = INT_MAX, w_hi = -1, w_min_pos = INT_MAX, w_max_first = 0;
    const bool w_all = ((pass >> (warp * 16)) & 0xffffu) == 0xffffu;
    for (int r = warp * 16; r < warp * 16 + 16; ++r)
      if (pass >> r & 1u) {
        const int first = first_visible_key2(ri.pos[r], a.window);
        w_lo = min(w_lo, first);
        w_hi = max(w_hi, ri.pos[r]);
        w_min_pos = min(w_min_pos, ri.pos[r]);
        w_max_first = max(w_max_first, first);
      }
    // Visible keys of this lane's rows, minus 2 tq (the lane's column offset): [vis_lo, vis_hi], empty for a
    // row outside the pass. The warp's tiles: those it computes [t_lo, t_hi], those it needs no mask in
    // [f_lo, f_hi] (empty unless all 16 rows take part).
    const bool live0 = pass >> row0 & 1u, live1 = pass >> row1 & 1u;
    const int vis_hi0 = ri.pos[row0] - 2 * tq, vis_hi1 = ri.pos[row1] - 2 * tq;
    const int vis_lo0 = live0 ? first_visible_key2(ri.pos[row0], a.window) - 2 * tq : INT_MAX / 2;
    const int vis_lo1 = live1 ? first_visible_key2(ri.pos[row1], a.window) - 2 * tq : INT_MAX / 2;
    const bool seq_ok = seq >= 0 && seq < a.n_seqs;
    const int kb0 = lo - lo % kKeys;
    const int n_tiles = hi >= kb0 && lo <= hi ? (hi - kb0) / kKeys + 1 : 0;
    const int t_lo = w_hi >= 0 ? (w_lo - kb0) / kKeys : INT_MAX, t_hi = w_hi >= 0 ? (w_hi - kb0) / kKeys : -1;
    const int f_lo = w_all ? (w_max_first - kb0 + kKeys - 1) / kKeys : INT_MAX;  // kb >= w_max_first
    const int f_hi = w_all ? (w_min_pos - kb0 + 1) / kKeys - 1 : -1;              // kb + 63 <= w_min_pos

    auto fetch = [&](int t) {
      const int key = kb0 + t * kKeys + static_cast<int>(threadIdx.x), bi = key / a.block_size;
      return threadIdx.x < kKeys && t < n_tiles && seq_ok && bi < a.max_blocks
                 ? a.block_tables[static_cast<int64_t>(seq) * a.table_stride + bi]
                 : -1;
    };
    auto publish = [&](int t, int b) {
      if (threadIdx.x < kKeys && t < n_tiles) {
        const int key = kb0 + t * kKeys + static_cast<int>(threadIdx.x), bi = key / a.block_size;
        ri.key_block[t % kSlots][threadIdx.x] = b >= 0 && b < a.n_blocks ? b : -1;
        ri.key_off[t % kSlots][threadIdx.x] = key - bi * a.block_size;
      }
    };
    int pending = -1;
    // Publishes tile it + 2, stages tile `it` into stage `st` (one cp.async group), fetches tile it + 3.
    // Called right after a barrier every warp reaches only once done with tile it - 2 (the last reader of
    // stage st) and with tile it - 2's slot, (it + 2) % kSlots; slot it % kSlots was published by
    // stage(it - 2), a barrier ago.
    auto stage = [&](int it, int st) {
      publish(it + 2, pending);
      const int kb = kb0 + it * kKeys, slot = it % kSlots;
      const int st_col = static_cast<int>(threadIdx.x) % kChunks;  // this thread's 16-byte column ...
      const int st_key = static_cast<int>(threadIdx.x) / kChunks;  // ... of keys st_key + 8 i (hd 128)
      unsigned char* ks = smem + static_cast<size_t>(st) * 2 * S::kTile;
      unsigned char* vs = ks + S::kTile;
#pragma unroll
      for (int j = st_key; j < kKeys; j += kKeysPerPass) {
        const int key = kb + j;
        const int blk = key >= lo && key <= hi ? ri.key_block[slot][j] : -1;
        unsigned char* kd = ks + j * kRowB + st_col * 16;
        unsigned char* vd = vs + j * kRowB + st_col * 16;
        if (blk < 0) {
          *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
          continue;
        }
        const int64_t off = ri.key_off[slot][j];
        if constexpr (F == kKvPlain) {
          cp_async_16(kd, kc + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2 + st_col * 8);
          cp_async_16(vd, vc + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2 + st_col * 8);
        } else {
          const uint8_t* k8 = static_cast<const uint8_t*>(a.k_cache);
          const uint8_t* v8 = static_cast<const uint8_t*>(a.v_cache);
          *reinterpret_cast<uint4*>(kd) =
              dequant_chunk2<F>(k8 + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2,
                                a.k_params + blk * a.kp_s0 + off * a.kp_s1 + g * a.kp_s2, st_col * 8, a.kv_group);
          *reinterpret_cast<uint4*>(vd) =
              dequant_chunk2<F>(v8 + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2,
                                a.v_params + blk * a.vp_s0 + off * a.vp_s1 + g * a.vp_s2, st_col * 8, a.kv_group);
        }
      }
      cp_async_commit_group();
      pending = fetch(it + 3);
    };

    float o[kHd / 8][4];
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    publish(0, fetch(0));
    publish(1, fetch(1));
    pending = fetch(2);
    __syncthreads();  // slots 0 and 1 are written; every warp holds its Q fragments
    if (n_tiles > 0) stage(0, 0);
    for (int it = 0; it < n_tiles; ++it) {
      const int st = it & 1;
      cp_async_wait_group<0>();  // this thread's part of tile `it` has landed
      __syncthreads();           // ... every thread's; and every warp is done with tile it - 1
      if (it + 1 < n_tiles) stage(it + 1, st ^ 1);
      const int kb = kb0 + it * kKeys, slot = it % kSlots;
      if (it >= t_lo && it <= t_hi) {
        const unsigned char* ks = smem + static_cast<size_t>(st) * 2 * S::kTile;
        const unsigned char* vs = ks + S::kTile;
        float sc[kKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kHd / 16; ++kk)
#pragma unroll
          for (int np = 0; np < kKeys / 16; ++np) {
            uint32_t b[4];
            ldsm_x4(b, ks + (np * 16 + (mi >> 1) * 8 + r8) * kRowB + (kk * 16 + (mi & 1) * 8) * 2);
            mma_m16n8k16(sc[2 * np], qa[kk], b[0], b[1]);
            mma_m16n8k16(sc[2 * np + 1], qa[kk], b[2], b[3]);
          }
        // Invalid blocks of the tile's keys 0-31 / 32-63 as bit masks (the mask loop's only shared reads).
        const unsigned bad_lo = __ballot_sync(kFull, ri.key_block[slot][lane] < 0);
        const unsigned bad_hi = __ballot_sync(kFull, ri.key_block[slot][lane + 32] < 0);
        const bool full = (bad_lo | bad_hi) == 0 && it >= f_lo && it <= f_hi;
        // Scores stay unscaled (the scale is positive, so the max commutes with it) and meet qk_scale in the
        // exponent's FFMA; a soft-capped score c·tanh(s·scale / c) is kept divided by scale likewise.
        if (a.softcap > 0.0f) {
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[n][e] = a.softcap * tanhf(sc[n][e] * a.scale / a.softcap) / a.scale;
        }
        if (!full) {
          // Element (n, e) is key kb + 2 tq + c with c = 8 n + (e & 1) a constant: visible when c lies in
          // [vlo, vhi] of its row (an empty range for a row outside the pass).
          const int vlo0 = vis_lo0 - kb, vhi0 = vis_hi0 - kb, vlo1 = vis_lo1 - kb, vhi1 = vis_hi1 - kb;
          const unsigned bad0 = bad_lo >> (2 * tq), bad1 = bad_hi >> (2 * tq);
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int c = n * 8 + (e & 1);
              const bool vis = e >= 2 ? c >= vlo1 && c <= vhi1 : c >= vlo0 && c <= vhi0;
              const bool bad = ((c < 32 ? bad0 >> c : bad1 >> (c - 32)) & 1u) != 0;
              sc[n][e] = !vis ? -INFINITY : bad ? NAN : sc[n][e];
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float tmax = -INFINITY;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) tmax = fmaxf(tmax, fmaxf(sc[n][2 * r], sc[n][2 * r + 1]));
          tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));  // fmaxf ignores NaN: it poisons l and o
          tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 2));
          const float m_new = fmaxf(m[r], tmax * qk_scale);  // m: in log2 units
          const float alpha = m_new == -INFINITY ? 1.0f : fast_exp2(m[r] - m_new);
          const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = sc[n][2 * r + e];
              x = fast_exp2(fmaf(x, qk_scale, -m_sub));
              sum += x;
            }
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
#pragma unroll
          for (int n = 0; n < kHd / 8; ++n) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
          }
        }
#pragma unroll
        for (int j = 0; j < kKeys / 16; ++j) {
          const uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]), pack_bf16(sc[2 * j][2], sc[2 * j][3]),
                                  pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                                  pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
#pragma unroll
          for (int dp = 0; dp < kHd / 16; ++dp) {
            uint32_t b[4];
            ldsm_x4_trans(b, vs + (j * 16 + (mi & 1) * 8 + r8) * kRowB + (dp * 16 + (mi >> 1) * 8) * 2);
            mma_m16n8k16(o[2 * dp], pa, b[0], b[1]);
            mma_m16n8k16(o[2 * dp + 1], pa, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with this pass's slots and stages before the next pass writes them
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(kFull, l[r], 1);
      l[r] += __shfl_xor_sync(kFull, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r == 0 ? row0 : row1;
      if ((r == 0 ? vis_lo0 : vis_lo1) == INT_MAX / 2) continue;  // not in this pass
      if (sp.n_splits > 1) {  // the slice's partial: max (natural log units), sum, unnormalised acc
        float* part = sp.partials +
                      ((static_cast<int64_t>(ri.tok[row]) * sp.n_heads + ri.head[row]) * sp.n_splits + blockIdx.z) * (kHd + 2);
        if (tq == 0) {
          part[0] = m[r] == -INFINITY ? -INFINITY : m[r] * kLn2;
          part[1] = l[r];
        }
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) part[2 + n * 8 + 2 * tq + e] = o[n][2 * r + e];
        continue;
      }
      const int64_t base = static_cast<int64_t>(ri.tok[row]) * a.o_ts + static_cast<int64_t>(ri.head[row]) * a.o_hs;
#pragma unroll
      for (int n = 0; n < kHd / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          store_any(a.out, a.out_dtype, base + n * 8 + 2 * tq + e, o[n][2 * r + e] / l[r]);
    }
  }
}

template <int kHd, int F>
void launch_flash2b(cudaStream_t s, const FlashArgs& a, const FlashSplit& sp, int row_tiles, int n_kv_heads) {
  auto kernel = flash2b_prefill_kernel<kHd, F>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), SmemB<kHd>::kBytes, "paged_attention (flash2b)");
  // A hint (the driver may pick the carveout itself): three blocks need 3 x 71 KiB of the SM's 228.
  static const bool carveout = [&] {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared) == cudaSuccess;
  }();
  (void)carveout;
  kernel<<<dim3(row_tiles, n_kv_heads, sp.n_splits), kThreads, SmemB<kHd>::kBytes, s>>>(a, sp);
}

std::atomic<int> g_prefill_splits{0};
constexpr int kMaxPrefillSplits = 32;  // <= attention.cu's combine kernel limit

}  // namespace

void set_prefill_splits_for_testing(int n_splits) {
  g_prefill_splits.store(n_splits);
}

FlashSplit choose_prefill_splits(int64_t blocks, int64_t max_ctx, int align, bool decode_rows) {
  FlashSplit sp;
  // BUNSEN_PREFILL_SPLITS: unset/0 = from the shapes, 1 = never, n = n slices
  static const int env = env_int("BUNSEN_PREFILL_SPLITS", 0);
  const int forced = g_prefill_splits.load() != 0 ? g_prefill_splits.load() : env;
  int n = 1;
  if (forced > 1) {
    n = std::min(forced, kMaxPrefillSplits);
  } else if (forced == 0 && !decode_rows && blocks < 2 * static_cast<int64_t>(sm_count()) && max_ctx >= 4096) {
    const int64_t waves = (3 * static_cast<int64_t>(sm_count()) + blocks - 1) / blocks;
    n = static_cast<int>(std::min<int64_t>({waves, max_ctx / 1024, kMaxPrefillSplits}));
  }
  if (n <= 1 || max_ctx <= align) return sp;
  const int64_t per = (max_ctx + n - 1) / n;
  sp.split_len = static_cast<int>((per + align - 1) / align * align);
  sp.n_splits = static_cast<int>((max_ctx + sp.split_len - 1) / sp.split_len);  // no empty trailing slice
  if (sp.n_splits <= 1) sp = FlashSplit{};
  return sp;
}

void flash_prefill_mma(void* stream, const DevAttention& at, const FlashArgs& a, int row_tiles) {
  const int n_kv_heads = static_cast<int>(at.cache.n_kv_heads);
  cudaStream_t s = as_stream(stream);
  auto go = [&](auto fmt) {
    constexpr int F = decltype(fmt)::value;
    if (at.q.head_dim == 64)
      launch_flash2<64, F>(s, a, row_tiles, n_kv_heads);
    else
      launch_flash2<128, F>(s, a, row_tiles, n_kv_heads);
  };
  if (at.cache.bits == 0)
    go(std::integral_constant<int, kKvPlain>{});
  else
    with_quant_fmt(at.cache, go);
}

void flash_prefill_mma_b(void* stream, const DevAttention& at, const FlashArgs& a, int row_tiles) {
  const int n_kv_heads = static_cast<int>(at.cache.n_kv_heads);
  cudaStream_t s = as_stream(stream);
  const int64_t max_ctx = at.meta.max_blocks * at.cache.block_size;
  const bool decode_rows = a.tokens_per_tile == 1;  // one token per block (flash-decode routing): no split
  FlashSplit sp = choose_prefill_splits(static_cast<int64_t>(row_tiles) * n_kv_heads, max_ctx, kKeys, decode_rows);
  sp.n_heads = static_cast<int>(at.q.n_heads);
  if (sp.n_splits > 1) {
    const size_t bytes = static_cast<size_t>(a.n_tokens) * sp.n_heads * sp.n_splits * (at.q.head_dim + 2) * sizeof(float);
    sp.partials = static_cast<float*>(scratch(stream, bytes, "paged_attention (flash2b split-KV partials)"));
  }
  if (at.q.head_dim == 64)
    launch_flash2b<64, kKvPlain>(s, a, sp, row_tiles, n_kv_heads);
  else
    launch_flash2b<128, kKvPlain>(s, a, sp, row_tiles, n_kv_heads);
  if (sp.n_splits > 1) {
    check_launch("paged_attention", [&] { return strfmt("(flash2b, %d key slices)", sp.n_splits); });
    combine_split_partials(stream, a, sp, static_cast<int>(at.q.head_dim));
  }
}

}  // namespace bunsen::kernels::cuda
