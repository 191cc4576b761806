// The persistent decode step's ring stages (decode_mega.cu): the dot products the consumer warps run on them
// through mma.m16n8k16 (x broadcast into every B column, so each output column holds the same dots; lanes
// with t == 0 return the tile's rows), per layout of decode_mega_layout.h (bf16, MLX affine 4- and 8-bit,
// each also segmented). Only decode_mega.cu includes it (sm_90a device code).
#pragma once
#include <cstdint>

#include "kernels/cuda/decode_mega_layout.h"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::mega {

// One bf16 stage (16 tile rows x len columns from column k0 of the input vector) through mma.m16n8k16: the
// rows as A (ldmatrix from the padded rows), x as every column of B, so each output column holds the same
// dots; lanes with t == 0 return rows g (c0) and g + 8 (c2).
__device__ __forceinline__ void stage_dot_bf16(const char* st, const Bf16* vec, int k0, int len, float& c0,
                                               float& c2) {
  const int lane = threadIdx.x & 31, t = lane & 3;
  // ldmatrix.x4: lane l addresses row l % 8 of matrix l / 8 (0: rows 0-7, k 0-7; 1: rows 8-15; 2, 3: k 8-15)
  const char* ap = st + ((lane >> 3) & 1) * 8 * kBfRow + (lane & 7) * kBfRow + (lane >> 4) * 16;
  const Bf16* xp = vec + k0 + 2 * t;
  // Two accumulators (even and odd 16-column steps; len % 32 == 16 leaves the odd one a step short): two
  // dependent MMA chains in flight instead of one.
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto step = [&](int k, float(&acc)[4]) {
    uint32_t r[4];
    ldsm_x4(r, ap + k * 2);
    const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xp + k);
    const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xp + k + 8);
    qmma::mma_bf16(acc, r[0], r[1], r[2], r[3], b0, b1);
  };
  int k = 0;
  for (; k + 32 <= len; k += 32) {
    step(k, c);
    step(k + 16, d);
  }
  if (k < len) step(k, c);
  c0 = c[0] + d[0];
  c2 = c[2] + d[2];
}

// One 64-code group's four MMAs into cq (A rows g and g + 8 from the lane's codes wa and wb, B from x's group
// chunks x0, x1): 4-bit codes enter as bf16 128 + q in the pair order of qmma::perm4 (x staged alike), 8-bit
// ones as f16 1024 + q, one PRMT per code pair (x as f16 scaled by the group's 2^s).
__device__ __forceinline__ void group_mma_q4(float (&cq)[4], uint2 wa, uint2 wb, uint4 x0, uint4 x1) {
  using qmma::pair4_biased;
  qmma::mma_bf16(cq, pair4_biased(wa.x), pair4_biased(wb.x), pair4_biased(wa.x >> 4), pair4_biased(wb.x >> 4),
                 x0.x, x0.y);
  qmma::mma_bf16(cq, pair4_biased(wa.x >> 8), pair4_biased(wb.x >> 8), pair4_biased(wa.x >> 12),
                 pair4_biased(wb.x >> 12), x0.z, x0.w);
  qmma::mma_bf16(cq, pair4_biased(wa.y), pair4_biased(wb.y), pair4_biased(wa.y >> 4), pair4_biased(wb.y >> 4),
                 x1.x, x1.y);
  qmma::mma_bf16(cq, pair4_biased(wa.y >> 8), pair4_biased(wb.y >> 8), pair4_biased(wa.y >> 12),
                 pair4_biased(wb.y >> 12), x1.z, x1.w);
}
__device__ __forceinline__ void group_mma_q8(float (&cq)[4], uint4 wa, uint4 wb, uint4 x0, uint4 x1) {
  using qmma::codes_1024;
  qmma::mma_f16(cq, codes_1024<0>(wa.x), codes_1024<0>(wb.x), codes_1024<2>(wa.x), codes_1024<2>(wb.x), x0.x,
                x0.y);
  qmma::mma_f16(cq, codes_1024<0>(wa.y), codes_1024<0>(wb.y), codes_1024<2>(wa.y), codes_1024<2>(wb.y), x0.z,
                x0.w);
  qmma::mma_f16(cq, codes_1024<0>(wa.z), codes_1024<0>(wb.z), codes_1024<2>(wa.z), codes_1024<2>(wb.z), x1.x,
                x1.y);
  qmma::mma_f16(cq, codes_1024<0>(wa.w), codes_1024<0>(wb.w), codes_1024<2>(wa.w), codes_1024<2>(wb.w), x1.z,
                x1.w);
}
// A bf16 scale or bias (raw bits) as f32.
__device__ __forceinline__ float bf16_bits(unsigned short v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// Folds group u's MMA sums (cq: rows g in [0], g + 8 in [2]) into the lane's two rows: acc += scale * cq +
// (bias - offset * scale) * sum(x), offset being what the biased codes added per x (4-bit 128, 8-bit f16
// 1024). sb: the tile's bf16 scales (16 rows of sb_row bytes), then its biases alike.
__device__ __forceinline__ void fold_group(const unsigned char* sb, int sb_row, int gq, int u,
                                           const float (&cq)[4], float gsum, float offset, float& acc0,
                                           float& acc2) {
  const auto* sc = reinterpret_cast<const unsigned short*>(sb);
  const auto* bi = reinterpret_cast<const unsigned short*>(sb + 16 * sb_row);
  const int r0 = gq * (sb_row / 2) + u, r1 = (gq + 8) * (sb_row / 2) + u;
  const float s0 = bf16_bits(sc[r0]), s1 = bf16_bits(sc[r1]);
  const float b0 = bf16_bits(bi[r0]), b1 = bf16_bits(bi[r1]);
  acc0 = fmaf(s0, cq[0], fmaf(fmaf(-offset, s0, b0), gsum, acc0));
  acc2 = fmaf(s1, cq[2], fmaf(fmaf(-offset, s1, b1), gsum, acc2));
}

// One quantized stage (16 tile rows x len codes from code k0) through mma.m16n8k16 as the per-op kernels
// compute it. 4-bit (the tile GEMV, gemv_qmma_tiles.cuh): codes enter as bf16 128 + q, x staged in the codes'
// pair order (perm4). 8-bit (the f16 GEMV, gemv_qmma_h8.cu): each pair of codes one PRMT into f16 (1024 + q0,
// 1024 + q1), x staged as f16 scaled by its group's 2^s in natural order (lane t's 16 codes of a group meet
// x[16 t .. 16 t + 15]), the group's sum scaled back by 2^-s (gback) before its scale. Then bias' = bias -
// offset scale times the group's sum of x. Every lane feeds token 0's x, so each MMA column holds the same
// dot; lanes with t == 0 return rows g (c0) and g + 8 (c2). Groups unrolled by four: a group's MMAs are one
// dependent chain, four groups four chains in flight.
template <int kBits>
__device__ __forceinline__ void stage_dot_q(const unsigned char* st, const uint4* xv, const float* gsum,
                                            const float* gback, int k0, int len, float& c0, float& c2) {
  constexpr int kRow = kBits == 4 ? kQ4Row : kQ8Row, kGroupBytes = 8 * kBits;
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const unsigned char* ca = st + gq * kRow + t * (kGroupBytes / 4);
  const unsigned char* cb = ca + 8 * kRow;
  const int ng = len / 64, g0 = k0 / 64;
  float acc0 = 0.0f, acc2 = 0.0f;
#pragma unroll 4
  for (int u = 0; u < ng; ++u) {
    const uint4* x = xv + (g0 + u) * 8 + 2 * t;
    const uint4 x0 = x[0], x1 = x[1];
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kBits == 4) {
      group_mma_q4(cq, *reinterpret_cast<const uint2*>(ca + u * kGroupBytes),
                   *reinterpret_cast<const uint2*>(cb + u * kGroupBytes), x0, x1);
    } else {
      group_mma_q8(cq, *reinterpret_cast<const uint4*>(ca + u * kGroupBytes),
                   *reinterpret_cast<const uint4*>(cb + u * kGroupBytes), x0, x1);
      const float back = gback[g0 + u];
      cq[0] *= back;  // exact: back to x's own scale first
      cq[2] *= back;
    }
    fold_group(st + 16 * kRow, q_sb_bytes(kBits), gq, u, cq, gsum[g0 + u], kBits == 4 ? 128.0f : 1024.0f, acc0,
               acc2);
  }
  c0 = acc0;
  c2 = acc2;
}

// Gathers a segmented stage's row dots: v is lane (g, tau(g))'s two segment dots of row r, and row r's S / 2
// lanes are 2 r S + 5 tau. Returns the rows as the unsegmented stages do: row r (r < R) in lane 4 r's c0,
// row r + R / 2 (a gated tile's up row) in its c2.
template <int S>
__device__ __forceinline__ void seg_rows(float v, float& c0, float& c2) {
#pragma unroll
  for (int off = 5; off < 5 * (S / 2); off *= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31;
  c0 = __shfl_sync(0xffffffffu, v, ((S / 2) * lane) & 31);
  c2 = __shfl_sync(0xffffffffu, v, ((S / 2) * lane + 16) & 31);
}

// One segmented bf16 stage (R rows x S segments of sl columns from column k0).
template <int S>
__device__ __forceinline__ void stage_dot_bf16_seg(const char* st, int pitch, const Bf16* vec, int k0, int sl,
                                                   float& c0, float& c2) {
  constexpr int kH = S / 2;
  const int lane = threadIdx.x & 31, t = lane & 3;
  // ldmatrix.x4: lane l addresses MMA row (l & 7) + 8 ((l >> 3) & 1), columns 8 (l >> 4) onwards
  const int ga = lane & 7, ta = ga % kH;
  const char* ap = st + (ga / kH) * pitch + (2 * ta + ((lane >> 3) & 1)) * sl * 2 + (lane >> 4) * 16;
  const int sx = (lane >> 2) % S;
  const Bf16* xp = vec + k0 + sx * sl + 2 * t;
  const int ra = seg_rot(16, S, ta), rx = seg_rot(16, S, sx / 2);
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto step = [&](int k, float(&acc)[4]) {
    int ka = k + ra, kx = k + rx;
    if (ka >= sl) ka -= sl;
    if (kx >= sl) kx -= sl;
    uint32_t r[4];
    ldsm_x4(r, ap + ka * 2);
    qmma::mma_bf16(acc, r[0], r[1], r[2], r[3], *reinterpret_cast<const uint32_t*>(xp + kx),
                   *reinterpret_cast<const uint32_t*>(xp + kx + 8));
  };
#pragma unroll 2
  for (int k = 0; k < sl; k += 32) {
    step(k, c);
    step(k + 16, d);
  }
  seg_rows<S>(c[0] + d[0] + c[3] + d[3], c0, c2);
}

// One segmented quantized stage (R rows x S segments of sl codes from code k0), per group as stage_dot_q
// (gback, kBits 8: x's per-group 2^-s).
template <int S, int kBits>
__device__ __forceinline__ void stage_dot_q_seg(const unsigned char* st, int pitch, int sbp, const uint4* xv,
                                                const float* gsum, const float* gback, int k0, int sl,
                                                float& c0, float& c2) {
  constexpr int kH = S / 2, kR = 16 / S, kGroupBytes = 8 * kBits;  // a row's bytes per group of 64 codes
  constexpr float kOffset = kBits == 4 ? 128.0f : 1024.0f;        // what the biased codes add per x
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const int r = gq / kH, tau = gq % kH, ng = sl / 64, segb = sl * kBits / 8;
  const unsigned char* ca = st + r * pitch + 2 * tau * segb + t * (kGroupBytes / 4);
  const unsigned char* cb = ca + segb;
  const int sx = gq % S, gx = k0 / 64 + sx * ng, ga = k0 / 64 + 2 * tau * ng;
  const auto* sc = reinterpret_cast<const unsigned short*>(st + kR * pitch + r * sbp) + 2 * tau * ng;
  const auto* bi = reinterpret_cast<const unsigned short*>(st + kR * pitch + (kR + r) * sbp) + 2 * tau * ng;
  float acc0 = 0.0f, acc3 = 0.0f;
  // this lane's A group, its B column's x group (both rotated, wrapping)
  int ua = seg_rot(kBits, S, tau), ux = seg_rot(kBits, S, sx / 2);
#pragma unroll 4
  for (int u = 0; u < ng; ++u) {
    const uint4* x = xv + (gx + ux) * 8 + 2 * t;
    const uint4 x0 = x[0], x1 = x[1];
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kBits == 4) {
      group_mma_q4(cq, *reinterpret_cast<const uint2*>(ca + ua * kGroupBytes),
                   *reinterpret_cast<const uint2*>(cb + ua * kGroupBytes), x0, x1);
    } else {
      group_mma_q8(cq, *reinterpret_cast<const uint4*>(ca + ua * kGroupBytes),
                   *reinterpret_cast<const uint4*>(cb + ua * kGroupBytes), x0, x1);
      cq[0] *= gback[ga + ua];  // exact: back to x's own scale first
      cq[3] *= gback[ga + ng + ua];
    }
    const float s0 = bf16_bits(sc[ua]), s1 = bf16_bits(sc[ng + ua]);
    const float b0 = bf16_bits(bi[ua]), b1 = bf16_bits(bi[ng + ua]);
    acc0 = fmaf(s0, cq[0], fmaf(fmaf(-kOffset, s0, b0), gsum[ga + ua], acc0));
    acc3 = fmaf(s1, cq[3], fmaf(fmaf(-kOffset, s1, b1), gsum[ga + ng + ua], acc3));
    if (++ua == ng) ua = 0;
    if (++ux == ng) ux = 0;
  }
  seg_rows<S>(acc0 + acc3, c0, c2);
}

}  // namespace bunsen::kernels::cuda::mega
