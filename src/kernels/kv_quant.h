// Affine int8/int4 quantization of one paged-cache row (the --kv-quant schemes, see PagedKv in ops.h):
// per group of group_size elements, scale = (max - min) / (2^bits - 1), bias = min, code = round to
// nearest of (x - min) / scale clamped to [0, 2^bits - 1] (a constant group: scale 0, code 0), and
// x' = fmaf(scale, code, bias). Used by ref/ and the baseline cpu/ files (not by *_avx2/*_avx512 files).
// Not validating: callers pass rows whose shape passed dispatch.cpp's checks. Invariant: |x - x'| is at
// most half a step (scale / 2) plus f32 rounding; the same codes always dequantize to the same floats.
#pragma once
#include <cmath>
#include <cstdint>

namespace bunsen::kernels {

// Code d of a row of bits-bit codes (4: two per byte, low nibble first; 8: one per byte).
inline uint32_t kv_code(const uint8_t* codes, int bits, int64_t d) {
  if (bits == 8) return codes[d];
  return (codes[d >> 1] >> ((d & 1) * 4)) & 0xfu;
}

// codes [head_dim * bits / 8] u8, params [2 * head_dim / group] f32 (scale, bias per group) <- x [head_dim].
inline void kv_quantize_row(const float* x, int64_t head_dim, int bits, int group, uint8_t* codes,
                            float* params) {
  const float levels = static_cast<float>((1u << bits) - 1u);
  if (bits == 4)
    for (int64_t i = 0; i < head_dim / 2; ++i) codes[i] = 0;
  for (int64_t g0 = 0, gi = 0; g0 < head_dim; g0 += group, ++gi) {
    float mn = x[g0], mx = x[g0];
    for (int64_t d = g0 + 1; d < g0 + group; ++d) {
      mn = std::fmin(mn, x[d]);
      mx = std::fmax(mx, x[d]);
    }
    const float scale = (mx - mn) / levels;
    params[2 * gi] = scale;
    params[2 * gi + 1] = mn;
    for (int64_t d = g0; d < g0 + group; ++d) {
      float q = scale > 0.0f ? std::nearbyint((x[d] - mn) / scale) : 0.0f;
      q = q < 0.0f ? 0.0f : q > levels ? levels : q;
      const auto c = static_cast<uint32_t>(q);
      if (bits == 8) codes[d] = static_cast<uint8_t>(c);
      else codes[d >> 1] = static_cast<uint8_t>(codes[d >> 1] | (c << ((d & 1) * 4)));
    }
  }
}

// out [head_dim] f32 <- codes, params as written by kv_quantize_row.
inline void kv_dequantize_row(const uint8_t* codes, const float* params, int64_t head_dim, int bits, int group,
                              float* out) {
  for (int64_t d = 0; d < head_dim; ++d) {
    const int64_t gi = d / group;
    out[d] = std::fmaf(params[2 * gi], static_cast<float>(kv_code(codes, bits, d)), params[2 * gi + 1]);
  }
}

}  // namespace bunsen::kernels
