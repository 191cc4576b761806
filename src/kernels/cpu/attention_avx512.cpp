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

// exp(x), Cephes-style: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial in r, then scale by
// 2^n. About 1-2 ulp; inputs below -87.3 (where f32 exp underflows) give ~1e-38; NaN stays NaN.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
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

void attn_dots_avx512(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16,
                      float* s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dots_block<4>(q, k + j, head_dim, bf16, s + j);
  for (; j < n; ++j) dots_block<1>(q, k + j, head_dim, bf16, s + j);
}

float attn_exp_sum_avx512(float* s, int64_t n, float max) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 mv = _mm512_set1_ps(max);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 mask = tail_mask(n - j);
    const __m512 e = _mm512_maskz_mov_ps(mask, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), mv)));
    _mm512_mask_storeu_ps(s + j, mask, e);
    sum = _mm512_add_ps(sum, e);
  }
  return hsum(sum);
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
