// AVX2+FMA+F16C linear kernels (compiled with -mavx2 -mfma -mf16c; called only when the CPU has them).
// Same scheme as linear_avx512.cpp at 8 lanes: GEMV widens weight rows in registers and FMAs in f32;
// GEMM packs 16-column f32 panels (8x8 in-register transposes) and runs a 6x16 micro-kernel. Tails go
// through zero-padded stack copies. Only intrinsics and plain code here (see linear_avx512.cpp).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/scratch.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kNr = 16;   // GEMM micro-kernel columns (2 vectors)
constexpr int kMr = 6;        // GEMM micro-kernel rows of x
constexpr int64_t kKc = 256;  // GEMM k-block

template <DType W>
constexpr int64_t kWBytes = W == DType::kF32 ? 4 : 2;

template <DType W>
inline __m256 load_w(const char* p) {
  if constexpr (W == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (W == DType::kBF16) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// First n (< 8) weights at p, zero-padded to a full vector.
template <DType W>
inline __m256 load_w_tail(const char* p, int64_t n) {
  alignas(32) char buf[32] = {};
  std::memcpy(buf, p, static_cast<size_t>(n * kWBytes<W>));
  return load_w<W>(buf);
}

inline __m256 load_x_tail(const float* p, int64_t n) {
  alignas(32) float buf[8] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
  return _mm256_load_ps(buf);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// acc[m][r] += x[m, k:k+8] * w[r, k:k+8]; Full = false: only the first `cnt` lanes (zero-padded).
template <DType W, int MX, int RB, bool Full>
inline void gemv_step(const LinearArgs& a, const char* w, int64_t row_bytes, int64_t k, int64_t cnt,
                      __m256 (&acc)[MX][RB]) {
  __m256 xv[MX];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m) {
    const float* xp = a.x + m * a.x_stride + k;
    xv[m] = Full ? _mm256_loadu_ps(xp) : load_x_tail(xp, cnt);
  }
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
    const char* p = w + r * row_bytes + k * kWBytes<W>;
    const __m256 wv = Full ? load_w<W>(p) : load_w_tail<W>(p, cnt);
#pragma GCC unroll 8
    for (int m = 0; m < MX; ++m) acc[m][r] = _mm256_fmadd_ps(xv[m], wv, acc[m][r]);
  }
}

// out[0:MX, n:n+RB] for RB consecutive weight rows starting at n.
template <DType W, int MX, int RB>
inline void gemv_block(const LinearArgs& a, int64_t n) {
  const int64_t row_bytes = a.w_stride * kWBytes<W>;
  const char* w = static_cast<const char*>(a.w) + n * row_bytes;
  __m256 acc[MX][RB];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_setzero_ps();
  // One 64-byte line per weight row per step, prefetching the same line RB rows further on (see
  // linear_avx512.cpp).
  constexpr int64_t kStep = 64 / kWBytes<W>;
  const int64_t k_step_end = a.k - a.k % kStep, k_main = a.k - a.k % kLanes;
  for (int64_t k = 0; k < k_step_end; k += kStep) {
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) _mm_prefetch(w + (r + RB) * row_bytes + k * kWBytes<W>, _MM_HINT_NTA);
#pragma GCC unroll 4
    for (int64_t kk = k; kk < k + kStep; kk += kLanes)
      gemv_step<W, MX, RB, true>(a, w, row_bytes, kk, kLanes, acc);
  }
  for (int64_t k = k_step_end; k < k_main; k += kLanes)
    gemv_step<W, MX, RB, true>(a, w, row_bytes, k, kLanes, acc);
  if (k_main < a.k) gemv_step<W, MX, RB, false>(a, w, row_bytes, k_main, a.k - k_main, acc);
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) a.out[m * a.out_stride + n + r] = hsum(acc[m][r]);
}

template <DType W, int MX>
void gemv_rows(const LinearArgs& a, int64_t n0, int64_t n1) {
  constexpr int kRb = MX == 1 ? 8 : MX == 2 ? 4 : 2;  // <= 8 accumulators of 16 registers
  int64_t n = n0;
  for (; n + kRb <= n1; n += kRb) gemv_block<W, MX, kRb>(a, n);
  for (; n < n1; ++n) gemv_block<W, MX, 1>(a, n);
}

// Weight rows are walked in sub-chunks that stay in L2 while each group of up to 4 x rows passes
// over them (see linear_avx512.cpp).
template <DType W>
void gemv_dtype(const LinearArgs& a, int64_t n0, int64_t n1) {
  constexpr int64_t kGemvGroup = 4, kSubBytes = 256 << 10;
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
        default:
          gemv_rows<W, 4>(g, s, e);
          break;
      }
    }
  }
}

// In-register transpose of an 8x8 f32 tile: r[i][j] -> r[j][i].
inline void transpose8(__m256 r[8]) {
  __m256 t[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    r[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20);
    t[4 + c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// dst[kc][16] f32 (32-byte aligned) = w[n0 + j, k0 + kk] for j < rows (<= 16), zeros for j >= rows.
template <DType W>
void pack_strip(const LinearArgs& a, int64_t n0, int64_t rows, int64_t k0, int64_t kc, float* dst) {
  const int64_t row_bytes = a.w_stride * kWBytes<W>;
  const char* base = static_cast<const char*>(a.w) + n0 * row_bytes + k0 * kWBytes<W>;
  for (int64_t kk = 0; kk < kc; kk += kLanes) {
    const int64_t cnt = kc - kk < kLanes ? kc - kk : kLanes;
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const int64_t j = half * 8 + i;
        const char* p = base + j * row_bytes + kk * kWBytes<W>;
        r[i] = j >= rows ? _mm256_setzero_ps() : cnt == kLanes ? load_w<W>(p) : load_w_tail<W>(p, cnt);
      }
      transpose8(r);
      for (int64_t c = 0; c < cnt; ++c) _mm256_store_ps(dst + (kk + c) * kNr + half * 8, r[c]);
    }
  }
}

// Stores the first `cols` (<= 8) lanes of v to o, adding o's previous values when accumulating.
inline void store_cols(float* o, __m256 v, int64_t cols, bool accumulate) {
  if (cols >= kLanes) {
    if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(o));
    _mm256_storeu_ps(o, v);
    return;
  }
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  for (int64_t j = 0; j < cols; ++j) o[j] = accumulate ? o[j] + buf[j] : buf[j];
}

template <int MR>
void micro_kernel(const float* x, int64_t xs, const float* panel, int64_t kc, float* out, int64_t os,
                  int64_t cols, bool accumulate) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(panel + k * kNr);
    const __m256 b1 = _mm256_load_ps(panel + k * kNr + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(x + i * xs + k);
      c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    store_cols(out + i * os, c0[i], cols, accumulate);
    if (cols > kLanes) store_cols(out + i * os + kLanes, c1[i], cols - kLanes, accumulate);
  }
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, bool);
constexpr MicroFn kMicro[kMr + 1] = {nullptr,         micro_kernel<1>, micro_kernel<2>, micro_kernel<3>,
                                     micro_kernel<4>, micro_kernel<5>, micro_kernel<6>};

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
      for (int64_t m = 0; m < a.m; m += kMr) {
        const int mr = a.m - m < kMr ? static_cast<int>(a.m - m) : kMr;
        kMicro[mr](a.x + m * a.x_stride + k0, a.x_stride, panel + s * kc * kNr, kc,
                   a.out + m * a.out_stride + c0, a.out_stride, cols, k0 > 0);
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

void gemv_avx2(const LinearArgs& a, int64_t n0, int64_t n1) {
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

void gemm_avx2(const LinearArgs& a, int64_t n0, int64_t n1) {
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
