// Tensor-core paged attention for prefill (flash attention), the WMMA kernel: since the mma.sync kernels
// of attention_prefill_mma.cu became the default, this one runs with BUNSEN_FLASH_PREFILL=wmma (or the
// testing switch) as the fallback and the comparison point. A block owns 64 query rows that share one kv
// head (GQA: the group's heads of 64 / group consecutive tokens), walks their keys in tiles of 64 through
// the block table, computes S = Q·Kᵀ and O += P·V with bf16 WMMA (f32 accumulation) and keeps an online
// softmax per row in shared memory. Rows of several sequences in one tile are handled in passes, one
// sequence per pass, like the SIMT kernel in attention.cu (which remains the reference-shaped fallback).
// Not for decode rows (attention.cu's flash-decoding kernel) and not for f32 caches or head_dim other than
// 64/128. A quantized cache (--kv-quant) is dequantized while staging a tile: its values are rounded to bf16
// in shared memory (as a bf16 cache holds them). Invariants: masks as ref (causal, sliding window,
// soft-cap); a visible key whose block id is invalid yields NaN for its row and is never dereferenced; P is
// rounded to bf16 before P·V.
#include <cuda_bf16.h>  // before mma.h: enables its bf16 fragments
#include <mma.h>

#include <atomic>
#include <climits>
#include <cstring>

#include "core/env.h"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kv_quant.cuh"

namespace bunsen::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // query rows per block (16 per warp: one WMMA row tile)
constexpr int kKeys = 64;           // keys per tile
constexpr int kPadB = 8;            // bf16 row padding (keeps WMMA ldm a multiple of 8, spreads banks)
constexpr int kPadF = 4;            // f32 row padding

__device__ __forceinline__ int first_visible_key(int pos, int window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

template <int kHd>
struct Smem {
  static constexpr int kLdq = kHd + kPadB, kLds = kKeys + kPadF, kLdp = kKeys + kPadB, kLdo = kHd + kPadF;
  static constexpr size_t kQ = static_cast<size_t>(kRows) * kLdq * 2;
  static constexpr size_t kK = static_cast<size_t>(kKeys) * kLdq * 2;
  static constexpr size_t kS = static_cast<size_t>(kRows) * kLds * 4;
  static constexpr size_t kP = static_cast<size_t>(kRows) * kLdp * 2;
  static constexpr size_t kO = static_cast<size_t>(kRows) * kLdo * 4;
  static constexpr size_t kBytes = kQ + 2 * kK + kS + kP + kO;
};

struct RowInfo {
  int tok[kRows], head[kRows], pos[kRows], seq[kRows];
  float m[kRows], l[kRows], alpha[kRows];
  int key_block[kKeys];
};

// Eight dequantized elements of a quantized row as bf16 (one 16-byte chunk of a staged tile).
template <int F>
__device__ __forceinline__ uint4 dequant_chunk(const uint8_t* row, const float* params, int d0, int group) {
  float f[8];
  kv_dequant8<F>(row, params, d0, group, f);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// F: the cache format (plain = bf16; else u8 codes, strides in bytes, plus params).
template <int kHd, int F>
__global__ void __launch_bounds__(kThreads) flash_prefill_kernel(const FlashArgs a) {
  using S = Smem<kHd>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ RowInfo ri;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + S::kQ);
  __nv_bfloat16* vs = reinterpret_cast<__nv_bfloat16*>(smem + S::kQ + S::kK);
  float* ss = reinterpret_cast<float*>(smem + S::kQ + 2 * S::kK);
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(smem + S::kQ + 2 * S::kK + S::kS);
  float* os = reinterpret_cast<float*>(smem + S::kQ + 2 * S::kK + S::kS + S::kP);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = blockIdx.y;
  const int tile = blockIdx.x / a.head_chunks, chunk = blockIdx.x % a.head_chunks;

  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const int tt = r / a.heads_per_tile, hg = chunk * a.heads_per_tile + r % a.heads_per_tile;
    const int t = tile * a.tokens_per_tile + tt;
    const bool ok = tt < a.tokens_per_tile && t < a.n_tokens && hg < a.group;
    ri.tok[r] = ok ? t : -1;
    ri.head[r] = g * a.group + hg;
    ri.pos[r] = ok ? a.positions[t] : 0;
    ri.seq[r] = ok ? a.seq_index[t] : INT_MIN;
  }
  __syncthreads();
  const Bf16* q = static_cast<const Bf16*>(a.q);
  for (int e = threadIdx.x; e < kRows * kHd; e += kThreads) {
    const int r = e / kHd, d = e - r * kHd;
    const int t = ri.tok[r];
    qs[r * S::kLdq + d] = t >= 0 ? q[static_cast<int64_t>(t) * a.q_ts + ri.head[r] * a.q_hs + d] : Bf16(0.0f);
  }
  uint64_t todo = 0;
  for (int r = 0; r < kRows; ++r) todo |= ri.tok[r] >= 0 ? uint64_t{1} << r : 0;

  const Bf16* kc = static_cast<const Bf16*>(a.k_cache);
  const Bf16* vc = static_cast<const Bf16*>(a.v_cache);
  while (todo != 0) {
    const int seq = ri.seq[__ffsll(static_cast<long long>(todo)) - 1];
    uint64_t pass = 0;
    int lo = INT_MAX, hi = -1;
    for (int r = 0; r < kRows; ++r)
      if ((todo >> r & 1u) && ri.seq[r] == seq) {
        pass |= uint64_t{1} << r;
        lo = min(lo, first_visible_key(ri.pos[r], a.window));
        hi = max(hi, ri.pos[r]);
      }
    todo &= ~pass;
    __syncthreads();  // everyone has read ri.seq/pos for this pass before anything below rewrites smem
    for (int r = threadIdx.x; r < kRows; r += kThreads) {
      ri.m[r] = -INFINITY;
      ri.l[r] = 0.0f;
    }
    for (int e = threadIdx.x; e < kRows * kHd; e += kThreads) os[(e / kHd) * S::kLdo + e % kHd] = 0.0f;
    const bool seq_ok = seq >= 0 && seq < a.n_seqs;
    for (int kb = lo - lo % kKeys; kb <= hi; kb += kKeys) {
      __syncthreads();  // the previous tile's K/V/P are no longer read
      if (threadIdx.x < kKeys) {
        const int key = kb + threadIdx.x;
        int blk = -1;
        if (seq_ok && key / a.block_size < a.max_blocks) {
          const int b = a.block_tables[static_cast<int64_t>(seq) * a.table_stride + key / a.block_size];
          blk = b >= 0 && b < a.n_blocks ? b : -1;
        }
        ri.key_block[threadIdx.x] = blk;
      }
      __syncthreads();
      constexpr int kChunks = kHd / 8;  // 16-byte chunks per row
      for (int c = threadIdx.x; c < kKeys * kChunks; c += kThreads) {
        const int j = c / kChunks, d = (c - j * kChunks) * 8, blk = ri.key_block[j];
        uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
        if (blk >= 0) {
          const int64_t off = (kb + j) % a.block_size;
          if constexpr (F == kKvPlain) {
            kv = *reinterpret_cast<const uint4*>(kc + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2 + d);
            vv = *reinterpret_cast<const uint4*>(vc + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2 + d);
          } else {
            const uint8_t* k8 = static_cast<const uint8_t*>(a.k_cache);
            const uint8_t* v8 = static_cast<const uint8_t*>(a.v_cache);
            kv = dequant_chunk<F>(k8 + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2,
                                  a.k_params + blk * a.kp_s0 + off * a.kp_s1 + g * a.kp_s2, d, a.kv_group);
            vv = dequant_chunk<F>(v8 + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2,
                                  a.v_params + blk * a.vp_s0 + off * a.vp_s1 + g * a.vp_s2, d, a.kv_group);
          }
        }
        *reinterpret_cast<uint4*>(ks + j * S::kLdq + d) = kv;
        *reinterpret_cast<uint4*>(vs + j * S::kLdq + d) = vv;
      }
      __syncthreads();
      // S = Q Kᵀ for this warp's 16 rows.
      {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kKeys / 16];
#pragma unroll
        for (int n = 0; n < kKeys / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
        for (int k = 0; k < kHd / 16; ++k) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
          wmma::load_matrix_sync(fa, qs + warp * 16 * S::kLdq + k * 16, S::kLdq);
#pragma unroll
          for (int n = 0; n < kKeys / 16; ++n) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
            wmma::load_matrix_sync(fb, ks + n * 16 * S::kLdq + k * 16, S::kLdq);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
          }
        }
#pragma unroll
        for (int n = 0; n < kKeys / 16; ++n)
          wmma::store_matrix_sync(ss + warp * 16 * S::kLds + n * 16, acc[n], S::kLds, wmma::mem_row_major);
      }
      __syncwarp();
      // Online softmax: two lanes per row, 32 keys each.
      {
        const int row = warp * 16 + (lane >> 1), half = lane & 1;
        const bool live = pass >> row & 1u;
        const int pos = ri.pos[row], first = first_visible_key(pos, a.window);
        float sc[32];
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int j = half * 32 + i, key = kb + j;
          float s = -INFINITY;
          if (live && key <= pos && key >= first) {
            if (ri.key_block[j] < 0) {
              s = NAN;
            } else {
              s = ss[row * S::kLds + j] * a.scale;
              if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            }
          }
          sc[i] = s;
          mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_old = ri.m[row];
        const float m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float p = m_new == -INFINITY ? 0.0f : __expf(sc[i] - m_new);
          sum += p;
          ps[row * S::kLdp + half * 32 + i] = __float2bfloat16(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float alpha = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new);
        __syncwarp();
        if (half == 0) {
          ri.alpha[row] = alpha;
          ri.l[row] = ri.l[row] * alpha + sum;
          ri.m[row] = m_new;
        }
      }
      __syncwarp();
      // O = O * alpha + P V for this warp's rows (O lives in shared memory between tiles).
      for (int e = lane; e < 16 * kHd; e += 32) {
        const int row = warp * 16 + e / kHd, d = e % kHd;
        os[row * S::kLdo + d] *= ri.alpha[row];
      }
      __syncwarp();
      {
#pragma unroll
        for (int n = 0; n < kHd / 16; ++n) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
          float* o_tile = os + warp * 16 * S::kLdo + n * 16;
          wmma::load_matrix_sync(acc, o_tile, S::kLdo, wmma::mem_row_major);
#pragma unroll
          for (int k = 0; k < kKeys / 16; ++k) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, ps + warp * 16 * S::kLdp + k * 16, S::kLdp);
            wmma::load_matrix_sync(fb, vs + k * 16 * S::kLdq + n * 16, S::kLdq);
            wmma::mma_sync(acc, fa, fb, acc);
          }
          wmma::store_matrix_sync(o_tile, acc, S::kLdo, wmma::mem_row_major);
        }
      }
      __syncwarp();
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * kHd; e += kThreads) {
      const int r = e / kHd, d = e - r * kHd;
      if (!(pass >> r & 1u)) continue;
      const float v = os[r * S::kLdo + d] / ri.l[r];  // l == 0 (nothing visible): NaN, as ref's 0/0
      store_any(a.out, a.out_dtype, static_cast<int64_t>(ri.tok[r]) * a.o_ts + ri.head[r] * a.o_hs + d, v);
    }
  }
}

template <int kHd, int F>
void launch_flash(cudaStream_t s, const FlashArgs& a, int row_tiles, int n_kv_heads) {
  auto kernel = flash_prefill_kernel<kHd, F>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Smem<kHd>::kBytes, "paged_attention (flash)");
  kernel<<<dim3(row_tiles, n_kv_heads), kThreads, Smem<kHd>::kBytes, s>>>(a);
}

// Which kernel flash_prefill runs: the occupancy-tuned mma.sync kernel (fa2b, attention_prefill_mma.cu;
// bf16 caches: H200, 8B shape, 2,048 tokens 261 us per layer vs 447 for the first mma.sync kernel) unless
// BUNSEN_FLASH_PREFILL=mma (testing switch 2) selects that first kernel, or =wmma (or 0, switch 1) this
// file's WMMA kernel.
constexpr int kPrefillDefault = 0, kPrefillWmma = 1, kPrefillMma = 2, kPrefillFa2b = 3;
std::atomic<int> g_prefill_kernel{kPrefillDefault};

int prefill_kernel() {
  const int forced = g_prefill_kernel.load();
  if (forced != kPrefillDefault) return forced;
  static const int from_env = [] {
    const std::string_view e = env_str("BUNSEN_FLASH_PREFILL");
    if (e == "wmma" || e == "0") return kPrefillWmma;
    if (e == "mma") return kPrefillMma;
    return kPrefillFa2b;
  }();
  return from_env;
}

}  // namespace

void set_attention_prefill_kernel_for_testing(int kernel) {
  const bool known = kernel == kPrefillWmma || kernel == kPrefillMma || kernel == kPrefillFa2b;
  g_prefill_kernel.store(known ? kernel : kPrefillDefault);
}

bool flash_prefill_ok(const DevAttention& at) {
  const int64_t hd = at.q.head_dim;
  const DevCache& c = at.cache;
  if (c.bits != 0) {  // a chunk of 8 elements: one group, 8 code bytes (int4: 4) at an aligned address
    const int64_t need = c.bits == 4 && !c.fp8 ? 4 : 8;
    const auto ok = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % need == 0; };
    bool strides = true;
    for (int i = 0; i < 3; ++i) strides = strides && c.k_strides[i] % need == 0 && c.v_strides[i] % need == 0;
    return c.dtype == DType::kU8 && at.q.dtype == DType::kBF16 && (hd == 64 || hd == 128) && c.group_size > 0 &&
           c.group_size % 8 == 0 && hd % c.group_size == 0 && c.k_params != nullptr && c.v_params != nullptr &&
           strides && ok(c.k) && ok(c.v) && ok(c.k_params) && ok(c.v_params);
  }
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return c.dtype == DType::kBF16 && at.q.dtype == DType::kBF16 && (hd == 64 || hd == 128) &&
         c.k_strides[0] % 8 == 0 && c.k_strides[1] % 8 == 0 && c.k_strides[2] % 8 == 0 && c.v_strides[0] % 8 == 0 &&
         c.v_strides[1] % 8 == 0 && c.v_strides[2] % 8 == 0 && aligned(c.k) && aligned(c.v);
}

void flash_prefill(void* stream, const DevAttention& at) {
  FlashArgs a = paged_args(at);
  const int n_kv_heads = static_cast<int>(at.cache.n_kv_heads);
  a.heads_per_tile = a.group < kRows ? a.group : kRows;
  a.head_chunks = (a.group + a.heads_per_tile - 1) / a.heads_per_tile;
  // Decode rows (no more tokens than sequences) each belong to another sequence: one token per tile, so a
  // block streams one sequence's keys once for the whole GQA group instead of one pass per token.
  a.tokens_per_tile = at.q.n_tokens <= at.meta.n_seqs ? 1 : kRows / a.heads_per_tile;
  const int row_tiles = ((a.n_tokens + a.tokens_per_tile - 1) / a.tokens_per_tile) * a.head_chunks;
  const int kernel = prefill_kernel();
  // fa2b covers bf16 caches (its quantized staging spills at 168 registers) and takes the row max before
  // scaling (scale > 0); other cases run the default kernel.
  if (kernel == kPrefillFa2b && at.cache.bits == 0 && at.scale > 0.0f) {
    flash_prefill_mma_b(stream, at, a, row_tiles);
    return;
  }
  if (kernel == kPrefillMma || kernel == kPrefillFa2b) {
    flash_prefill_mma(stream, at, a, row_tiles);
    return;
  }
  cudaStream_t s = as_stream(stream);
  auto go = [&](auto fmt) {
    constexpr int F = decltype(fmt)::value;
    if (at.q.head_dim == 64)
      launch_flash<64, F>(s, a, row_tiles, n_kv_heads);
    else
      launch_flash<128, F>(s, a, row_tiles, n_kv_heads);
  };
  if (at.cache.bits == 0)
    go(std::integral_constant<int, kKvPlain>{});
  else
    with_quant_fmt(at.cache, go);
}

}  // namespace bunsen::kernels::cuda
