// Host-callable CUDA entry points of the linear-attention ops (ops.h causal_conv1d, gated_delta_rule,
// rms_norm_gated, sigmoid_mul, deltanet_decode_fused) on device views. Not a validator and not
// CUDA-aware: plain C++17 like cuda_ops.h (dispatch_linear_attn.cpp checks shapes and dtypes first).
// Invariants: every launch goes to the given stream; metadata (seq_starts, slots, positions) lives on the
// device and is never read on the host (graph-capturable); states are f32; activations f32 or bf16 with
// f32 math.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

// Largest head dims the delta-rule kernel takes: its state [dk, dv] f32 lives in shared memory (64 KiB at
// 128 x 128, Qwen3.5's size), one thread per v column.
constexpr int kMaxDeltaHeadDim = 128;

struct DevStateMeta {
  const int32_t* seq_starts = nullptr;   // [n_seqs + 1]
  const int32_t* state_slots = nullptr;  // [n_seqs]
  const int32_t* positions = nullptr;    // [n_tokens]
  int64_t n_seqs = 0;
};

struct DevConv1d {
  DevRows out, x;         // [n_tokens, channels]
  DevRows w;              // [channels, kernel]
  float* state = nullptr;  // [n_slots, channels, kernel - 1] contiguous
  DevStateMeta meta;
};
void causal_conv1d(void* stream, const DevConv1d& a);

struct DevDeltaRule {
  DevHeads out;           // [n_tokens, n_v, dv] (contiguous rows)
  DevHeads q, k, v;       // [n_tokens, n_k, dk] / [n_tokens, n_v, dv]
  DevRows a, b;           // [n_tokens, n_v]
  const void* a_log = nullptr;
  DType a_log_dtype = DType::kF32;
  const void* dt_bias = nullptr;
  DType dt_bias_dtype = DType::kF32;
  float* state = nullptr;  // [n_slots, n_v, dk, dv] contiguous
  DevStateMeta meta;
  float q_scale = 1.0f;
  int32_t chunk_min = 64;  // a sequence's run of >= chunk_min tokens takes the chunked kernel
};
// Two launches on the stream: the recurrent kernel (runs shorter than chunk_min) and, when the step has
// >= chunk_min tokens, the chunked one (one block per (sequence, v-head, 32-column tile of S); each block
// skips the runs that are not its kind), so which kernel serves a sequence is decided on the device.
void gated_delta_rule(void* stream, const DevDeltaRule& a);
// The chunked kernel alone (delta_rule_chunked.cu); gated_delta_rule calls it.
void gated_delta_rule_chunked(void* stream, const DevDeltaRule& a);

void rms_norm_gated(void* stream, DevRows out, DevRows x, DevRows z, const void* w, DType w_dtype, float eps);

// One Gated-DeltaNet layer's conv1d + SiLU, recurrent gated delta rule and gated RMSNorm in one launch
// (linear_attn_fused.cu), for steps whose every run is recurrent (the caller guarantees every sequence's
// run is shorter than the chunked form's minimum). One thread-block cluster per (sequence, k-head).
struct DevDeltaNetFused {
  DevRows out;             // [n_tokens, n_v * dv]: the normed, gated core output
  DevRows qkv;             // [n_tokens, 2 n_k dk + n_v dv]: the conv input, channels q | k | v
  DevRows z;               // [n_tokens, n_v * dv]: the norm's gate
  DevRows a, b;            // [n_tokens, n_v]: decay and beta pre-activations
  DevRows conv_w;          // [channels, kernel]
  float* conv_state = nullptr;  // [n_slots, channels, kernel - 1] contiguous
  float* state = nullptr;       // [n_slots, n_v, dk, dv] contiguous
  const void* a_log = nullptr;
  DType a_log_dtype = DType::kF32;
  const void* dt_bias = nullptr;
  DType dt_bias_dtype = DType::kF32;
  const void* norm_w = nullptr;  // [dv]
  DType norm_w_dtype = DType::kF32;
  DevStateMeta meta;
  int n_k = 0, n_v = 0, dk = 0, dv = 0;
  float q_scale = 1.0f, eps = 1e-6f;
};
// Whether the fused kernel takes these dims: n_v a multiple of n_k, (n_v / n_k) * ceil(dv / 32) <= 8
// blocks per cluster (the portable size), dk, dv <= kMaxDeltaHeadDim, 2 <= kernel <= 8.
bool deltanet_fused_fits(int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, int64_t kernel);
void deltanet_decode_fused(void* stream, const DevDeltaNetFused& a);

void sigmoid_mul(void* stream, DevRows out, DevRows x, DevRows gate);

}  // namespace bunsen::kernels::cuda
