// Device-side activation formulas shared by the CUDA kernels (GeGLU's tanh GELU, the logit soft-cap), so
// every kernel that applies one (activation.cu, fused or expert kernels) computes the same f32 expression.
// Not a kernel. Invariant: the same formulas, in the same order, as kernels/ref (PyTorch's constants).
#pragma once
#include <cuda_runtime.h>

namespace bunsen::kernels::cuda {

// PyTorch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float beta = 0.7978845608028654f, kappa = 0.044715f;  // sqrt(2/pi) = M_SQRT2 * M_2_SQRTPI * 0.5
  return 0.5f * x * (1.0f + tanhf(beta * (x + kappa * (x * x * x))));
}

// cap * tanh(x / cap), cap > 0.
__device__ __forceinline__ float softcap_value(float x, float cap) {
  return cap * tanhf(x / cap);
}

}  // namespace bunsen::kernels::cuda
