// Raw-pointer kernels of the quantized linear (MLX affine weights), one per ISA file (linear_q_avx2.cpp;
// the baseline lives in linear_q.cpp). Not an API: only cpu/linear_q.cpp calls these, after validation.
// Invariants: a call computes out[0:m, n0:n1] = x · dequant(w)[n0:n1]ᵀ without bias, each output written
// once; weights are dequantized as fmaf(scale, code, bias) in f32; each output is summed in the same order
// as the f32 GEMV of the same ISA (linear_kernels.h) over the dequantized row, so it is batch invariant
// and bit-equal to cpu::linear on dequantize(w).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace bunsen::kernels::cpu {

struct LinearQArgs {
  const float* x = nullptr;  // [m, k] f32, row stride x_stride
  int64_t x_stride = 0;
  const uint32_t* packed = nullptr;  // [n, k * bits / 32] u32, row stride packed_stride (words)
  int64_t packed_stride = 0;
  const void* scales = nullptr;  // [n, k / group] f32|f16|bf16, row stride sb_stride
  const void* biases = nullptr;  // [n, k / group] same dtype and row stride as scales
  DType sb_dtype = DType::kF32;
  int64_t sb_stride = 0;
  int bits = 4, group = 64;
  float* out = nullptr;  // [m, n] f32, row stride out_stride
  int64_t out_stride = 0;
  int64_t m = 0, n = 0, k = 0;  // k % group == 0
};

// The code, scale and bias rows of RB consecutive weight rows starting at n (the kernels' row blocks).
template <int RB>
struct QuantRows {
  const uint8_t* codes[RB];
  const char* scales[RB];
  const char* biases[RB];
  int64_t sb_bytes;  // bytes of one scale (or bias) row
  QuantRows(const LinearQArgs& a, int64_t n)
      : sb_bytes(a.sb_stride * static_cast<int64_t>(a.sb_dtype == DType::kF32 ? 4 : 2)) {
    for (int r = 0; r < RB; ++r) {
      codes[r] = reinterpret_cast<const uint8_t*>(a.packed + (n + r) * a.packed_stride);
      scales[r] = static_cast<const char*>(a.scales) + (n + r) * sb_bytes;
      biases[r] = static_cast<const char*>(a.biases) + (n + r) * sb_bytes;
    }
  }
};

// AVX2+FMA+F16C: 8 codes at a time are unpacked, dequantized and FMA'd into 8 k-strided f32 lanes per
// output (then gemv_avx2's horizontal sum), for groups of up to 4 x rows.
void linear_q_avx2(const LinearQArgs& a, int64_t n0, int64_t n1);
// AVX-512: 16 codes at a time for 4- and 8-bit weights (4-bit: looked up in a per-group table of the 16
// dequantized values), summed like gemv_avx512 (other widths: the AVX2 kernel).
void linear_q_avx512(const LinearQArgs& a, int64_t n0, int64_t n1);

}  // namespace bunsen::kernels::cpu
