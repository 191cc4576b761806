// The flash-decoding entry points (attention_decode.cu), called by cuda::paged_attention (attention.cu) for
// steps whose rows are decode tokens and whose cache is bf16 or quantized. Not a public op: ops.h's paged_attention
// picks it. Invariant: the number of key slices is a function of host scalars only (rows, kv heads, block
// table width, SM count), so a step captured into a CUDA graph stays valid for any context length that
// fits the block table.
#pragma once

#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

// True when decode_attention() handles `at`: bf16 cache with 16-byte aligned rows (or a quantized cache with
// groups of a multiple of 8 and 8-byte aligned code rows, 4 for int4), head_dim a multiple of 8 in [8, 256]
// with 1..8 query heads per kv head (SIMT) or, for bf16 q and cache under variant 0, head_dim 64/128/256/512
// with 1..16 (tensor cores), and no more query rows than sequences (a decode step).
bool decode_attention_ok(const DevAttention& at);

// Split-KV decode attention; `forced_splits` > 0 fixes the slice count (tests), 0 chooses it.
void decode_attention(void* stream, const DevAttention& at, int forced_splits);

// 0 (default): the tensor-core slice kernel where it applies (head_dim 64/128/256/512, bf16 q and cache),
// else SIMT; 1: always the SIMT kernel (shapes it cannot take, e.g. head_dim 512, then leave flash-decoding
// for attention.cu's general kernel). For tests and the micro-benchmark (all must match the reference).
void set_attention_decode_variant_for_testing(int variant);

// How a row's key slices are merged: 0 (default): as BUNSEN_DECODE_FUSED_COMBINE says (unset or "0": as 2,
// else as 1); 1: fused (the last slice block of a (row, kv head) merges them, one launch); 2: a separate
// combine kernel. For tests and the micro-benchmark.
void set_attention_decode_combine_for_testing(int mode);

// Which flash-decoding path runs where the tensor-core kernel applies: 0 (default): as BUNSEN_DECODE_ATTN
// says ("split": the slice kernel + combine above; "cluster": the cluster path; unset: the cluster path for
// steps of <= 2 rows x kv heads over a block table of <= 2,048 keys, else split); 1: split; 2: cluster (a
// row's <= 16 slices form one thread-block cluster merged in distributed shared memory, one launch;
// BUNSEN_DECODE_CLUSTER_MAX caps the slice count it chooses, default 16). For tests and the micro-benchmark.
void set_attention_decode_path_for_testing(int mode);

// The lean instances (the split and cluster slice kernels and the combine kernel compiled without the
// features a launch does not use, see attention_decode_mma.cu's lean_kind): 0 (default): as
// BUNSEN_DECODE_LEAN says (unset: on); 1: off; 2: on. Both forms give the same bits. For tests and A/B runs.
void set_attention_decode_lean_for_testing(int mode);
bool attention_decode_lean();  // the switch above, resolved

// Whether lean combine launches take the staged form (attention_combine.cu: the partials copied into shared
// memory by 16-byte cp.async copies, merged by rolled loops; the same bits): 0 (default): as
// BUNSEN_DECODE_COMBINE_STAGED says (unset: off); 1: off; 2: on. For tests and A/B runs.
void set_attention_combine_staged_for_testing(int mode);

}  // namespace bunsen::kernels::cuda
