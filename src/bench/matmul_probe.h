// Matmul-rate probe: the denominator of every prefill roofline figure bunsen reports, measured on the device
// the model runs on, through the same op its prefill runs (kernels::linear: cuBLASLt on CUDA, the blocked
// AVX kernels on the CPU), with bf16 weights. Not a GEMM tuner. Invariant: the operands hold pseudo-random
// values (zeros would flatter a card's power-limited clock), the first pass is a warm-up, and the best of
// `repeats` timed passes is reported.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace bunsen::bench {

struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
};

// The probe's shape per backend: CUDA 8192^3 (bf16 x and out, ~1.1 TFLOP per pass: long enough that the
// card reaches its sustained clock, large enough that the tile count fills any Hopper); CPU m = 64,
// n = 4096, k = 2048 (f32 x and out, bf16 w; ~1.1 GFLOP: the CPU linear blocks rows of x against streamed
// rows of w, and 64 rows of x stay in cache, so this is near the best rate it reaches).
MatmulShape matmul_probe_shape(Device device);

struct MatmulRateResult {
  double gflops = 0;  // 1e9 multiply-adds x 2 per second: 2 m n k / seconds of the best pass
  MatmulShape shape;
};

// out = x · wᵀ over `shape` (matmul_probe_shape when empty) on `device`, `repeats` timed passes after one
// warm-up. Throws Error("bench", ...) for repeats < 1 or a non-positive dimension.
MatmulRateResult measure_matmul_rate(Device device, ThreadPool& pool, MatmulShape shape = {},
                                     int repeats = 3);

}  // namespace bunsen::bench
