// Raw-pointer linear kernels, one set per ISA file (linear_avx512.cpp, linear_avx2.cpp, linear.cpp for
// the baseline). Not an API: only cpu/linear.cpp calls these, after validation and threading.
// Invariants: a call computes out[0:m, n0:n1] = x · w[n0:n1]ᵀ without bias, writing each output once;
// w rows are f32/f16/bf16 and are widened exactly to f32; accumulation is f32.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace bunsen::kernels::cpu {

struct LinearArgs {
  const float* x = nullptr;  // [m, k] f32, row stride x_stride
  int64_t x_stride = 0;
  const void* w = nullptr;  // [n, k] f32|f16|bf16, row stride w_stride
  DType w_dtype = DType::kF32;
  int64_t w_stride = 0;
  float* out = nullptr;  // [m, n] f32, row stride out_stride
  int64_t out_stride = 0;
  int64_t m = 0, n = 0, k = 0;
};

// The path cpu/linear.cpp dispatches for every m: streams weight rows, widening them in registers,
// against groups of up to 8 x rows; each output is summed in 16 (AVX2: 8) k-strided lanes then a fixed
// tree, an order that does not depend on m (batch invariance, see linear.cpp).
void gemv_avx512(const LinearArgs& a, int64_t n0, int64_t n1);
void gemv_avx2(const LinearArgs& a, int64_t n0, int64_t n1);

// Packs f32 weight panels (thread-local) and runs a register-blocked micro-kernel: ~1.5-2x the GEMV's
// throughput at m >= 64, but it sums k sequentially, so its results differ in the last bits from the
// GEMV's and cpu::linear does not dispatch it (a row's logits must not depend on the batch). Kept and
// tested for a future batch-invariant packed kernel. Columns per task: multiples of kGemmTaskCols.
constexpr int64_t kGemmTaskCols = 64;
void gemm_avx512(const LinearArgs& a, int64_t n0, int64_t n1);
void gemm_avx2(const LinearArgs& a, int64_t n0, int64_t n1);

// Baseline path (any m): converts one weight row at a time to f32 and dots it with every x row.
void linear_scalar(const LinearArgs& a, int64_t n0, int64_t n1);

}  // namespace bunsen::kernels::cpu
