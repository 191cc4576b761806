// The persistent decode step's ring stages (decode_mega.cu): their shared-memory layouts per weight form
// (bf16, wide bf16, MLX affine 4- and 8-bit, attention keys) and the dot products the consumer warps run on
// them through mma.m16n8k16 (x broadcast into every B column, so each output column holds the same dots;
// lanes with t == 0 return the tile's rows). Only decode_mega.cu includes it (sm_90a device code).
#pragma once
#include <cstdint>

#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda::mega {

constexpr int kStageBytes = 19456;  // a 4-bit stage (below) with room
// 4-bit stages: 16 tile rows (gated: 8 gate rows, then the same 8 up rows) x up to kQ4Codes codes, each row's
// codes, scales and biases padded by 16 bytes (the 8 rows of an MMA fragment read hit different banks).
constexpr int kQ4Codes = 2048;
constexpr int kQ4Row = kQ4Codes / 2 + 16;  // bytes per tile row of codes
constexpr int kQ4Sb = kQ4Codes / 32 + 16;  // bytes per tile row of scales (and of biases)
static_assert(16 * kQ4Row + 32 * kQ4Sb <= kStageBytes, "a 4-bit stage fits");
// 8-bit stages alike: 16 tile rows x up to kQ8Codes codes; rows padded by 64 bytes (a quarter warp's 16-byte
// loads of two rows fall in different banks).
constexpr int kQ8Codes = 1024;
constexpr int kQ8Row = kQ8Codes + 64;
constexpr int kQ8Sb = kQ8Codes / 32 + 16;
static_assert(16 * kQ8Row + 32 * kQ8Sb <= kStageBytes, "an 8-bit stage fits");
// Bytes per tile row of codes / of scales for `bits`.
__host__ __device__ __forceinline__ int q_row_bytes(int bits) {
  return bits == 8 ? kQ8Row : kQ4Row;
}
__host__ __device__ __forceinline__ int q_sb_bytes(int bits) {
  return bits == 8 ? kQ8Sb : kQ4Sb;
}
// bf16 stages: 16 tile rows x up to kBfCols columns, each row padded by 16 bytes (ldmatrix's 8 rows hit
// different banks).
constexpr int kBfCols = 512;
constexpr int kBfRow = kBfCols * 2 + 16;
static_assert(16 * kBfRow <= kStageBytes, "a bf16 stage fits");
// Wide bf16 stages (MegaArgs::wide): 8 tile rows x 2 kBfCols columns, one 2 KB copy per row instead of two of
// 1 KB; the row's two column halves are MMA rows g and g + 8 (A), fed x's matching half through separate B
// columns (0-3: the first half, 4-7: the second), so C[g][0] and C[g + 8][4] are the row's two half dots.
constexpr int kBfRowW = 2 * kBfCols * 2 + 16;
static_assert(8 * kBfRowW <= kStageBytes, "a wide bf16 stage fits");
// Attention stages: kAttnKeys old keys of one (kv head, key slice) task, their K rows then their V rows (head
// dims contiguous), each row padded by 16 bytes (ldmatrix's 8 rows hit different banks); a short last stage
// repeats its last key (finite values under the masked logits).
constexpr int kAttnKeys = 16;
__host__ __device__ __forceinline__ int attn_row_bytes(int head_dim) {
  return 2 * head_dim + 16;
}
static_assert(2 * kAttnKeys * (2 * 256 + 16) <= kStageBytes, "an attention stage fits");
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

// One wide bf16 stage (8 tile rows x len = 2 kBfCols columns from column k0): A rows g and g + 8 are row g's
// first and second kBfCols columns, lane (g, t) feeds B column g with x's half g / 4, so C[g][0] (lane t 0's
// c0) and C[g + 8][4] (lane t 2's c2) are row g's half dots; lanes with t == 0 return row g's dot in c0.
__device__ __forceinline__ void stage_dot_bf16_wide(const char* st, const Bf16* vec, int k0, float& c0,
                                                    float& c2) {
  const int lane = threadIdx.x & 31, t = lane & 3;
  const char* ap = st + (lane & 7) * kBfRowW + ((lane >> 3) & 1) * kBfCols * 2 + (lane >> 4) * 16;
  const Bf16* xp = vec + k0 + ((lane >> 2) >= 4 ? kBfCols : 0) + 2 * t;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
  for (int k = 0; k < kBfCols; k += 32) {
    uint32_t r[4];
    ldsm_x4(r, ap + k * 2);
    qmma::mma_bf16(c, r[0], r[1], r[2], r[3], *reinterpret_cast<const uint32_t*>(xp + k),
                   *reinterpret_cast<const uint32_t*>(xp + k + 8));
    ldsm_x4(r, ap + (k + 16) * 2);
    qmma::mma_bf16(d, r[0], r[1], r[2], r[3], *reinterpret_cast<const uint32_t*>(xp + k + 16),
                   *reinterpret_cast<const uint32_t*>(xp + k + 24));
  }
  const float second = __shfl_down_sync(0xffffffffu, c[2] + d[2], 2);
  c0 = c[0] + d[0] + second;
  c2 = 0.0f;
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
  const float s0 = __uint_as_float(static_cast<uint32_t>(sc[r0]) << 16);
  const float s1 = __uint_as_float(static_cast<uint32_t>(sc[r1]) << 16);
  const float b0 = __uint_as_float(static_cast<uint32_t>(bi[r0]) << 16);
  const float b1 = __uint_as_float(static_cast<uint32_t>(bi[r1]) << 16);
  acc0 = fmaf(s0, cq[0], fmaf(fmaf(-offset, s0, b0), gsum, acc0));
  acc2 = fmaf(s1, cq[2], fmaf(fmaf(-offset, s1, b1), gsum, acc2));
}

// One 4-bit stage (16 tile rows x len codes from code k0) through mma.m16n8k16 as the tile GEMV computes it
// (gemv_qmma_tiles.cuh: codes enter as bf16 128 + q, the group's sum(q x) scaled, bias' = bias - 128 scale
// times the group's sum of x), x staged in the codes' pair order (perm4) with its group sums. Every lane
// feeds token 0's x, so each MMA column holds the same dot; lanes with t == 0 return rows g (c0) and g + 8
// (c2). Groups unrolled by four: a group's MMAs are one dependent chain, four groups four chains in flight.
__device__ __forceinline__ void stage_dot_q4(const unsigned char* st, const uint4* xq, const float* gsum,
                                             int k0, int len, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const unsigned char* ca = st + gq * kQ4Row + t * 8;
  const unsigned char* cb = ca + 8 * kQ4Row;
  const int ng = len / 64, g0 = k0 / 64;
  float acc0 = 0.0f, acc2 = 0.0f;
#pragma unroll 4
  for (int u = 0; u < ng; ++u) {
    const uint2 wa = *reinterpret_cast<const uint2*>(ca + u * 32),
                wb = *reinterpret_cast<const uint2*>(cb + u * 32);
    const uint4* x = xq + (g0 + u) * 8 + 2 * t;
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint4 x0 = x[0], x1 = x[1];
    using qmma::pair4_biased;
    qmma::mma_bf16(cq, pair4_biased(wa.x), pair4_biased(wb.x), pair4_biased(wa.x >> 4),
                   pair4_biased(wb.x >> 4), x0.x, x0.y);
    qmma::mma_bf16(cq, pair4_biased(wa.x >> 8), pair4_biased(wb.x >> 8), pair4_biased(wa.x >> 12),
                   pair4_biased(wb.x >> 12), x0.z, x0.w);
    qmma::mma_bf16(cq, pair4_biased(wa.y), pair4_biased(wb.y), pair4_biased(wa.y >> 4),
                   pair4_biased(wb.y >> 4), x1.x, x1.y);
    qmma::mma_bf16(cq, pair4_biased(wa.y >> 8), pair4_biased(wb.y >> 8), pair4_biased(wa.y >> 12),
                   pair4_biased(wb.y >> 12), x1.z, x1.w);
    fold_group(st + 16 * kQ4Row, kQ4Sb, gq, u, cq, gsum[g0 + u], 128.0f, acc0, acc2);
  }
  c0 = acc0;
  c2 = acc2;
}

// One 8-bit stage (16 tile rows x len codes from code k0) as the per-op f16 kernel computes it
// (gemv_qmma_h8.cu): each pair of codes one PRMT into f16 (1024 + q0, 1024 + q1), x staged as f16 scaled by
// its group's 2^s in natural order (lane t's 16 codes of a group meet x[16 t .. 16 t + 15]), the group's
// sum scaled back by 2^-s (gback) before its scale, bias' = bias - 1024 scale. Groups unrolled by four.
__device__ __forceinline__ void stage_dot_q8(const unsigned char* st, const uint4* xh, const float* gsum,
                                             const float* gback, int k0, int len, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const unsigned char* ca = st + gq * kQ8Row + t * 16;
  const unsigned char* cb = ca + 8 * kQ8Row;
  const int ng = len / 64, g0 = k0 / 64;
  float acc0 = 0.0f, acc2 = 0.0f;
  using qmma::codes_1024;
#pragma unroll 4
  for (int u = 0; u < ng; ++u) {
    const uint4 wa = *reinterpret_cast<const uint4*>(ca + u * 64),
                wb = *reinterpret_cast<const uint4*>(cb + u * 64);
    const uint4* x = xh + (g0 + u) * 8 + 2 * t;  // the lane's 16 codes: chunks 2t, 2t + 1 of the group
    const uint4 x0 = x[0], x1 = x[1];
    float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    qmma::mma_f16(cq, codes_1024<0>(wa.x), codes_1024<0>(wb.x), codes_1024<2>(wa.x), codes_1024<2>(wb.x),
                  x0.x, x0.y);
    qmma::mma_f16(cq, codes_1024<0>(wa.y), codes_1024<0>(wb.y), codes_1024<2>(wa.y), codes_1024<2>(wb.y),
                  x0.z, x0.w);
    qmma::mma_f16(cq, codes_1024<0>(wa.z), codes_1024<0>(wb.z), codes_1024<2>(wa.z), codes_1024<2>(wb.z),
                  x1.x, x1.y);
    qmma::mma_f16(cq, codes_1024<0>(wa.w), codes_1024<0>(wb.w), codes_1024<2>(wa.w), codes_1024<2>(wb.w),
                  x1.z, x1.w);
    const float back = gback[g0 + u];
    cq[0] *= back;  // exact: back to x's own scale first
    cq[2] *= back;
    fold_group(st + 16 * kQ8Row, kQ8Sb, gq, u, cq, gsum[g0 + u], 1024.0f, acc0, acc2);
  }
  c0 = acc0;
  c2 = acc2;
}

}  // namespace bunsen::kernels::cuda::mega
