// Plain-C++ helpers for MLX affine-quantized rows (see QuantWeight in ops.h), shared by ref/ and the
// baseline cpu/ files. Not for *_avx2.cpp / *_avx512.cpp files (inline functions compiled with wider ISA
// flags could be merged by the linker into code that runs on older CPUs; see float_io.h).
// Invariant: dequant_row computes each element as std::fma(scale, code, bias) in f32, the definition every
// quantized kernel must reproduce bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/float_io.h"
#include "kernels/ops.h"

namespace bunsen::kernels {

// Code i of a packed row (a little-endian bit stream of `bits`-bit codes).
inline uint32_t quant_code(const uint32_t* row, int64_t i, int bits) {
  const uint64_t bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  const uint64_t word = bit / 32, shift = bit % 32;
  uint64_t v = row[word] >> shift;
  if (shift + static_cast<uint64_t>(bits) > 32) v |= static_cast<uint64_t>(row[word + 1]) << (32 - shift);
  return static_cast<uint32_t>(v) & ((1u << bits) - 1u);
}

inline const uint32_t* quant_packed_row(const QuantWeight& w, int64_t r) {
  return w.packed.ptr<uint32_t>() + r * w.packed.strides[0];
}

// dst[0:k] = dequantized row r of w.
inline void dequant_row(const QuantWeight& w, int64_t r, float* dst) {
  const uint32_t* p = quant_packed_row(w, r);
  const char* s = static_cast<const char*>(w.scales.row_ptr(r));
  const char* b = static_cast<const char*>(w.biases.row_ptr(r));
  const int64_t k = w.cols();
  for (int64_t c = 0; c < k; ++c) {
    const int64_t g = c / w.group_size;
    dst[c] = std::fma(load_f(s, w.scales.dtype, g), static_cast<float>(quant_code(p, c, w.bits)),
                      load_f(b, w.biases.dtype, g));
  }
}

}  // namespace bunsen::kernels
