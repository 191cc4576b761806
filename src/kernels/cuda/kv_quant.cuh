// Device side of the quantized KV cache (--kv-quant; formats in kernels/kv_quant.h): the format tag the
// kernels are templated on, e4m3 conversions, dequantization of one element and the block-cooperative
// row quantizer used by kv_write / rope_kv_write. Not a public interface. Invariants: the codes and params
// equal kv_quantize_row's on the CPU bit for bit (the same f32 operations in the same order: fminf/fmaxf
// scans, IEEE division, rintf = nearbyint, hardware cvt.rn.satfinite for e4m3), and dequantization is the
// same fmaf(scale, value, bias), so a cache decodes to the same floats on both devices.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

// How a cache stores K/V (a template argument of the kernels that read or write it).
enum KvFmt : int { kKvPlain = 0, kKvI8 = 1, kKvI4 = 2, kKvF8 = 3 };

inline int kv_fmt_of(const DevCache& c) {
  return c.bits == 0 ? kKvPlain : c.fp8 ? kKvF8 : c.bits == 4 ? kKvI4 : kKvI8;
}

// f(std::integral_constant<int, F>) for the quantized format of `c` (bits 4 or 8).
template <typename Fn>
inline void with_quant_fmt(const DevCache& c, Fn&& f) {
  const int fmt = kv_fmt_of(c);
  if (fmt == kKvI8)
    f(std::integral_constant<int, kKvI8>{});
  else if (fmt == kKvI4)
    f(std::integral_constant<int, kKvI4>{});
  else if (fmt == kKvF8)
    f(std::integral_constant<int, kKvF8>{});
  else
    throw Error("cuda", strfmt("quantized KV cache: bits %d (fp8 %d) is not int8, int4 or fp8", c.bits, c.fp8 ? 1 : 0));
}

constexpr float kKvFp8Max = 448.0f;  // = kernels::kFp8E4m3Max

__device__ __forceinline__ float e4m3_to_f32_dev(uint8_t c) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
  return __half2float(__half(h));
}

// Two e4m3 codes (low byte first) as floats.
__device__ __forceinline__ float2 e4m3x2_to_f32_dev(uint32_t c2) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(c2 & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ uint8_t f32_to_e4m3_dev(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Element d of a row: codes (bytes of the row) and params (its 2 * groups floats).
template <int F>
__device__ __forceinline__ float kv_dequant(const uint8_t* codes, const float* params, int d, int group) {
  const int gi = d / group;
  const float s = params[2 * gi], b = params[2 * gi + 1];
  if constexpr (F == kKvI4) return fmaf(s, static_cast<float>((codes[d >> 1] >> ((d & 1) * 4)) & 0xfu), b);
  else if constexpr (F == kKvF8) return fmaf(s, e4m3_to_f32_dev(codes[d]), b);
  else return fmaf(s, static_cast<float>(codes[d]), b);
}

// Elements [d0, d0 + 8) of a row (d0 % 8 == 0, inside one group): codes at row (the row's bytes; int8/fp8
// read 8 bytes at row + d0, 8-byte aligned; int4 4 bytes at row + d0 / 2, 4-byte aligned), params the
// row's (scale, bias) pairs.
template <int F>
__device__ __forceinline__ void kv_dequant8(const uint8_t* row, const float* params, int d0, int group,
                                            float (&f)[8]) {
  const int gi = d0 / group;
  const float s = params[2 * gi], b = params[2 * gi + 1];
  if constexpr (F == kKvI4) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(row + d0 / 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = fmaf(s, static_cast<float>((w >> (4 * i)) & 0xfu), b);
  } else {
    const uint2 w2 = *reinterpret_cast<const uint2*>(row + d0);
    const uint32_t w[2] = {w2.x, w2.y};
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const uint32_t c2 = w[i / 4] >> (8 * (i % 4));
      if constexpr (F == kKvF8) {
        const float2 v = e4m3x2_to_f32_dev(c2);
        f[i] = fmaf(s, v.x, b);
        f[i + 1] = fmaf(s, v.y, b);
      } else {
        f[i] = fmaf(s, static_cast<float>(c2 & 0xffu), b);
        f[i + 1] = fmaf(s, static_cast<float>((c2 >> 8) & 0xffu), b);
      }
    }
  }
}

// Quantizes the row x [head_dim] (any thread count per block; every thread of the block must call it)
// into codes and params. Ends with a barrier, so it may be called again at once.
template <int F, typename T>
__device__ void kv_quantize_row_block(const T* x, int head_dim, int group, uint8_t* codes, float* params) {
  __shared__ float row[kMaxHeadDim];
  __shared__ float par[2 * kMaxHeadDim];
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) row[d] = to_f32(x[d]);
  __syncthreads();
  constexpr float kLevels = F == kKvI4 ? 15.0f : 255.0f;
  for (int gi = threadIdx.x; gi < head_dim / group; gi += blockDim.x) {
    const float* r = row + gi * group;
    float scale, bias;
    if constexpr (F == kKvF8) {
      float amax = 0.0f;
      for (int d = 0; d < group; ++d) amax = fmaxf(amax, fabsf(r[d]));
      scale = amax / kKvFp8Max;
      bias = 0.0f;
    } else {
      float mn = r[0], mx = r[0];
      for (int d = 1; d < group; ++d) {
        mn = fminf(mn, r[d]);
        mx = fmaxf(mx, r[d]);
      }
      scale = (mx - mn) / kLevels;
      bias = mn;
    }
    par[2 * gi] = scale;
    par[2 * gi + 1] = bias;
    params[2 * gi] = scale;
    params[2 * gi + 1] = bias;
  }
  __syncthreads();
  auto code = [&](int d) -> uint32_t {
    const float scale = par[2 * (d / group)];
    if constexpr (F == kKvF8) {
      return scale > 0.0f ? f32_to_e4m3_dev(row[d] / scale) : 0u;
    } else {
      float q = scale > 0.0f ? rintf((row[d] - par[2 * (d / group) + 1]) / scale) : 0.0f;
      q = q < 0.0f ? 0.0f : q > kLevels ? kLevels : q;
      return static_cast<uint32_t>(q);
    }
  };
  if constexpr (F == kKvI4) {
    for (int i = threadIdx.x; i < head_dim / 2; i += blockDim.x)
      codes[i] = static_cast<uint8_t>(code(2 * i) | code(2 * i + 1) << 4);
  } else {
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) codes[d] = static_cast<uint8_t>(code(d));
  }
  __syncthreads();  // row / par are read above; the next call overwrites them
}

}  // namespace bunsen::kernels::cuda
