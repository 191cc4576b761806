// The launch arguments every paged-attention kernel shares (PagedArgs, filled once from a DevAttention) and
// the tensor-core prefill kernel's entry points (attention_prefill.cu), called by cuda::paged_attention
// (attention.cu) when a step's cache and queries are bf16 with head_dim 64 or 128. Not a public op: ops.h's
// paged_attention picks it. Invariant: the argument structs hold device pointers only.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

struct PagedArgs {
  const void* q = nullptr;  // [n_tokens, n_heads, head_dim] bf16
  void* out = nullptr;      // same shape, out_dtype
  DType out_dtype = DType::kF32;
  int64_t q_ts = 0, q_hs = 0, o_ts = 0, o_hs = 0;  // token / head strides, elements
  const void* k_cache = nullptr;                   // [n_blocks, block_size, n_kv_heads, head_dim] bf16
  const void* v_cache = nullptr;                   // (quantized: u8 codes, strides in bytes)
  int64_t k_s0 = 0, k_s1 = 0, k_s2 = 0, v_s0 = 0, v_s1 = 0, v_s2 = 0;
  const float* k_params = nullptr;  // quantized caches only: [n_blocks, block_size, n_kv_heads, 2 * groups]
  const float* v_params = nullptr;
  int64_t kp_s0 = 0, kp_s1 = 0, kp_s2 = 0, vp_s0 = 0, vp_s1 = 0, vp_s2 = 0;
  int kv_group = 0;  // quantized caches only: elements per (scale, bias) group
  int64_t n_blocks = 0, table_stride = 0;
  int block_size = 1, max_blocks = 0, n_seqs = 0;
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* seq_index = nullptr;     // [n_tokens]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int n_tokens = 0, group = 1, heads_per_tile = 1, tokens_per_tile = 1, head_chunks = 1;
  float scale = 1.0f, softcap = 0.0f;
  int window = 0;
};
using FlashArgs = PagedArgs;  // the tensor-core kernel needs nothing more

// Everything but the tiling (heads_per_tile, tokens_per_tile, head_chunks), which each kernel chooses.
inline PagedArgs paged_args(const DevAttention& at) {
  PagedArgs a;
  a.q = at.q.data;
  a.out = at.out.data;
  a.out_dtype = at.out.dtype;
  a.q_ts = at.q.token_stride;
  a.q_hs = at.q.head_stride;
  a.o_ts = at.out.token_stride;
  a.o_hs = at.out.head_stride;
  a.k_cache = at.cache.k;
  a.v_cache = at.cache.v;
  a.k_s0 = at.cache.k_strides[0];
  a.k_s1 = at.cache.k_strides[1];
  a.k_s2 = at.cache.k_strides[2];
  a.v_s0 = at.cache.v_strides[0];
  a.v_s1 = at.cache.v_strides[1];
  a.v_s2 = at.cache.v_strides[2];
  a.k_params = at.cache.k_params;
  a.v_params = at.cache.v_params;
  a.kp_s0 = at.cache.kp_strides[0];
  a.kp_s1 = at.cache.kp_strides[1];
  a.kp_s2 = at.cache.kp_strides[2];
  a.vp_s0 = at.cache.vp_strides[0];
  a.vp_s1 = at.cache.vp_strides[1];
  a.vp_s2 = at.cache.vp_strides[2];
  a.kv_group = at.cache.group_size;
  a.n_blocks = at.cache.n_blocks;
  a.block_size = static_cast<int>(at.cache.block_size);
  a.max_blocks = static_cast<int>(at.meta.max_blocks);
  a.n_seqs = static_cast<int>(at.meta.n_seqs);
  a.table_stride = at.meta.table_stride;
  a.positions = at.meta.positions;
  a.seq_index = at.meta.seq_index;
  a.block_tables = at.meta.block_tables;
  a.n_tokens = static_cast<int>(at.q.n_tokens);
  a.group = static_cast<int>(at.q.n_heads / at.cache.n_kv_heads);
  a.scale = at.scale;
  a.softcap = at.softcap;
  a.window = at.sliding_window;
  return a;
}

// True when flash_prefill() handles `at` (bf16 q and cache, head_dim 64 or 128, 16-byte aligned rows; or a
// quantized cache with groups of a multiple of 8 and 8-byte aligned code rows, 4 for int4). Steps
// of decode rows (n_tokens <= n_seqs) run one token per block; many of them beat flash-decoding's splits.
bool flash_prefill_ok(const DevAttention& at);
void flash_prefill(void* stream, const DevAttention& at);
// The mma.sync (FlashAttention-2-style) kernel of attention_prefill_mma.cu, with flash_prefill's args and
// tiling (64 rows per block); flash_prefill calls it unless the WMMA kernel is selected
// (BUNSEN_FLASH_PREFILL=wmma, or set_attention_prefill_kernel_for_testing(1)).
void flash_prefill_mma(void* stream, const DevAttention& at, const FlashArgs& a, int row_tiles);
// Its occupancy-tuned variant (results equal up to rounding; 3 blocks per SM, one barrier per key tile), for
// bf16 caches only: flash_prefill runs it with BUNSEN_FLASH_PREFILL=fa2b or
// set_attention_prefill_kernel_for_testing(3) when the cache is bf16 and at.scale > 0, else flash_prefill_mma.
// It splits the keys when a chunk has too few query rows to fill the GPU (a short turn appended to a long
// cached conversation: 68 tokens over 13.8k keys are 40 blocks on 132 SMs): gridDim.z slices of split_len
// keys (a multiple of the 64-key tile, over the block table's width), each block writing the partial
// (max, sum, unnormalised acc) of its rows, merged by combine_split_partials.
void flash_prefill_mma_b(void* stream, const DevAttention& at, const FlashArgs& a, int row_tiles);

// The split-KV launch of flash_prefill_mma_b.
struct FlashSplit {
  int n_splits = 1, split_len = 0, n_heads = 0;
  float* partials = nullptr;  // [n_tokens, n_heads, n_splits, head_dim + 2] f32: max (natural log), sum, acc
};
// Slices for a launch of `blocks` blocks over max_ctx keys (split_len a multiple of align): 1 when the blocks
// fill the GPU, the keys are few (< 4k) or the rows are decode rows; else enough slices of >= 1k keys for
// ~3 waves. set_prefill_splits_for_testing (or BUNSEN_PREFILL_SPLITS, read once) forces a count (1: never split).
FlashSplit choose_prefill_splits(int64_t blocks, int64_t max_ctx, int align, bool decode_rows);
// out[t, h] = the log-sum-exp merge of the split partials of (t, h) (attention.cu's combine kernel).
void combine_split_partials(void* stream, const PagedArgs& a, const FlashSplit& sp, int head_dim);

}  // namespace bunsen::kernels::cuda
