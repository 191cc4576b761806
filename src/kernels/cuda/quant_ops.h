// Host-callable CUDA entry points of the quantized ops (MLX affine weights, QuantWeight in ops.h):
// linear_q (a bandwidth-bound GEMV for m <= kGemvMaxM, dequantize-to-bf16-chunks + cuBLASLt above),
// embedding_q and dequantize, on device tensors described by plain structs.
// Not a validator and not CUDA-aware: plain C++17 like cuda_ops.h (dispatch_quant.cpp checks bits, group
// size, shapes and dtypes first). Invariants: every launch goes to the given stream; nothing allocates
// except the per-stream scratch arena (GEMM path only), which grows only outside graph capture; ids live
// on the device and are not checked on the host (an out-of-range id gives a NaN row).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"

namespace bunsen::kernels::cuda {

// A quantized matrix [rows, cols] on the device: row r's codes are the little-endian bit stream at
// packed + r * packed_stride (u32 words); scales/biases [rows, cols / group_size] share dtype and stride.
struct DevQuant {
  const uint32_t* packed = nullptr;
  int64_t packed_stride = 0;  // u32 words between rows
  const void* scales = nullptr;
  const void* biases = nullptr;
  DType sb_dtype = DType::kBF16;  // f32 | f16 | bf16
  int64_t sb_stride = 0;          // elements between rows of scales (and of biases)
  int64_t rows = 0, cols = 0;
  int bits = 4;         // 2, 3, 4, 5, 6 or 8
  int group_size = 64;  // 32, 64 or 128 (divides cols)
};

// out = x · dequant(w)ᵀ (+ bias).   out [m, n] f32|bf16; x [m, k] f32|bf16; bias [n] f32|f16|bf16 or null.
// m <= kGemvMaxM: f32 math on the exact codes (sum_g scale_g * sum(q * x) + bias_g * sum(x)), matching the
// CPU to f32 rounding. Larger m: each chunk of weight rows is dequantized to bf16 in scratch and multiplied
// by cuBLASLt (x rounded to bf16 first when f32): bf16-GEMM accuracy.
void linear_q(void* stream, DevRows out, DevRows x, const DevQuant& w, const void* bias, DType bias_dtype);

// One matrix of linear_q_multi / linear_q_swiglu.
struct DevQuantPart {
  DevRows out;                 // [m, n] f32|bf16 (unused by linear_q_swiglu)
  DevQuant w;                  // [n, k]
  const void* bias = nullptr;  // [n] f32|f16|bf16, or null
  DType bias_dtype = DType::kF32;
};

// parts[i].out = x · dequant(parts[i].w)ᵀ (+ bias) for 1 <= n_parts <= 4: one tensor-core GEMV launch over
// all parts' rows when m <= kGemvMaxM and the launch fits it (4/8 bits, one group size and scale dtype, bf16
// x, aligned rows, one output and bias dtype); otherwise linear_q per part.
void linear_q_multi(void* stream, DevRows x, const DevQuantPart* parts, int n_parts);

// out = act(x · dequant(gate.w)ᵀ + b_gate) * (x · dequant(up.w)ᵀ + b_up), act = silu or (gelu_tanh)
// tanh-GELU, gate and up kept in f32: one launch per kGemvMaxM rows of x when the tensor-core GEMV fits;
// otherwise the GEMV per matrix into f32 scratch and silu_mul / gelu_tanh_mul. gate.w and up.w share
// shape, bits, group size and scale dtype.
void linear_q_swiglu(void* stream, DevRows out, DevRows x, const DevQuantPart& gate, const DevQuantPart& up,
                     bool gelu_tanh = false);

// linear_q_multi / linear_q_swiglu with x (bf16, not written) computed from pre (cuda_ops.h DevAddNorm, plain
// form) in the GEMV's prologue: the bits of add_rms_norm into x followed by the op. Only where the op takes
// one launch of the 4-bit tiled tensor-core GEMV (d % 512 == 0) or the 8-bit f16 one (d % 256 == 0), group
// 64, 1 <= m <= 2, d <= 4096) and BUNSEN_QMMA_NORM or the hook turns it on (off by default: slower on an
// H100, docs/PERFORMANCE.md); false, nothing launched, otherwise (the caller runs add_rms_norm first).
bool linear_q_multi_norm(void* stream, DevRows x, const DevQuantPart* parts, int n_parts,
                         const DevAddNorm& pre);
bool linear_q_swiglu_norm(void* stream, DevRows out, DevRows x, const DevQuantPart& gate,
                          const DevQuantPart& up, bool gelu_tanh, const DevAddNorm& pre);

// out[i, :] = dequant(table)[ids[i], :] * scale.   out [n, d] f32|bf16; ids [n] i32 on the device.
void embedding_q(void* stream, DevRows out, const DevQuant& table, const int32_t* ids, float scale);

// out = dequant(w), each element fmaf(scale, code, bias) in f32 (bit for bit the CPU's), stored in out's
// dtype.   out [rows, cols] f32|bf16.
void dequantize(void* stream, DevRows out, const DevQuant& w);

// ---- test hook (process-wide) ----
// kSimple: the plain one-warp-per-row kernel (any alignment); kGemv/kGemm force those paths at any m;
// kGemvSimt: the GEMV at any m, on the CUDA-core kernel even where the tensor-core one fits.
enum class LinearQPath : uint8_t { kAuto, kGemv, kGemm, kSimple, kGemvSimt };
void set_linear_q_path_for_testing(LinearQPath path);
// The tensor-core GEMV's k split (1, 2, 4 or 8 warps per row tile; 0 = from the shapes).
void set_linear_q_split_for_testing(int split);
// Whether linear_q_multi_norm / linear_q_swiglu_norm take the prologue: -1 = BUNSEN_QMMA_NORM (unset or 0:
// never; 1: wherever it applies), 0 = never, 1 = wherever it applies.
void set_qmma_norm_for_testing(int mode);
// The tiled 4-bit group-64 tensor-core GEMV (weights staged through shared memory in whole row runs):
// 1 on, 0 off, -1 = BUNSEN_QMMA_TILES (default on; "0" turns it off).
void set_linear_q_tiles_for_testing(int mode);

}  // namespace bunsen::kernels::cuda
