// Element-wise float loads/stores for any float dtype (f32/f16/bf16), used by ref/ and the baseline
// cpu/ files. Not for *_avx2.cpp / *_avx512.cpp files: inline functions compiled with wider ISA flags
// could be merged by the linker into code that runs on older CPUs. Invariant: conversions are exact
// (f16/bf16 -> f32) or round-to-nearest-even (f32 -> bf16/f16).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace bunsen::kernels {

// Element i of a row of dtype t (t must be a float dtype).
inline float load_f(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

inline void store_f(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      break;
    default:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      break;
  }
}

// dst[0:k] = row[0:k] widened to f32.
inline void widen_row(const void* row, DType t, int64_t k, float* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, row, static_cast<size_t>(k) * sizeof(float));
  } else if (t == DType::kBF16) {
    const uint16_t* h = static_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(h[i]);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < k; ++i) dst[i] = f16_to_f32(h[i]);
  }
}

}  // namespace bunsen::kernels
