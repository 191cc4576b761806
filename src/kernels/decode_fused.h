// One whole batch-1 decode step of a llama-like decoder's layers as a single CUDA launch
// (cuda/decode_mega.cu: a persistent kernel that streams every layer's weights through a shared-memory ring
// while its blocks meet at grid-wide barriers). The model calls it instead of its per-layer ops where it
// applies and falls back to them otherwise. Not a CPU op (the CPU always falls back) and not bit-identical to
// the per-op kernels (its dot products sum in another order; tests compare it with tolerances and by greedy
// agreement). Invariants: x is the f32 residual stream entering layer 0 and leaving the last layer (every
// residual add done, no final norm); nothing is allocated; q/k/v/attn/act are the step's bf16 scratch rows.
#pragma once
#include <span>

#include "kernels/ops.h"

namespace bunsen::kernels {

struct FusedDecodeLayer {
  Tensor q, k, v, o, gate, up, down;  // bf16 [out, in], rows contiguous, no biases; empty when quantized
  QuantWeight quant[7];  // or q, k, v, o, gate, up, down in MLX affine 4- or 8-bit (one width), group 64,
                         // bf16 scales and biases, in % 512 == 0
  Tensor in_norm, post_norm;          // [d] f32|bf16 (one dtype for all layers)
  PagedKv kv;                         // bf16, not quantized
  bool rope = true;                   // this layer rotates q and k
};

struct FusedDecodeStep {
  std::span<const FusedDecodeLayer> layers;
  Tensor x;                        // [1, d] f32, in place
  Tensor q, k, v, attn, act;       // [1, *] bf16 scratch
  Tensor scratch;                  // f32, >= fused_decode_scratch_floats(n_heads, head_dim) elements
  Tensor positions, slot_mapping;  // [1] i32 / [1] i64
  Tensor block_tables;             // [1, width] i32
  RopeParams rope;                 // the rotation of the layers with rope
  float eps = 1e-6f, residual = 1.0f, scale = 1.0f;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// f32 elements of FusedDecodeStep::scratch.
int64_t fused_decode_scratch_floats(int64_t n_heads, int64_t head_dim);
// BUNSEN_DECODE_FUSED=1 (read once) or the test hook: whether models try decode_layers_fused.
bool fused_decode_enabled();
void set_fused_decode_for_testing(int mode);  // -1 the environment, 0 off, 1 on
// Launches decode_layers_fused has enqueued in this process (tests: the fused path ran, or declined).
int64_t fused_decode_launches();
// Runs the layers of a one-token step in one launch and returns true, or returns false (nothing done) where
// it does not apply: not CUDA, not sm_90, more than one token, or a tensor outside the invariants above.
bool decode_layers_fused(Context& ctx, const FusedDecodeStep& s);

}  // namespace bunsen::kernels
