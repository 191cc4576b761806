// The tensor-core prefill attention kernel's entry points (attention_prefill.cu), called by
// cuda::paged_attention (attention.cu) when a step's cache and queries are bf16 with head_dim 64 or 128.
// Not a public op: ops.h's paged_attention picks it. Invariant: FlashArgs holds device pointers only.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

struct FlashArgs {
  const void* q = nullptr;  // [n_tokens, n_heads, head_dim] bf16
  void* out = nullptr;      // same shape, out_dtype
  DType out_dtype = DType::kF32;
  int64_t q_ts = 0, q_hs = 0, o_ts = 0, o_hs = 0;  // token / head strides, elements
  const void* k_cache = nullptr;                   // [n_blocks, block_size, n_kv_heads, head_dim] bf16
  const void* v_cache = nullptr;
  int64_t k_s0 = 0, k_s1 = 0, k_s2 = 0, v_s0 = 0, v_s1 = 0, v_s2 = 0;
  int64_t n_blocks = 0, table_stride = 0;
  int block_size = 1, max_blocks = 0, n_seqs = 0;
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* seq_index = nullptr;     // [n_tokens]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int n_tokens = 0, group = 1, heads_per_tile = 1, tokens_per_tile = 1, head_chunks = 1;
  float scale = 1.0f, softcap = 0.0f;
  int window = 0;
};

// True when flash_prefill() handles `at` (bf16 q and cache, head_dim 64 or 128, 16-byte aligned rows). Steps
// of decode rows (n_tokens <= n_seqs) run one token per block; many of them beat flash-decoding's splits.
bool flash_prefill_ok(const DevAttention& at);
void flash_prefill(void* stream, const DevAttention& at);

}  // namespace bunsen::kernels::cuda
