// AVX-512 quantized linear (MLX affine weights) for 4- and 8-bit codes: 16 codes of a row are widened to 16
// f32 lanes (4-bit: the 8 bytes' low and high nibbles interleaved back into code order; 8-bit: a widening
// load), dequantized with one FMA (scale * code + bias) and FMA'd into one 16-lane k-strided accumulator
// per output, then summed with gemv_avx512's tree. Other widths run linear_q_avx2. Not validating; only
// intrinsics and plain code here. Invariant: every output is summed exactly as gemv_avx512 sums the
// dequantized row (one accumulator, lanes k-strided by 16, the same horizontal tree; k % 16 == 0 because
// groups are 32/64/128), so linear_q == cpu::linear(x, dequantize(w)) bit for bit at this level, and a
// row's result does not depend on m.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstring>

#include "kernels/cpu/linear_q_kernels.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kLanes = 16;

inline float hsum(__m512 v) {  // the same tree as linear_avx512.cpp's
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float load_sb(const void* p, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == DType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return _cvtsh_ss(h);
}

// Codes 16c .. 16c+15 of a row as f32. 4-bit: code 2i is the low nibble of byte i, code 2i+1 the high one.
template <int Bits>
inline __m512 codes16(const uint8_t* row, int64_t c) {
  if constexpr (Bits == 8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 16))));
  } else {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c * 8));
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, nib), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nib);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
  }
}

// out[0:MX, n:n+RB] for RB consecutive weight rows starting at n.
template <int Bits, int MX, int RB>
inline void block(const LinearQArgs& a, int64_t n) {
  const uint8_t* rows[RB];
  const char* srow[RB];
  const char* brow[RB];
  const int64_t sb_bytes = a.sb_stride * static_cast<int64_t>(a.sb_dtype == DType::kF32 ? 4 : 2);
  for (int r = 0; r < RB; ++r) {
    rows[r] = reinterpret_cast<const uint8_t*>(a.packed + (n + r) * a.packed_stride);
    srow[r] = static_cast<const char*>(a.scales) + (n + r) * sb_bytes;
    brow[r] = static_cast<const char*>(a.biases) + (n + r) * sb_bytes;
  }
  __m512 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_setzero_ps();
  const int64_t groups = a.k / a.group, chunks = a.group / kLanes;
  for (int64_t g = 0; g < groups; ++g) {
    __m512 sv[RB], bv[RB];
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      sv[r] = _mm512_set1_ps(load_sb(srow[r], a.sb_dtype, g));
      bv[r] = _mm512_set1_ps(load_sb(brow[r], a.sb_dtype, g));
      _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + (g + 4) * a.group * Bits / 8, _MM_HINT_T0);
    }
    for (int64_t c = g * chunks; c < (g + 1) * chunks; ++c) {
      __m512 xv[MX];
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) xv[m] = _mm512_loadu_ps(a.x + m * a.x_stride + c * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) {
        const __m512 wv = _mm512_fmadd_ps(sv[r], codes16<Bits>(rows[r], c), bv[r]);
#pragma GCC unroll 8
        for (int m = 0; m < MX; ++m) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) a.out[m * a.out_stride + n + r] = hsum(acc[m][r]);
}

template <int Bits, int MX>
void rows_of(const LinearQArgs& a, int64_t n0, int64_t n1) {
  constexpr int kRb = MX == 1 ? 8 : MX <= 2 ? 4 : 2;  // accumulators + scales/biases within 32 registers
  int64_t n = n0;
  for (; n + kRb <= n1; n += kRb) block<Bits, MX, kRb>(a, n);
  for (; n < n1; ++n) block<Bits, MX, 1>(a, n);
}

template <int Bits>
void linear_bits(const LinearQArgs& a, int64_t n0, int64_t n1) {
  constexpr int64_t kGroupRows = 4;
  for (int64_t m = 0; m < a.m; m += kGroupRows) {
    LinearQArgs g = a;
    g.x += m * a.x_stride;
    g.out += m * a.out_stride;
    g.m = a.m - m < kGroupRows ? a.m - m : kGroupRows;
    switch (g.m) {
      case 1:
        rows_of<Bits, 1>(g, n0, n1);
        break;
      case 2:
        rows_of<Bits, 2>(g, n0, n1);
        break;
      case 3:
        rows_of<Bits, 3>(g, n0, n1);
        break;
      default:
        rows_of<Bits, 4>(g, n0, n1);
        break;
    }
  }
}

}  // namespace

void linear_q_avx512(const LinearQArgs& a, int64_t n0, int64_t n1) {
  if (a.bits == 4) return linear_bits<4>(a, n0, n1);
  if (a.bits == 8) return linear_bits<8>(a, n0, n1);
  linear_q_avx2(a, n0, n1);
}

}  // namespace bunsen::kernels::cpu
