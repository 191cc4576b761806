// Internal interface of the tensor-core quantized GEMV (gemv_qmma.cu): 4- and 8-bit MLX affine weights
// times at most kGemvMaxM rows of x (bf16; f32 for plain launches over bf16/f16 scales), for linear_q
// (gemv_q.cu) and the fused quantized q/k/v and gate/up launches (linear_q_multi, linear_q_swiglu). Not
// public (quant_ops.h is); other bit widths, f32 x with f32 scales and unaligned rows stay on the CUDA-core
// kernels of gemv_q.cu.
// Invariants: out = x · dequant(w)ᵀ (+ bias) on the exact codes with f32 accumulation
// (sum_g scale_g * sum(q * x) + bias_g * sum(x)); the k split depends on (rows, k, bits, group) only, never
// on m, and a token's result does not depend on the other rows of x (batch invariant).
#pragma once
#include "kernels/cuda/l2_hint.cuh"
#include "kernels/cuda/qmma_plan.h"
#include "kernels/cuda/quant_common.cuh"

namespace bunsen::kernels::cuda {

constexpr int kQMmaMaxParts = 4;

// One matrix of a launch.
struct QMmaPart {
  QuantView w;                 // [n, k] quantized; all parts share bits, group size and scale dtype
  void* out = nullptr;         // [m, n] out_dtype, row stride out_stride (elements)
  const void* bias = nullptr;  // [n] bias_dtype, or null
  int64_t out_stride = 0;
};

// Matrices sharing x, computed by one launch over their concatenated rows. glu: exactly two parts (gate,
// up) of the same n; the launch writes act(gate · x + b_gate) * (up · x + b_up) into part[0].out, act =
// silu, or gelu_tanh (activation.cuh) when gelu_tanh is set (a uniform branch in the store).
struct QMmaArgs {
  QMmaPart part[kQMmaMaxParts];
  int n_parts = 0;
  bool glu = false;
  bool gelu_tanh = false;  // glu only
  const void* x = nullptr;  // [m, k] x_dtype (bf16 to fit), row stride x_stride (elements)
  int64_t x_stride = 0, m = 0, k = 0;
  int bits = 4, group_size = 64;
  DType x_dtype = DType::kBF16, out_dtype = DType::kF32, bias_dtype = DType::kF32;
  // The weight copies' L2 policy (l2_hint.cuh): set by gemv_qmma / gemv_qmma_norm from the bits and bytes.
  bool l2_evict_first = false;
};

// True when the launch fits the tensor-core kernels: bits 4 or 8, 16-byte aligned rows of bf16 x (or f32 x,
// plain launches, bf16/f16 scales),
// 1 <= m <= kGemvMaxM, every part non-empty with k columns, 16-byte aligned packed rows and part[0]'s
// scale dtype (glu: two parts of one n).
bool qmma_fits(const QMmaArgs& a);

// Runs the launch (a must fit). Throws Error("cuda", ...) on a failed launch.
void gemv_qmma(cudaStream_t stream, const QMmaArgs& a);

// gemv_qmma of a with its x computed by n's prologue (linear.cuh's GemvNorm, plain form; a.x is not read):
// the bits of add_rms_norm into x followed by gemv_qmma(a). Only where a takes the 4-bit tile kernel or the
// 8-bit f16 register kernel in one launch, group 64, 1 <= m <= kGemvNormMaxM and k <= kGemvNormMaxK, and
// where BUNSEN_QMMA_NORM / set_qmma_norm_for_testing turn it on (off by default); false, nothing launched,
// otherwise.
struct GemvNorm;
bool gemv_qmma_norm(cudaStream_t stream, const QMmaArgs& a, const GemvNorm& n);

// Test/bench hook (process-wide): the k split (1, 2, 4 or 8 warps per row tile; 0 = from the shapes).
void set_qmma_split(int split);

// gemv_q.cu: the path set by set_linear_q_path_for_testing, and linear_q on the GEMV kernels only (chunks
// of kGemvMaxM rows of x, whatever m; never takes scratch).
LinearQPath linear_q_path();
void linear_q_gemv(cudaStream_t stream, DevRows out, DevRows x, const DevQuant& w, const void* bias,
                   DType bias_dtype);

}  // namespace bunsen::kernels::cuda
