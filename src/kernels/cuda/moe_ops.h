// Host-callable CUDA entry points of the MoE ops (ops.h moe_route / moe_experts) on device views.
// Not a validator and not CUDA-aware: plain C++17 like cuda_ops.h (dispatch_moe.cpp checks shapes, dtypes
// and table lengths first). Invariants: every launch goes to the given stream; ids, weights and the expert
// address tables live on the device and are never read on the host (no sync, graph-capturable); an id
// outside [0, n_experts) contributes nothing; intermediates live in the stream's scratch arena.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

struct DevMoeRoute {
  DevRows logits;               // [n_tokens, n_experts] f32|bf16
  int32_t* ids = nullptr;       // [n_tokens, top_k] i32, contiguous
  float* weights = nullptr;     // [n_tokens, top_k] f32, contiguous
  int top_k = 1;
  bool sigmoid = false;         // scoring: softmax (false) or sigmoid
  bool norm_topk = false;
  float scale = 1.0f;
  const void* expert_scale = nullptr;  // [n_experts] or null
  DType expert_scale_dtype = DType::kF32;
};
void moe_route(void* stream, const DevMoeRoute& a);

// One projection of every expert (ops.h ExpertWeights): device tables of addresses.
struct DevExpertWeights {
  const int64_t* ptrs = nullptr;        // [n_experts]: float [rows, cols] or packed u32 [rows, cols*bits/32]
  const int64_t* scale_ptrs = nullptr;  // [n_experts] (quantized)
  const int64_t* bias_ptrs = nullptr;   // [n_experts] (quantized)
  DType dtype = DType::kBF16;           // weights (float) or scales/biases (quantized)
  int64_t rows = 0, cols = 0;
  int bits = 0, group_size = 0;
};

struct DevMoeExperts {
  DevRows out;                     // [n_tokens, d] f32|bf16
  DevRows x;                       // [n_tokens, d] f32|bf16
  const int32_t* ids = nullptr;    // [n_tokens, top_k] i32, contiguous
  const float* weights = nullptr;  // [n_tokens, top_k] f32, contiguous
  int top_k = 1;
  int64_t n_experts = 0;
  DevExpertWeights gate, up, down;
  bool gelu_tanh = false;          // activation: silu (false) or tanh-GELU
};
void moe_experts(void* stream, const DevMoeExperts& a);

// Test hook (process-wide): force the grouped-GEMV (decode) or the expert-sorted tile (prefill) path.
enum class MoePath : uint8_t { kAuto, kGemv, kTiles };
void set_moe_path_for_testing(MoePath path);
// Test hook (process-wide): the tile kernels decode 4/8-bit weights per element (weight_at) instead of a
// 32-code chunk per thread (the default). Both give the same bits.
void set_moe_tiles_per_element_for_testing(bool on);

}  // namespace bunsen::kernels::cuda
