// AVX-512 quantized linear (MLX affine weights) for 4- and 8-bit codes, summed with gemv_avx512's
// accumulator layout (one 16-lane k-strided accumulator per output, the same horizontal tree).
// 4-bit: per group and row, the 16 possible dequantized values fmaf(scale, q, bias) are built once as a
// 16-lane table; each step of 16 codes is one broadcast 8-byte load, one vpsrlvq (lane 2j holds code j,
// lane 2j+1 code j + 8 in its low nibble) and one vpermps lookup into the table, then the FMA with x. x is
// permuted once per call into the same lane order and the accumulator is permuted back before the sum, so
// every lane still accumulates k = lane, lane + 16, ... in order. 8-bit: 16 codes are widened to f32,
// dequantized with one FMA (scale * code + bias) and FMA'd into the accumulator. Other widths run
// linear_q_avx2. Not validating; only intrinsics and plain code here. Invariant: every output is summed
// exactly as gemv_avx512 sums the dequantized row (k % 16 == 0 because groups are 32/64/128), so
// linear_q == cpu::linear(x, dequantize(w)) bit for bit at this level, and a row's result does not depend
// on m.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstring>

#include "kernels/cpu/linear_q_kernels.h"
#include "kernels/cpu/scratch.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kLanes = 16;
// Codes, scales and biases are prefetched (NTA) kPrefetchBlocks blocks of RB rows ahead, a group's bytes per
// group step: rows of a few hundred bytes defeat the hardware prefetcher, which has to re-learn every stream,
// and missed scales cost as much as missed codes. Measured on Zen 5: 1 block is too close, 2..4 are equal.
// (One thread streaming a 151936 x 896 matrix on Zen 5: 8-bit 16 -> 35 GB/s from the prefetches alone.)
constexpr int64_t kPrefetchBlocks = 2;
constexpr int kMaxRb = 8;  // rows per block for one x row (the most)

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

// 8-bit codes 16c .. 16c+15 of a row as f32.
inline __m512 codes16(const uint8_t* row, int64_t c) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 16))));
}

// out[0:MX, n:n+RB] for RB consecutive 8-bit weight rows starting at n.
template <int MX, int RB>
inline void block8(const LinearQArgs& a, int64_t n) {
  const QuantRows<RB> qr(a, n);
  const uint8_t* const* rows = qr.codes;
  const char* const* srow = qr.scales;
  const char* const* brow = qr.biases;
  const int64_t sb_bytes = qr.sb_bytes;
  __m512 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_setzero_ps();
  const int64_t groups = a.k / a.group, chunks = a.group / kLanes, row_bytes = a.packed_stride * 4;
  for (int64_t off = 0; off < RB * sb_bytes; off += 64) {  // see kPrefetchBlocks
    _mm_prefetch(srow[0] + kPrefetchBlocks * RB * sb_bytes + off, _MM_HINT_NTA);
    _mm_prefetch(brow[0] + kPrefetchBlocks * RB * sb_bytes + off, _MM_HINT_NTA);
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m512 sv[RB], bv[RB];
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      sv[r] = _mm512_set1_ps(load_sb(srow[r], a.sb_dtype, g));
      bv[r] = _mm512_set1_ps(load_sb(brow[r], a.sb_dtype, g));
      for (int64_t off = 0; off < a.group; off += 64)  // see kPrefetchBlocks
        _mm_prefetch(
            reinterpret_cast<const char*>(rows[r]) + kPrefetchBlocks * RB * row_bytes + g * a.group + off,
            _MM_HINT_NTA);
    }
    for (int64_t c = g * chunks; c < (g + 1) * chunks; ++c) {
      __m512 xv[MX];
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) xv[m] = _mm512_loadu_ps(a.x + m * a.x_stride + c * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) {
        const __m512 wv = _mm512_fmadd_ps(sv[r], codes16(rows[r], c), bv[r]);
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

// 4-bit: x in the lane order the code unpacking produces (lane 2j: element j, lane 2j + 1: element j + 8 of
// each 16), and the permutation back to k order applied to an accumulator before the horizontal sum.
inline __m512i x_to_code_lanes() {
  return _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
}
inline __m512i code_lanes_to_k() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
}

// Up to 16 consecutive scales (or biases) of a row from group g as f32 (lanes >= count are 0).
inline __m512 sb16(const void* p, DType t, int64_t g, int64_t count) {
  const __mmask16 mask =
      count >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
  if (t == DType::kF32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(p) + g);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + g);
  if (t == DType::kBF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

// out[0:MX, n:n+RB] for RB consecutive 4-bit weight rows starting at n; x (row stride a.k) is in code lane
// order.
template <int MX, int RB>
inline void block4(const LinearQArgs& a, const float* x, int64_t n) {
  const QuantRows<RB> qr(a, n);
  const uint8_t* const* rows = qr.codes;
  const char* const* srow = qr.scales;
  const char* const* brow = qr.biases;
  const int64_t sb_bytes = qr.sb_bytes;
  const int64_t row_bytes = a.packed_stride * 4;
  __m512 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_setzero_ps();
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i shifts = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
  const int64_t groups = a.k / a.group, chunks = a.group / kLanes, bytes_per_group = a.group / 2;
  for (int64_t off = 0; off < RB * sb_bytes; off += 64) {
    _mm_prefetch(srow[0] + kPrefetchBlocks * RB * sb_bytes + off, _MM_HINT_NTA);
    _mm_prefetch(brow[0] + kPrefetchBlocks * RB * sb_bytes + off, _MM_HINT_NTA);
  }
  alignas(64) float sb[RB][2][kLanes];  // this tile's scales and biases as f32
  for (int64_t g0 = 0; g0 < groups; g0 += kLanes) {
    const int64_t gn = groups - g0 < kLanes ? groups - g0 : kLanes;
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      _mm512_store_ps(sb[r][0], sb16(srow[r], a.sb_dtype, g0, gn));
      _mm512_store_ps(sb[r][1], sb16(brow[r], a.sb_dtype, g0, gn));
    }
    for (int64_t gi = 0; gi < gn; ++gi) {
      const int64_t g = g0 + gi;
      __m512 lut[RB];
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) {
        lut[r] = _mm512_fmadd_ps(_mm512_set1_ps(sb[r][0][gi]), iota, _mm512_set1_ps(sb[r][1][gi]));
        // see kPrefetchBlocks
        _mm_prefetch(
            reinterpret_cast<const char*>(rows[r]) + kPrefetchBlocks * RB * row_bytes + g * bytes_per_group,
            _MM_HINT_NTA);
      }
      for (int64_t c = g * chunks; c < (g + 1) * chunks; ++c) {
        __m512 xv[MX];
#pragma GCC unroll 8
        for (int m = 0; m < MX; ++m) xv[m] = _mm512_loadu_ps(x + m * a.k + c * kLanes);
#pragma GCC unroll 8
        for (int r = 0; r < RB; ++r) {
          int64_t q;
          std::memcpy(&q, rows[r] + c * 8, 8);
          const __m512 wv = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64(q), shifts), lut[r]);
#pragma GCC unroll 8
          for (int m = 0; m < MX; ++m) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
        }
      }
    }
  }
  const __m512i back = code_lanes_to_k();
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r)
      a.out[m * a.out_stride + n + r] = hsum(_mm512_permutexvar_ps(back, acc[m][r]));
}

template <int Bits, int MX>
void rows_of(const LinearQArgs& a, const float* x4, int64_t n0, int64_t n1) {
  constexpr int kRb = MX == 1 ? kMaxRb : MX <= 2 ? 4 : 2;  // accumulators + scales/biases within 32 registers
  int64_t n = n0;
  if constexpr (Bits == 4) {
    for (; n + kRb <= n1; n += kRb) block4<MX, kRb>(a, x4, n);
    for (; n < n1; ++n) block4<MX, 1>(a, x4, n);
  } else {
    for (; n + kRb <= n1; n += kRb) block8<MX, kRb>(a, n);
    for (; n < n1; ++n) block8<MX, 1>(a, n);
  }
}

// The rows that no block prefetches: the first kPrefetchBlocks blocks of the largest RB (measured:
// qwen2.5-0.5b 4-bit decode +4 %, its matrices are split into tasks of a few blocks).
void prefetch_first_rows(const LinearQArgs& a, int64_t n0, int64_t n1) {
  const int64_t rows = n1 - n0 < kPrefetchBlocks * kMaxRb ? n1 - n0 : kPrefetchBlocks * kMaxRb;
  const int64_t sb_bytes = a.sb_stride * static_cast<int64_t>(a.sb_dtype == DType::kF32 ? 4 : 2);
  const char* codes = reinterpret_cast<const char*>(a.packed + n0 * a.packed_stride);
  for (int64_t off = 0; off < rows * a.packed_stride * 4; off += 64) _mm_prefetch(codes + off, _MM_HINT_NTA);
  for (int64_t off = 0; off < rows * sb_bytes; off += 64) {
    _mm_prefetch(static_cast<const char*>(a.scales) + n0 * sb_bytes + off, _MM_HINT_NTA);
    _mm_prefetch(static_cast<const char*>(a.biases) + n0 * sb_bytes + off, _MM_HINT_NTA);
  }
}

template <int Bits>
void linear_bits(const LinearQArgs& a, int64_t n0, int64_t n1) {
  constexpr int64_t kGroupRows = 4;
  prefetch_first_rows(a, n0, n1);
  for (int64_t m = 0; m < a.m; m += kGroupRows) {
    LinearQArgs g = a;
    g.x += m * a.x_stride;
    g.out += m * a.out_stride;
    g.m = a.m - m < kGroupRows ? a.m - m : kGroupRows;
    float* x4 = nullptr;  // 4-bit: this group's x rows in code lane order, [g.m, k]
    if constexpr (Bits == 4) {
      x4 = thread_scratch(kScratchPanel, static_cast<size_t>(g.m * a.k));
      const __m512i perm = x_to_code_lanes();
      for (int64_t r = 0; r < g.m; ++r)
        for (int64_t c = 0; c < a.k; c += kLanes)
          _mm512_store_ps(x4 + r * a.k + c,
                          _mm512_permutexvar_ps(perm, _mm512_loadu_ps(g.x + r * g.x_stride + c)));
    }
    switch (g.m) {
      case 1:
        rows_of<Bits, 1>(g, x4, n0, n1);
        break;
      case 2:
        rows_of<Bits, 2>(g, x4, n0, n1);
        break;
      case 3:
        rows_of<Bits, 3>(g, x4, n0, n1);
        break;
      default:
        rows_of<Bits, 4>(g, x4, n0, n1);
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
