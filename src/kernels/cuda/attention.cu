// CUDA paged attention: the routing between its kernels, and the general tiled SIMT kernel with split-KV.
// A block owns up to 32 query rows that share one kv head (GQA: the group's heads of one or more
// tokens), walks their keys in tiles of 32 through the block table (K/V staged in shared memory as
// f32, reused by every row), and keeps a running max/sum per row. Rows of several sequences in one tile
// are handled in passes, one sequence per pass, so any varlen batch is correct. With n_splits > 1 each
// block covers one slice of the key range and writes (max, sum, acc) partials to the stream's scratch
// arena; a combine kernel merges them. This file also routes: pure decode steps on a bf16 cache go to
// flash-decoding (attention_decode.cu), other bf16 steps with head_dim 64/128 to the tensor-core kernel
// (attention_prefill.cu; a quantized cache too: both dequantize its codes while staging); this SIMT kernel
// is the general fallback (f32 caches, odd head dims, f32 q, quantized caches the others do not take).
// Invariants: masks as ref (causal, sliding window); a visible key whose sequence or block id is
// invalid is read as a NaN score (poisoning that row) and never dereferenced.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>

#include "core/env.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kv_quant.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 32;      // keys per tile = lanes per warp (lane j scores key j)
constexpr int kMinSplitKeys = 64;  // smallest key slice worth a block of its own
constexpr int kMaxSplits = 64;

std::atomic<int> g_forced_splits{0};
std::atomic<int> g_flash_decode{-1};  // -1: read BUNSEN_FLASH_DECODE once

bool flash_decode_enabled() {
  int v = g_flash_decode.load();
  if (v < 0) {
    v = env_flag("BUNSEN_FLASH_DECODE", false) ? 1 : 0;
    g_flash_decode.store(v);
  }
  return v == 1;
}

// The shared arguments (attention_prefill.cuh) plus what the SIMT and flash-decoding kernels add.
struct AttnArgs : PagedArgs {
  DType q_dtype = DType::kF32;
  int n_heads = 0, head_dim = 0;
  int n_splits = 1, split_len = 0;
  float* partials = nullptr;  // [n_tokens, n_heads, n_splits, head_dim + 2] f32: max, sum, acc
};

__device__ __forceinline__ int first_visible(int pos, int window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

size_t smem_floats(int head_dim, int rows_per_tile) {
  return static_cast<size_t>(rows_per_tile) * head_dim + static_cast<size_t>(kTileKeys) * (2 * head_dim + 1) +
         static_cast<size_t>(rows_per_tile) * kTileKeys;
}

// Shared state of one block, rows interleaved over warps: row r = i * kWarps + warp.
template <int kRows>
struct TileRows {
  int tok[kRows], head[kRows], pos[kRows], seq[kRows];
  int key_block[kTileKeys];  // physical block of each key of the current tile, -1 = invalid
};

template <int kRows>
__device__ void load_rows(const AttnArgs& a, TileRows<kRows>& rows, float* q_s) {
  const int tile = blockIdx.x / a.head_chunks, chunk = blockIdx.x % a.head_chunks, g = blockIdx.y;
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const int tt = r / a.heads_per_tile, hg = chunk * a.heads_per_tile + r % a.heads_per_tile;
    const int t = tile * a.tokens_per_tile + tt;
    const bool ok = tt < a.tokens_per_tile && t < a.n_tokens && hg < a.group;
    rows.tok[r] = ok ? t : -1;
    rows.head[r] = g * a.group + hg;
    rows.pos[r] = ok ? a.positions[t] : 0;
    rows.seq[r] = ok ? a.seq_index[t] : 0;
  }
  __syncthreads();
  const int d_total = a.head_dim;
  for (int e = threadIdx.x; e < kRows * d_total; e += kThreads) {
    const int r = e / d_total, d = e - r * d_total;
    q_s[e] =
        rows.tok[r] >= 0 ? load_any(a.q, a.q_dtype, rows.tok[r] * a.q_ts + rows.head[r] * a.q_hs + d) : 0.0f;
  }
}

// Stages keys [kb, kb + nk) of sequence `seq` (kv head blockIdx.y) into k_s / v_s as f32 (F != plain: CT is
// uint8_t, codes dequantized with their row's params).
template <typename CT, int F, int kRows>
__device__ void load_kv_tile(const AttnArgs& a, TileRows<kRows>& rows, int seq, int kb, int nk, float* k_s,
                             float* v_s) {
  const int D = a.head_dim, g = blockIdx.y;
  __syncthreads();  // the previous tile (and q_s, on the first) is no longer being read
  if (threadIdx.x < kTileKeys) {
    const int j = threadIdx.x, key = kb + j;
    int blk = -1;
    if (j < nk && seq >= 0 && seq < a.n_seqs && key / a.block_size < a.max_blocks) {
      const int b = a.block_tables[seq * a.table_stride + key / a.block_size];
      blk = b >= 0 && b < a.n_blocks ? b : -1;
    }
    rows.key_block[j] = blk;
  }
  __syncthreads();
  const CT* kc = static_cast<const CT*>(a.k_cache);
  const CT* vc = static_cast<const CT*>(a.v_cache);
  for (int e = threadIdx.x; e < kTileKeys * D; e += kThreads) {
    const int j = e / D, d = e - j * D, blk = rows.key_block[j];
    float kv = 0.0f, vv = 0.0f;
    if (blk >= 0) {
      const int64_t off = (kb + j) % a.block_size;
      if constexpr (F == kKvPlain) {
        kv = to_f32(kc[blk * a.k_s0 + off * a.k_s1 + g * a.k_s2 + d]);
        vv = to_f32(vc[blk * a.v_s0 + off * a.v_s1 + g * a.v_s2 + d]);
      } else {
        kv = kv_dequant<F>(kc + blk * a.k_s0 + off * a.k_s1 + g * a.k_s2,
                           a.k_params + blk * a.kp_s0 + off * a.kp_s1 + g * a.kp_s2, d, a.kv_group);
        vv = kv_dequant<F>(vc + blk * a.v_s0 + off * a.v_s1 + g * a.v_s2,
                           a.v_params + blk * a.vp_s0 + off * a.vp_s1 + g * a.vp_s2, d, a.kv_group);
      }
    }
    k_s[j * (D + 1) + d] = kv;
    v_s[j * D + d] = vv;
  }
  __syncthreads();
}

template <typename CT, int F, int kDpl, int kRpw>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttnArgs a) {
  constexpr int kRows = kWarps * kRpw;
  extern __shared__ float smem[];
  __shared__ TileRows<kRows> rows;
  const int D = a.head_dim, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, split = blockIdx.z;
  float* q_s = smem;                       // [kRows][D]
  float* k_s = q_s + kRows * D;            // [kTileKeys][D + 1] (padded: lane j reads row j)
  float* v_s = k_s + kTileKeys * (D + 1);  // [kTileKeys][D]
  float* p_s = v_s + kTileKeys * D + warp * kRpw * kTileKeys;  // this warp's [kRpw][kTileKeys]
  load_rows<kRows>(a, rows, q_s);
  uint32_t todo = 0;
  for (int r = 0; r < kRows; ++r) todo |= rows.tok[r] >= 0 ? 1u << r : 0u;
  while (todo != 0) {  // one pass per sequence present in the tile
    const int seq = rows.seq[__ffs(todo) - 1];
    uint32_t pass = 0;
    int lo = INT_MAX, hi = -1;
    for (int r = 0; r < kRows; ++r)
      if ((todo >> r & 1u) && rows.seq[r] == seq) {
        pass |= 1u << r;
        lo = min(lo, first_visible(rows.pos[r], a.window));
        hi = max(hi, rows.pos[r]);
      }
    todo &= ~pass;
    const int k0 = max(lo, split * a.split_len);
    const int k1 = split == a.n_splits - 1 ? hi + 1 : min(hi + 1, (split + 1) * a.split_len);
    uint32_t live = 0;  // this warp's rows in the pass (bit i: row i * kWarps + warp)
    int n_live = 0;
#pragma unroll
    for (int i = 0; i < kRpw; ++i)
      if (pass >> (i * kWarps + warp) & 1u) {
        live |= 1u << i;
        n_live = i + 1;
      }
    float m[kRpw], l[kRpw], o[kRpw][kDpl];
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.0f;
#pragma unroll
      for (int dd = 0; dd < kDpl; ++dd) o[i][dd] = 0.0f;
    }
    for (int kb = k0; kb < k1; kb += kTileKeys) {
      const int nk = min(kTileKeys, k1 - kb);
      load_kv_tile<CT, F, kRows>(a, rows, seq, kb, nk, k_s, v_s);
      float s[kRpw];
#pragma unroll
      for (int i = 0; i < kRpw; ++i) s[i] = 0.0f;
      if (lane < nk)
        for (int d = 0; d < D; ++d) {
          const float kd = k_s[lane * (D + 1) + d];
#pragma unroll
          for (int i = 0; i < kRpw; ++i)
            if (i < n_live) s[i] = fmaf(q_s[(i * kWarps + warp) * D + d], kd, s[i]);
        }
      const int key = kb + lane;
#pragma unroll
      for (int i = 0; i < kRpw; ++i) {
        if (!(live >> i & 1u)) continue;
        const int pos = rows.pos[i * kWarps + warp];
        float sc = -INFINITY;
        if (lane < nk && key <= pos && key >= first_visible(pos, a.window)) {
          if (rows.key_block[lane] < 0) {
            sc = NAN;
          } else {
            sc = s[i] * a.scale;
            if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
          }
        }
        const float m_new = fmaxf(m[i], warp_max(sc));
        const float p = m_new == -INFINITY ? 0.0f : expf(sc - m_new);
        const float alpha = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
        l[i] = l[i] * alpha + warp_sum(p);
        m[i] = m_new;
        p_s[i * kTileKeys + lane] = p;
        __syncwarp();
#pragma unroll
        for (int dd = 0; dd < kDpl; ++dd) o[i][dd] *= alpha;
        for (int j = 0; j < nk; ++j) {
          const float pj = p_s[i * kTileKeys + j];
#pragma unroll
          for (int dd = 0; dd < kDpl; ++dd)
            if (lane + 32 * dd < D) o[i][dd] = fmaf(pj, v_s[j * D + lane + 32 * dd], o[i][dd]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      if (!(live >> i & 1u)) continue;
      const int r = i * kWarps + warp, t = rows.tok[r], h = rows.head[r];
      if (a.n_splits == 1) {
        const float inv = 1.0f / l[i];  // l == 0 (nothing visible) gives 0 * inf = NaN, as 0/0 would
#pragma unroll
        for (int dd = 0; dd < kDpl; ++dd)
          if (lane + 32 * dd < D)
            store_any(a.out, a.out_dtype, t * a.o_ts + h * a.o_hs + lane + 32 * dd, o[i][dd] * inv);
      } else {
        float* part = a.partials + ((static_cast<int64_t>(t) * a.n_heads + h) * a.n_splits + split) * (D + 2);
        if (lane == 0) {
          part[0] = m[i];
          part[1] = l[i];
        }
#pragma unroll
        for (int dd = 0; dd < kDpl; ++dd)
          if (lane + 32 * dd < D) part[2 + lane + 32 * dd] = o[i][dd];
      }
    }
  }
}

// out[t, h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the splits of one (token, head).
// The split weights e^(m_s - M) are computed once per block (one thread per split) and shared, so each
// output element costs one coalesced load and FMA per split.
__global__ void __launch_bounds__(kThreads) combine_kernel(const AttnArgs a) {
  __shared__ float w[kMaxSplits];
  __shared__ float inv_den;
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row / a.n_heads), h = static_cast<int>(row % a.n_heads), D = a.head_dim;
  const float* part = a.partials + row * a.n_splits * (D + 2);
  if (threadIdx.x < 32) {
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < a.n_splits; s += 32) mx = fmaxf(mx, part[s * (D + 2)]);
    mx = warp_max(mx);
    float den = 0.0f;
    for (int s = threadIdx.x; s < a.n_splits; s += 32) {
      const float ms = part[s * (D + 2)];
      const float ws = ms == -INFINITY ? 0.0f : expf(ms - mx);
      w[s] = ws;
      den += ws * part[s * (D + 2) + 1];
    }
    den = warp_sum(den);
    if (threadIdx.x == 0) inv_den = 1.0f / den;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.0f;
    for (int s = 0; s < a.n_splits; ++s)
      if (w[s] != 0.0f) num = fmaf(w[s], part[s * (D + 2) + 2 + d], num);
    store_any(a.out, a.out_dtype, t * a.o_ts + h * a.o_hs + d, num * inv_den);
  }
}

template <typename CT, int F, int kDpl>
void launch(cudaStream_t stream, const AttnArgs& a, int row_tiles, int n_kv_heads) {
  constexpr int kRpw = kDpl <= 8 ? 8 : 4;
  auto kernel = attention_kernel<CT, F, kDpl, kRpw>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel),
                     smem_floats(32 * kDpl, kWarps * kRpw) * sizeof(float), "paged_attention");
  const size_t bytes = smem_floats(a.head_dim, kWarps * kRpw) * sizeof(float);
  kernel<<<dim3(row_tiles, n_kv_heads, a.n_splits), kThreads, bytes, stream>>>(a);
}

template <typename CT, int F>
void launch_for_head_dim(cudaStream_t stream, const AttnArgs& a, int row_tiles, int n_kv_heads) {
  if (a.head_dim <= 32)
    launch<CT, F, 1>(stream, a, row_tiles, n_kv_heads);
  else if (a.head_dim <= 64)
    launch<CT, F, 2>(stream, a, row_tiles, n_kv_heads);
  else if (a.head_dim <= 128)
    launch<CT, F, 4>(stream, a, row_tiles, n_kv_heads);
  else if (a.head_dim <= 256)
    launch<CT, F, 8>(stream, a, row_tiles, n_kv_heads);
  else
    launch<CT, F, 16>(stream, a, row_tiles, n_kv_heads);
}

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// Key slices per query row: enough blocks to fill the GPU `fill` times over, slices of >= `min_keys` keys
// rounded up to `align` (the kernel's key tile). The range is the block
// table's width, not the live lengths, so a captured CUDA graph stays valid as sequences grow.
void choose_splits(AttnArgs& a, int64_t max_ctx, int64_t blocks_without_split, int fill, int min_keys,
                   int align) {
  int splits = std::min(g_forced_splits.load(), kMaxSplits);
  if (splits <= 0) {
    splits = ceil_div(static_cast<int64_t>(fill) * sm_count(), blocks_without_split);
    splits = std::min({splits, ceil_div(max_ctx, min_keys), kMaxSplits});
    splits = std::max(splits, 1);
  }
  const int64_t per = std::max<int64_t>(1, ceil_div(max_ctx, splits));
  a.split_len = static_cast<int>(align_up(static_cast<size_t>(per), static_cast<size_t>(align)));
  a.n_splits = splits;
}

}  // namespace

void combine_split_partials(void* stream, const PagedArgs& pa, const FlashSplit& sp, int head_dim) {
  AttnArgs a;
  static_cast<PagedArgs&>(a) = pa;
  a.n_heads = sp.n_heads;
  a.head_dim = head_dim;
  a.n_splits = sp.n_splits;
  a.partials = sp.partials;
  combine_kernel<<<static_cast<unsigned>(static_cast<int64_t>(a.n_tokens) * a.n_heads), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("paged_attention", [&] { return strfmt("(split-KV combine, %d slices)", a.n_splits); });
}

void set_attention_flash_decode_for_testing(bool on) {
  g_flash_decode.store(on ? 1 : 0);
}

void set_attention_splits_for_testing(int n_splits) {
  g_forced_splits.store(n_splits);
}

void paged_attention(void* stream, const DevAttention& at) {
  const char* op = "paged_attention";
  const DevHeads& q = at.q;
  if (q.n_tokens == 0 || q.n_heads == 0) return;
  auto detail = [&] {
    return heads_desc("q", q) + strfmt(", cache [%lld, %lld, %lld, %lld] %s bits %d%s", (long long)at.cache.n_blocks,
                                       (long long)at.cache.block_size, (long long)at.cache.n_kv_heads,
                                       (long long)at.cache.head_dim, dtype_name(at.cache.dtype), at.cache.bits,
                                       at.cache.fp8 ? " fp8" : "");
  };
  if (q.head_dim < 1 || q.head_dim > kMaxHeadDim)
    throw Error("cuda", std::string(op) + ": unsupported " + detail());
  AttnArgs a;
  static_cast<PagedArgs&>(a) = paged_args(at);
  a.q_dtype = q.dtype;
  a.n_heads = static_cast<int>(q.n_heads);
  a.head_dim = static_cast<int>(q.head_dim);
  const int n_kv_heads = static_cast<int>(at.cache.n_kv_heads);
  // Decode rows: flash-decoding (split-KV, attention_decode.cu). With BUNSEN_FLASH_DECODE=1 (or the testing
  // switch), large decode batches (rows x kv heads fill the GPU) take the tensor-core kernel with one
  // sequence per block instead; it is not the default until it has been measured on the GPU.
  const bool flash_decode = flash_decode_enabled() && flash_prefill_ok(at) &&
                            q.n_tokens * at.cache.n_kv_heads >= 2 * static_cast<int64_t>(sm_count());
  if (!flash_decode && decode_attention_ok(at)) {
    decode_attention(stream, at, g_forced_splits.load());
    return;
  }
  if (flash_prefill_ok(at)) {  // tensor cores (attention_prefill.cu); no split-KV needed
    flash_prefill(stream, at);
    check_launch(op, detail);
    return;
  }
  const int rows_per_tile = kWarps * (a.head_dim <= 256 ? 8 : 4);
  a.heads_per_tile = std::min(a.group, rows_per_tile);
  a.head_chunks = ceil_div(a.group, a.heads_per_tile);
  a.tokens_per_tile = rows_per_tile / a.heads_per_tile;
  const int row_tiles = ceil_div(a.n_tokens, a.tokens_per_tile) * a.head_chunks;
  const int64_t blocks_without_split = static_cast<int64_t>(row_tiles) * n_kv_heads;
  choose_splits(a, at.meta.max_blocks * at.cache.block_size, blocks_without_split, 2, kMinSplitKeys,
                kTileKeys);
  cudaStream_t s = as_stream(stream);
  if (a.n_splits > 1) {
    const size_t bytes =
        static_cast<size_t>(a.n_tokens) * a.n_heads * a.n_splits * (a.head_dim + 2) * sizeof(float);
    a.partials = static_cast<float*>(scratch(stream, bytes, op));
  }
  if (at.cache.bits != 0) {
    if (a.kv_group <= 0 || a.head_dim % a.kv_group != 0 || at.cache.k_params == nullptr)
      throw Error("cuda", std::string(op) + strfmt(": quantized cache needs params and a group (%d) dividing ", a.kv_group) +
                              detail());
    with_quant_fmt(at.cache, [&](auto fmt) {
      launch_for_head_dim<uint8_t, decltype(fmt)::value>(s, a, row_tiles, n_kv_heads);
    });
  } else {
    with_act_type(at.cache.dtype, [&](auto ct) {
      launch_for_head_dim<typename decltype(ct)::type, kKvPlain>(s, a, row_tiles, n_kv_heads);
    });
  }
  check_launch(op, detail);
  if (a.n_splits > 1) {
    combine_kernel<<<static_cast<unsigned>(q.n_tokens * q.n_heads), kThreads, 0, s>>>(a);
    check_launch(op, detail);
  }
}

}  // namespace bunsen::kernels::cuda
