// AVX-512 inner loops of paged attention (see attention_kernels.h): q·k over 4 keys at a time and the
// p-weighted V sum with the accumulator held in registers per 16 dims. bf16 cache rows are widened by
// zero-extend + shift. Only intrinsics and plain code here (no inline library helpers).
#include <immintrin.h>

// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*()
// placeholders (GCC bug 105593); the warning says nothing about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/attention_kernels.h"

namespace bunsen::kernels::cpu {
namespace {

// Horizontal sum (not _mm512_reduce_add_ps, whose GCC 12 expansion warns about undefined registers).
inline float hsum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

inline __m512 load_row(const void* row, int64_t d, __mmask16 mask, bool bf16) {
  if (!bf16) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + d);
  __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + d);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int NK>
inline void dots_block(const float* q, const void* const* k, int64_t head_dim, bool bf16, float* s) {
  __m512 acc[NK];
#pragma GCC unroll 4
  for (int j = 0; j < NK; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 16) {
    const __mmask16 mask = tail_mask(head_dim - d);
    const __m512 qv = _mm512_maskz_loadu_ps(mask, q + d);
#pragma GCC unroll 4
    for (int j = 0; j < NK; ++j) acc[j] = _mm512_fmadd_ps(qv, load_row(k[j], d, mask, bf16), acc[j]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NK; ++j) s[j] = hsum(acc[j]);
}

}  // namespace

void attn_dots_avx512(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16, float* s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dots_block<4>(q, k + j, head_dim, bf16, s + j);
  for (; j < n; ++j) dots_block<1>(q, k + j, head_dim, bf16, s + j);
}

void attn_accumulate_avx512(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                            int64_t head_dim, bool bf16) {
  for (int64_t d = 0; d < head_dim; d += 16) {
    const __mmask16 mask = tail_mask(head_dim - d);
    __m512 a0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + d), _mm512_set1_ps(alpha));
    __m512 a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load_row(v[j], d, mask, bf16), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(p[j + 1]), load_row(v[j + 1], d, mask, bf16), a1);
    }
    if (j < n) a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load_row(v[j], d, mask, bf16), a0);
    _mm512_mask_storeu_ps(acc + d, mask, _mm512_add_ps(a0, a1));
  }
}

}  // namespace bunsen::kernels::cpu
