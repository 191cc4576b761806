// AVX-512 linear kernels (compiled with -mavx512f/bw/vl/dq/bf16 -mfma -mf16c; called only when the CPU
// has them). GEMV: RB weight rows at a time against every x row, weights widened to f32 in registers
// (bf16: zero-extend + shift left 16, f16: vcvtph2ps), f32 FMAs, masked tails. GEMM: 32-column panels
// of weights widened and transposed once per k-block into thread-local scratch, then an 8x32
// broadcast micro-kernel. Not using x in bf16 (dpbf16): results must match the f32 reference.
// Only intrinsics and plain code here: no inline library helpers whose copies could leak into
// baseline code at link time.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*()
// placeholders (GCC bug 105593); the warning says nothing about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/scratch.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kNr = 32;   // GEMM micro-kernel columns (2 vectors)
constexpr int kMr = 8;        // GEMM micro-kernel rows of x
constexpr int64_t kKc = 256;  // GEMM k-block: one 32-column strip is 32 KiB of f32
// Non-temporal: weights are streamed once per call; measured ~5-10% faster than T0/T1 on Zen 5.
constexpr auto kGemvPrefetchHint = _MM_HINT_NTA;

template <DType W>
constexpr int64_t kWBytes = W == DType::kF32 ? 4 : 2;

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
  return n >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// Widens the `mask`-selected weights of 16 at p to f32 (unselected lanes are 0).
template <DType W>
inline __m512 load_w(const char* p, __mmask16 mask) {
  if constexpr (W == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else if constexpr (W == DType::kBF16) {
    __m256i h = _mm256_maskz_loadu_epi16(mask, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
}

template <DType W>
inline __m512 load_w(const char* p) {
  if constexpr (W == DType::kF32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (W == DType::kBF16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

// out[0:MX, n:n+RB] for RB consecutive weight rows starting at n.
template <DType W, int MX, int RB>
inline void gemv_block(const LinearArgs& a, int64_t n) {
  const int64_t row_bytes = a.w_stride * kWBytes<W>;
  const char* w = static_cast<const char*>(a.w) + n * row_bytes;
  __m512 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_setzero_ps();
  // One 64-byte line per weight row per step; the same line of the row RB further on is prefetched
  // so the next block's streams are already in flight when it starts (short rows defeat the
  // hardware prefetcher, which has to re-learn every stream).
  constexpr int64_t kStep = 64 / kWBytes<W>;
  const int64_t k_step_end = a.k - a.k % kStep;
  for (int64_t k = 0; k < k_step_end; k += kStep) {
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) _mm_prefetch(w + (r + RB) * row_bytes + k * kWBytes<W>, kGemvPrefetchHint);
#pragma GCC unroll 2
    for (int64_t kk = k; kk < k + kStep; kk += kLanes) {
      __m512 xv[MX];
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) xv[m] = _mm512_loadu_ps(a.x + m * a.x_stride + kk);
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) {
        __m512 wv = load_w<W>(w + r * row_bytes + kk * kWBytes<W>);
#pragma GCC unroll 8
        for (int m = 0; m < MX; ++m) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
      }
    }
  }
  const int64_t k_main = a.k - a.k % kLanes;
  for (int64_t k = k_step_end; k < k_main; k += kLanes) {
    __m512 xv[MX];
#pragma GCC unroll 8
    for (int m = 0; m < MX; ++m) xv[m] = _mm512_loadu_ps(a.x + m * a.x_stride + k);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      __m512 wv = load_w<W>(w + r * row_bytes + k * kWBytes<W>);
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
    }
  }
  if (k_main < a.k) {
    const __mmask16 mask = tail_mask(a.k - k_main);
    __m512 xv[MX];
#pragma GCC unroll 8
    for (int m = 0; m < MX; ++m) xv[m] = _mm512_maskz_loadu_ps(mask, a.x + m * a.x_stride + k_main);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      __m512 wv = load_w<W>(w + r * row_bytes + k_main * kWBytes<W>, mask);
#pragma GCC unroll 8
      for (int m = 0; m < MX; ++m) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) a.out[m * a.out_stride + n + r] = hsum(acc[m][r]);
}

template <DType W, int MX>
void gemv_rows(const LinearArgs& a, int64_t n0, int64_t n1) {
  constexpr int kRb = MX == 1 ? 8 : MX <= 4 ? 4 : 2;  // 8..16 accumulators, <= 25 registers live
  int64_t n = n0;
  for (; n + kRb <= n1; n += kRb) gemv_block<W, MX, kRb>(a, n);
  for (; n < n1; ++n) gemv_block<W, MX, 1>(a, n);
}

// Weight rows are walked in sub-chunks small enough to stay in L2 while each group of up to
// kGemvGroup x rows passes over them, so memory sees every weight once whatever m is.
template <DType W>
void gemv_dtype(const LinearArgs& a, int64_t n0, int64_t n1) {
  constexpr int64_t kGemvGroup = 8, kSubBytes = 256 << 10;
  const int64_t row_bytes = a.k * kWBytes<W>;
  const int64_t sub = a.m <= kGemvGroup ? n1 - n0 : row_bytes * 8 >= kSubBytes ? 8 : kSubBytes / row_bytes;
  for (int64_t s = n0; s < n1; s += sub) {
    const int64_t e = n1 - s < sub ? n1 : s + sub;
    for (int64_t m = 0; m < a.m; m += kGemvGroup) {
      LinearArgs g = a;
      g.x += m * a.x_stride;
      g.out += m * a.out_stride;
      g.m = a.m - m < kGemvGroup ? a.m - m : kGemvGroup;
      switch (g.m) {
        case 1:
          gemv_rows<W, 1>(g, s, e);
          break;
        case 2:
          gemv_rows<W, 2>(g, s, e);
          break;
        case 3:
          gemv_rows<W, 3>(g, s, e);
          break;
        case 4:
          gemv_rows<W, 4>(g, s, e);
          break;
        case 5:
          gemv_rows<W, 5>(g, s, e);
          break;
        case 6:
          gemv_rows<W, 6>(g, s, e);
          break;
        case 7:
          gemv_rows<W, 7>(g, s, e);
          break;
        default:
          gemv_rows<W, 8>(g, s, e);
          break;
      }
    }
  }
}

// In-register transpose of a 16x16 f32 tile: r[i][j] -> r[j][i].
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    __m512 v0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
    __m512 v1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xee);
    __m512 w0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    __m512 w1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xee);
    t[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// dst[kc][32] f32 (64-byte aligned) = w[n0 + j, k0 + kk] for j < rows (<= 32), zeros for j >= rows.
template <DType W>
void pack_strip(const LinearArgs& a, int64_t n0, int64_t rows, int64_t k0, int64_t kc, float* dst) {
  const int64_t row_bytes = a.w_stride * kWBytes<W>;
  const char* base = static_cast<const char*>(a.w) + n0 * row_bytes + k0 * kWBytes<W>;
  for (int64_t kk = 0; kk < kc; kk += kLanes) {
    const int64_t cnt = kc - kk < kLanes ? kc - kk : kLanes;
    const __mmask16 mask = tail_mask(cnt);
    for (int half = 0; half < 2; ++half) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const int64_t j = half * 16 + i;
        r[i] = j < rows ? load_w<W>(base + j * row_bytes + kk * kWBytes<W>, mask) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t c = 0; c < cnt; ++c) _mm512_store_ps(dst + (kk + c) * kNr + half * 16, r[c]);
    }
  }
}

// out[0:MR, 0:32] (+)= x[0:MR, 0:kc] · panel[0:kc, 0:32]; column masks m0/m1 cover the valid columns.
template <int MR>
void micro_kernel(const float* x, int64_t xs, const float* panel, int64_t kc, float* out, int64_t os,
                  __mmask16 m0, __mmask16 m1, bool accumulate) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(panel + k * kNr);
    const __m512 b1 = _mm512_load_ps(panel + k * kNr + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(x[i * xs + k]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* o = out + i * os;
    if (accumulate) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, o));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, o + 16));
    }
    _mm512_mask_storeu_ps(o, m0, c0[i]);
    _mm512_mask_storeu_ps(o + 16, m1, c1[i]);
  }
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, __mmask16, __mmask16,
                         bool);
constexpr MicroFn kMicro[kMr + 1] = {nullptr,         micro_kernel<1>, micro_kernel<2>,
                                     micro_kernel<3>, micro_kernel<4>, micro_kernel<5>,
                                     micro_kernel<6>, micro_kernel<7>, micro_kernel<8>};

// out[:, n0:n1] for n1 - n0 <= kGemmTaskCols.
template <DType W>
void gemm_task(const LinearArgs& a, int64_t n0, int64_t n1) {
  const int64_t strips = (n1 - n0 + kNr - 1) / kNr;
  float* panel = thread_scratch(kScratchPanel, static_cast<size_t>(strips * kNr * kKc));
  for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
    const int64_t kc = a.k - k0 < kKc ? a.k - k0 : kKc;
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t c0 = n0 + s * kNr;
      pack_strip<W>(a, c0, n1 - c0 < kNr ? n1 - c0 : kNr, k0, kc, panel + s * kc * kNr);
    }
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t c0 = n0 + s * kNr, cols = n1 - c0 < kNr ? n1 - c0 : kNr;
      const __mmask16 m0 = tail_mask(cols), m1 = tail_mask(cols > 16 ? cols - 16 : 0);
      for (int64_t m = 0; m < a.m; m += kMr) {
        const int mr = a.m - m < kMr ? static_cast<int>(a.m - m) : kMr;
        kMicro[mr](a.x + m * a.x_stride + k0, a.x_stride, panel + s * kc * kNr, kc,
                   a.out + m * a.out_stride + c0, a.out_stride, m0, m1, k0 > 0);
      }
    }
  }
}

template <DType W>
void gemm_dtype(const LinearArgs& a, int64_t n0, int64_t n1) {
  for (int64_t c = n0; c < n1; c += kGemmTaskCols)
    gemm_task<W>(a, c, n1 - c < kGemmTaskCols ? n1 : c + kGemmTaskCols);
}

}  // namespace

void gemv_avx512(const LinearArgs& a, int64_t n0, int64_t n1) {
  switch (a.w_dtype) {
    case DType::kBF16:
      gemv_dtype<DType::kBF16>(a, n0, n1);
      break;
    case DType::kF16:
      gemv_dtype<DType::kF16>(a, n0, n1);
      break;
    default:
      gemv_dtype<DType::kF32>(a, n0, n1);
      break;
  }
}

void gemm_avx512(const LinearArgs& a, int64_t n0, int64_t n1) {
  switch (a.w_dtype) {
    case DType::kBF16:
      gemm_dtype<DType::kBF16>(a, n0, n1);
      break;
    case DType::kF16:
      gemm_dtype<DType::kF16>(a, n0, n1);
      break;
    default:
      gemm_dtype<DType::kF32>(a, n0, n1);
      break;
  }
}

}  // namespace bunsen::kernels::cpu
