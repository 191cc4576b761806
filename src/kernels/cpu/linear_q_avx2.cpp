// AVX2+FMA+F16C quantized linear (MLX affine weights): for each block of RB weight rows and up to 4 x rows,
// 8 codes of a row are read as `bits` bytes of its bit stream, split into 8 lanes with variable shifts,
// dequantized with one FMA (scale * code + bias) and FMA'd into 8 k-strided accumulators, then summed with
// gemv_avx2's tree. Not validating; only intrinsics and plain code here (no inline helpers shared with
// baseline files). Invariant: the summation order of an output depends only on k (batch invariance).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/linear_q_kernels.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kLanes = 8;

inline float hsum(__m256 v) {  // the same tree as linear_avx2.cpp's
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
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

// The 8 codes starting at code 8*c of a row: they fill exactly `Bits` bytes at byte offset c * Bits.
// Lanes 0-3 come from the low 4*Bits bits, lanes 4-7 from the next 4*Bits (each fits in 32 bits).
template <int Bits>
inline __m256 codes8(const uint8_t* row, int64_t c) {
  if constexpr (Bits == 8) {  // one byte per code: a plain widening load
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c * 8))));
  } else if constexpr (Bits == 2 || Bits == 4) {  // all 8 codes in one 16- or 32-bit load
    uint32_t v = 0;
    std::memcpy(&v, row + c * Bits, Bits);
    const __m256i shifts =
        _mm256_setr_epi32(0, Bits, 2 * Bits, 3 * Bits, 4 * Bits, 5 * Bits, 6 * Bits, 7 * Bits);
    const __m256i q = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), shifts);
    return _mm256_cvtepi32_ps(_mm256_and_si256(q, _mm256_set1_epi32((1 << Bits) - 1)));
  }
  uint64_t v = 0;
  std::memcpy(&v, row + c * Bits, Bits);
  const __m128i lo = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(v)));
  const __m128i hi = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(v >> (4 * Bits))));
  const __m256i shifts = _mm256_setr_epi32(0, Bits, 2 * Bits, 3 * Bits, 0, Bits, 2 * Bits, 3 * Bits);
  __m256i q = _mm256_srlv_epi32(_mm256_set_m128i(hi, lo), shifts);
  q = _mm256_and_si256(q, _mm256_set1_epi32((1 << Bits) - 1));
  return _mm256_cvtepi32_ps(q);
}

// out[0:MX, n:n+RB] for RB consecutive weight rows starting at n.
template <int Bits, int MX, int RB>
inline void block(const LinearQArgs& a, int64_t n) {
  const QuantRows<RB> qr(a, n);
  const uint8_t* const* rows = qr.codes;
  const char* const* srow = qr.scales;
  const char* const* brow = qr.biases;
  __m256 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t groups = a.k / a.group, chunks = a.group / kLanes;
  for (int64_t g = 0; g < groups; ++g) {
    __m256 sv[RB], bv[RB];
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      sv[r] = _mm256_set1_ps(load_sb(srow[r], a.sb_dtype, g));
      bv[r] = _mm256_set1_ps(load_sb(brow[r], a.sb_dtype, g));
    }
    for (int64_t c = g * chunks; c < (g + 1) * chunks; ++c) {
      __m256 xv[MX];
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) xv[m] = _mm256_loadu_ps(a.x + m * a.x_stride + c * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) {
        const __m256 wv = _mm256_fmadd_ps(sv[r], codes8<Bits>(rows[r], c), bv[r]);
#pragma GCC unroll 8
        for (int m = 0; m < MX; ++m) acc[m][r] = _mm256_fmadd_ps(xv[m], wv, acc[m][r]);
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
  constexpr int kRb = MX == 1 ? 4 : 2;  // accumulators + scales/biases stay in 16 registers
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

void linear_q_avx2(const LinearQArgs& a, int64_t n0, int64_t n1) {
  switch (a.bits) {
    case 2:
      return linear_bits<2>(a, n0, n1);
    case 3:
      return linear_bits<3>(a, n0, n1);
    case 4:
      return linear_bits<4>(a, n0, n1);
    case 5:
      return linear_bits<5>(a, n0, n1);
    case 6:
      return linear_bits<6>(a, n0, n1);
    default:
      return linear_bits<8>(a, n0, n1);
  }
}

}  // namespace bunsen::kernels::cpu
