// Device helpers shared by the quantized CUDA kernels (gemv_q.cu, dequant_q.cu): loading the `bits` u32
// words of one 32-code chunk and decoding its codes to exact f32 integers.
// Not public (quant_ops.h is). Invariants: a chunk is 32 consecutive codes of a row, i.e. exactly `bits`
// words starting at word c * bits (32 codes * bits bits), so it never straddles rows; group_size is a
// multiple of 32, so a chunk lies inside one scale/bias group; every decoded value equals the code exactly.
#pragma once
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quant_ops.h"

namespace bunsen::kernels::cuda {

constexpr int kQuantChunk = 32;  // codes per chunk

// Row pointers and the group geometry of a DevQuant, as the kernels read them.
struct QuantView {
  const uint32_t* packed = nullptr;
  int64_t packed_stride = 0;  // words
  const void* scales = nullptr;
  const void* biases = nullptr;
  DType sb_dtype = DType::kBF16;
  int64_t sb_stride = 0;
  int64_t rows = 0, cols = 0;
  int group_shift = 0;  // log2(group_size / 32): chunk c lies in group c >> group_shift
};

inline QuantView quant_view(const DevQuant& w) {
  QuantView v;
  v.packed = w.packed;
  v.packed_stride = w.packed_stride;
  v.scales = w.scales;
  v.biases = w.biases;
  v.sb_dtype = w.sb_dtype;
  v.sb_stride = w.sb_stride;
  v.rows = w.rows;
  v.cols = w.cols;
  v.group_shift = w.group_size == 128 ? 2 : w.group_size == 64 ? 1 : 0;
  return v;
}

// Calls f(std::integral_constant-like Bits<b>{}) for the run-time bit width.
template <int kB>
struct Bits {
  static constexpr int value = kB;
};

template <typename F>
inline void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: return f(Bits<2>{});
    case 3: return f(Bits<3>{});
    case 4: return f(Bits<4>{});
    case 5: return f(Bits<5>{});
    case 6: return f(Bits<6>{});
    case 8: return f(Bits<8>{});
    default: throw Error("cuda", strfmt("quantized op: unsupported bits %d", bits));
  }
}

// ---- loads ----

// Weights are read once per kernel: non-allocating in L1, through the read-only path.
__device__ __forceinline__ uint4 ldg_stream4(const uint32_t* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ uint2 ldg_stream2(const uint32_t* p) {
  uint2 r;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

__device__ __forceinline__ uint32_t ldg_stream1(const uint32_t* p) {
  uint32_t r;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

// The kBits (a multiple of 4) words at p as kBits / 4 16-byte loads load16(p + 4 j).
template <int kBits, typename Load16>
__device__ __forceinline__ void load_chunk16(const uint32_t* p, uint32_t (&w)[kBits], Load16 load16) {
  static_assert(kBits % 4 == 0, "16-byte loads need whole uint4s");
#pragma unroll
  for (int j = 0; j < kBits / 4; ++j) {
    const uint4 v = load16(p + 4 * j);
    w[4 * j] = v.x;
    w[4 * j + 1] = v.y;
    w[4 * j + 2] = v.z;
    w[4 * j + 3] = v.w;
  }
}

// The kBits words of a chunk at p: 16-byte loads when kBits % 4 == 0 (p 16-byte aligned), 8-byte loads
// when kBits % 2 == 0 (p 8-byte aligned), else word loads.
template <int kBits>
__device__ __forceinline__ void load_chunk(const uint32_t* p, uint32_t (&w)[kBits]) {
  if constexpr (kBits % 4 == 0) {
    load_chunk16(p, w, [](const uint32_t* q) { return ldg_stream4(q); });
  } else if constexpr (kBits % 2 == 0) {
#pragma unroll
    for (int j = 0; j < kBits / 2; ++j) {
      const uint2 v = ldg_stream2(p + 2 * j);
      w[2 * j] = v.x;
      w[2 * j + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kBits; ++j) w[j] = ldg_stream1(p + j);
  }
}

// Byte alignment load_chunk needs for kBits (of the row base and of the row stride).
constexpr int chunk_alignment(int bits) {
  return bits % 4 == 0 ? 16 : bits % 2 == 0 ? 8 : 4;
}

// ---- decoding ----
// A code v < 2^23 OR'ed into the mantissa of 2^23 reads as the float 2^23 + v; subtracting 2^23 is exact.
// A 4-bit code at bits [4i, 4i + 4) of a word is read in place with the exponent of 2^(23 - 4i).

__device__ __forceinline__ float code_f32(uint32_t v) {
  return __uint_as_float(v | 0x4B000000u) - 8388608.0f;
}

// Codes 8 * js .. 8 * js + 7 of the chunk w (js a compile-time constant after unrolling).
template <int kBits>
__device__ __forceinline__ void decode8(const uint32_t (&w)[kBits], int js, float (&q)[8]) {
  if constexpr (kBits == 4) {
    const uint32_t lo = w[js], hi = w[js] >> 16;
    q[0] = __uint_as_float((lo & 0xFu) | 0x4B000000u) - 8388608.0f;
    q[1] = __uint_as_float((lo & 0xF0u) | 0x49000000u) - 524288.0f;
    q[2] = __uint_as_float((lo & 0xF00u) | 0x47000000u) - 32768.0f;
    q[3] = __uint_as_float((lo & 0xF000u) | 0x45000000u) - 2048.0f;
    q[4] = __uint_as_float((hi & 0xFu) | 0x4B000000u) - 8388608.0f;
    q[5] = __uint_as_float((hi & 0xF0u) | 0x49000000u) - 524288.0f;
    q[6] = __uint_as_float((hi & 0xF00u) | 0x47000000u) - 32768.0f;
    q[7] = __uint_as_float((hi & 0xF000u) | 0x45000000u) - 2048.0f;
  } else if constexpr (kBits == 8) {
    const uint32_t a = w[2 * js], b = w[2 * js + 1];
    q[0] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7650)) - 8388608.0f;
    q[1] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7651)) - 8388608.0f;
    q[2] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7652)) - 8388608.0f;
    q[3] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7653)) - 8388608.0f;
    q[4] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7650)) - 8388608.0f;
    q[5] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7651)) - 8388608.0f;
    q[6] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7652)) - 8388608.0f;
    q[7] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7653)) - 8388608.0f;
  } else {
    constexpr uint32_t kMask = (1u << kBits) - 1u;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int bit = (8 * js + e) * kBits, word = bit >> 5, off = bit & 31;
      const int next = word + 1 < kBits ? word + 1 : kBits - 1;  // read only when the code straddles
      const uint32_t v = off + kBits <= 32 ? (w[word] >> off) : __funnelshift_r(w[word], w[next], off);
      q[e] = code_f32(v & kMask);
    }
  }
}

// Code i (run-time, any bits) of a packed row: the plain reader of the simple kernels.
__device__ __forceinline__ uint32_t quant_code_at(const uint32_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int64_t word = bit >> 5;
  const int off = static_cast<int>(bit & 31);
  uint32_t v = row[word] >> off;
  if (off + bits > 32) v |= row[word + 1] << (32 - off);
  return v & ((1u << bits) - 1u);
}

// 8 consecutive activations at a 16-byte aligned address, as floats (quantized GEMV and MoE experts).
__device__ __forceinline__ void load_x8(const float* p, float (&f)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p + 4));
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

__device__ __forceinline__ void load_x8(const Bf16* p, float (&f)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

}  // namespace bunsen::kernels::cuda
