// AVX2+FMA inner loops of paged attention (see attention_kernels.h), 8 dims per vector; head_dim tails
// go through zero-padded stack copies. Only intrinsics and plain code here (no inline library helpers).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/attention_kernels.h"

namespace bunsen::kernels::cpu {
namespace {

// 8 (or the first `cnt` < 8, zero-padded) elements of a cache row starting at d, as f32.
inline __m256 load_row(const void* row, int64_t d, int64_t cnt, bool bf16) {
  if (bf16) {
    const uint16_t* p = static_cast<const uint16_t*>(row) + d;
    __m128i h;
    if (cnt >= 8) {
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
      alignas(16) uint16_t buf[8] = {};
      std::memcpy(buf, p, static_cast<size_t>(cnt) * 2);
      h = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  const float* p = static_cast<const float*>(row) + d;
  if (cnt >= 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8] = {};
  std::memcpy(buf, p, static_cast<size_t>(cnt) * sizeof(float));
  return _mm256_load_ps(buf);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x) as in attention_avx512.cpp (Cephes-style, ~1-2 ulp); inputs are clamped to >= -87.3 so 2^n
// stays a normal number.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

template <int NK>
inline void dots_block(const float* q, const void* const* k, int64_t head_dim, bool bf16, float* s) {
  __m256 acc[NK];
#pragma GCC unroll 4
  for (int j = 0; j < NK; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    const int64_t cnt = head_dim - d;
    const __m256 qv = load_row(q, d, cnt, false);
#pragma GCC unroll 4
    for (int j = 0; j < NK; ++j) acc[j] = _mm256_fmadd_ps(qv, load_row(k[j], d, cnt, bf16), acc[j]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NK; ++j) s[j] = hsum(acc[j]);
}

}  // namespace

void attn_dots_avx2(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16, float* s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dots_block<4>(q, k + j, head_dim, bf16, s + j);
  for (; j < n; ++j) dots_block<1>(q, k + j, head_dim, bf16, s + j);
}

float attn_exp_sum_avx2(float* s, int64_t n, float max) {
  __m256 sum = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(max);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = hsum(sum);
  if (j < n) {
    alignas(32) float buf[8];
    _mm256_store_ps(buf, exp_ps(_mm256_sub_ps(load_row(s, j, n - j, false), mv)));
    for (int64_t i = 0; i < n - j; ++i) {
      s[j + i] = buf[i];
      total += buf[i];
    }
  }
  return total;
}

void attn_accumulate_avx2(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                          int64_t head_dim, bool bf16) {
  for (int64_t d = 0; d < head_dim; d += 8) {
    const int64_t cnt = head_dim - d;
    __m256 a0 = _mm256_mul_ps(load_row(acc, d, cnt, false), _mm256_set1_ps(alpha));
    __m256 a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_row(v[j], d, cnt, bf16), a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 1]), load_row(v[j + 1], d, cnt, bf16), a1);
    }
    if (j < n) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_row(v[j], d, cnt, bf16), a0);
    a0 = _mm256_add_ps(a0, a1);
    if (cnt >= 8) {
      _mm256_storeu_ps(acc + d, a0);
    } else {
      alignas(32) float buf[8];
      _mm256_store_ps(buf, a0);
      std::memcpy(acc + d, buf, static_cast<size_t>(cnt) * sizeof(float));
    }
  }
}

}  // namespace bunsen::kernels::cpu
