// Quantization of one paged-cache row (the --kv-quant schemes, see PagedKv in ops.h). Affine int8/int4:
// per group of group_size elements, scale = (max - min) / (2^bits - 1), bias = min, code = round to
// nearest of (x - min) / scale clamped to [0, 2^bits - 1] (a constant group: scale 0, code 0), and
// x' = fmaf(scale, code, bias). FP8 (e4m3, bits 8): per group scale = amax / 448, bias = 0 (stored, so the
// params layout is the affine one), code = e4m3(x / scale) rounded to nearest-even and saturated to +-448
// (amax 0: scale 0, code 0), x' = fmaf(scale, e4m3 value, 0). The CUDA kernels (cuda/kv_quant.cuh) write
// the same codes. Used by ref/ and the baseline cpu/ files (not by *_avx2/*_avx512 files).
// Not validating: callers pass rows whose shape passed dispatch.cpp's checks. Invariant: int: |x - x'| is at
// most half a step (scale / 2) plus f32 rounding; fp8: relative error <= 2^-4 above amax * 2^-15; the
// same codes always dequantize to the same floats.
#pragma once
#include <cmath>
#include <cstdint>

namespace bunsen::kernels {

constexpr float kFp8E4m3Max = 448.0f;  // largest finite e4m3 value (S.1111.110)

// e4m3 code of x: round to nearest-even, |x| >= 448 (and +-inf) saturate to +-448, NaN -> 0x7f | sign.
// Code = (e + 6) * 8 + q for |x| = q * 2^(e - 3), q in [8, 16] (e = floor(log2|x|) >= -6), and q for the
// subnormals |x| = q * 2^-9; a carry q = 16 lands on the next exponent's first code by construction.
inline uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  if (a >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7e);
  int e = 0;
  (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1
  --e;
  if (a < 0.015625f) return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(a * 512.0f)));
  const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - e)));
  return static_cast<uint8_t>(sign | ((e + 6) * 8 + q));
}

// The value of an e4m3 code (0x7f / 0xff: NaN).
inline float e4m3_to_f32(uint8_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  float v;
  if (e == 0xf && m == 7) v = std::nanf("");
  else if (e == 0) v = std::ldexp(static_cast<float>(m), -9);
  else v = std::ldexp(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -v : v;
}

// All 256 e4m3 values (dequantization reads this table).
inline const float* e4m3_table() {
  static const auto table = [] {
    struct T { float v[256]; } t{};
    for (int c = 0; c < 256; ++c) t.v[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.v;
}

// Code d of a row of bits-bit codes (4: two per byte, low nibble first; 8: one per byte).
inline uint32_t kv_code(const uint8_t* codes, int bits, int64_t d) {
  if (bits == 8) return codes[d];
  return (codes[d >> 1] >> ((d & 1) * 4)) & 0xfu;
}

// FP8 (e4m3) codes [head_dim] u8 and params [2 * head_dim / group] f32 (scale, 0 per group) <- x [head_dim].
inline void kv_quantize_row_fp8(const float* x, int64_t head_dim, int group, uint8_t* codes, float* params) {
  for (int64_t g0 = 0, gi = 0; g0 < head_dim; g0 += group, ++gi) {
    float amax = 0.0f;
    for (int64_t d = g0; d < g0 + group; ++d) amax = std::fmax(amax, std::fabs(x[d]));
    const float scale = amax / kFp8E4m3Max;
    params[2 * gi] = scale;
    params[2 * gi + 1] = 0.0f;
    for (int64_t d = g0; d < g0 + group; ++d) codes[d] = scale > 0.0f ? f32_to_e4m3(x[d] / scale) : 0;
  }
}

// codes [head_dim * bits / 8] u8, params [2 * head_dim / group] f32 (scale, bias per group) <- x [head_dim].
// fp8: e4m3 codes (bits must be 8).
inline void kv_quantize_row(const float* x, int64_t head_dim, int bits, int group, uint8_t* codes,
                            float* params, bool fp8 = false) {
  if (fp8) return kv_quantize_row_fp8(x, head_dim, group, codes, params);
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
                              float* out, bool fp8 = false) {
  if (fp8) {
    const float* table = e4m3_table();
    for (int64_t d = 0; d < head_dim; ++d) out[d] = std::fmaf(params[2 * (d / group)], table[codes[d]], params[2 * (d / group) + 1]);
    return;
  }
  for (int64_t d = 0; d < head_dim; ++d) {
    const int64_t gi = d / group;
    out[d] = std::fmaf(params[2 * gi], static_cast<float>(kv_code(codes, bits, d)), params[2 * gi + 1]);
  }
}

}  // namespace bunsen::kernels
