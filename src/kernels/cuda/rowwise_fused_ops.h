// Host-callable CUDA entry points of the fused row-wise norms (ops.h rms_norm_qkv, post_norm_residual) on
// device views; the kernels live in rowwise_fused.cu. Not a validator and not CUDA-aware: plain C++17 like
// cuda_ops.h (dispatch_rowwise.cpp checks dtypes, shapes and aliasing first). Invariants: one launch per
// call, on the given stream, no host sync (graph-capturable); all math in f32, storage in each tensor's
// dtype.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

// A [d] norm weight on the device (f32|f16|bf16); data == nullptr: no weight (ones).
struct DevNormWeight {
  const void* data = nullptr;
  DType dtype = DType::kF32;
};

// q, k, v: [rows, head_dim] with one activation dtype (n_rows == 0 or data == nullptr: absent), normalised
// in place; with v_from_k, v = rms_norm(raw k) * v_w is written by the warp that normalises that k row.
struct DevQkvNorm {
  DevRows q, k, v;
  DevNormWeight q_w, k_w, v_w;
  bool v_from_k = false;
  float eps = 1e-6f;
};
void rms_norm_qkv(void* stream, const DevQkvNorm& a);

// x = (x + rms_norm(y) * (w_post + w_offset)) * x_scale; out = rms_norm(x) * (w_next + w_offset) when
// out.data != nullptr. One block per row; rms_norm(y) * w_post is rounded to y's dtype before the add and x
// to its own dtype before the scale and before the second norm (the unfused ops' stored values).
constexpr int64_t kPostNormMaxCols = 8192;
struct DevPostNormResidual {
  DevRows x, y, out;  // [n, d]; out.data == nullptr: no next norm
  DevNormWeight w_post, w_next;
  float x_scale = 1.0f;
  float w_offset = 0.0f;
  float eps = 1e-6f;
};
void post_norm_residual(void* stream, const DevPostNormResidual& a);

}  // namespace bunsen::kernels::cuda
