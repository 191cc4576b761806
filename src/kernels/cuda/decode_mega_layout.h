// The persistent decode step's ring stages (decode_mega.cu): their shared-memory layouts per weight form
// (bf16, MLX affine 4- and 8-bit, each also segmented; attention keys) and the plan that picks one per input
// width. Plain arithmetic, host and device: decode_mega_stages.cuh runs the stages, tests/kernels checks the
// plans (exact parts, capacity, alignment, bank spread) without a GPU.
#pragma once

#if defined(__CUDACC__)
#define BUNSEN_MEGA_HD __host__ __device__ __forceinline__
#else
#define BUNSEN_MEGA_HD inline
#endif

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
BUNSEN_MEGA_HD int q_row_bytes(int bits) {
  return bits == 8 ? kQ8Row : kQ4Row;
}
BUNSEN_MEGA_HD int q_sb_bytes(int bits) {
  return bits == 8 ? kQ8Sb : kQ4Sb;
}
// bf16 stages: 16 tile rows x up to kBfCols columns, each row padded by 16 bytes (ldmatrix's 8 rows hit
// different banks).
constexpr int kBfCols = 512;
constexpr int kBfRow = kBfCols * 2 + 16;
static_assert(16 * kBfRow <= kStageBytes, "a bf16 stage fits");
// Attention stages: kAttnKeys old keys of one (kv head, key slice) task, their K rows then their V rows (head
// dims contiguous), each row padded by 16 bytes (ldmatrix's 8 rows hit different banks); a short last stage
// repeats its last key (finite values under the masked logits).
constexpr int kAttnKeys = 16;
BUNSEN_MEGA_HD int attn_row_bytes(int head_dim) {
  return 2 * head_dim + 16;
}
static_assert(2 * kAttnKeys * (2 * 256 + 16) <= kStageBytes, "an attention stage fits");
// Segmented stages (MegaArgs::segs): a tile row's part is S segments of sl values, S * sl contiguous, so each
// row is one copy of S times the bytes of an unsegmented stage row (the TMA takes about the same time per
// copy whatever its size). R = 16 / S rows at `pitch` bytes, then (quantized) R rows of scales and R of
// biases at `sbp`. Lane group g's MMA rows g and g + 8 are segments 2 tau and 2 tau + 1 of row r = g / (S /
// 2) (tau = g % (S / 2)); B column n carries x's segment n (lanes g >= S repeat segment g % S); so lane (g, t
// == tau) holds the row's two segment dots in c[0] and c[3]. Segments 2 tau and 2 tau + 1 start reading at
// their tau'th step (bf16: 128 / S columns; quantized: one group), wrapping, and x's segment alike, so the
// rows of one shared-memory wavefront fall in different banks (with the pitches of seg_pitch).
// The plan for one input width K: S (1 = the unsegmented stages above), the segment length sl, the parts P.
// S > 1 only where it gives longer row copies than S = 1, K = P * S * sl exactly and sl keeps the segments
// 128-byte aligned (bf16 sl % 64, 4-bit % 256, 8-bit % 128) and (quantized) the scale rows 16-byte multiples.
BUNSEN_MEGA_HD void seg_plan(int K, int bits, int segs, int& S, int& sl, int& P) {
  const int cap = bits == 4 ? kQ4Codes : bits == 8 ? kQ8Codes : kBfCols;
  const int gran = bits == 4 ? 256 : bits == 8 ? 128 : 64;
  S = 1;
  sl = K < cap ? K : cap;
  P = (K + sl - 1) / sl;
  int best = sl;
  for (int s = 2; s <= segs && s <= 8; s *= 2) {
    const int p = (K + s * cap - 1) / (s * cap);
    if (K % (p * s) != 0) continue;
    const int l = K / (p * s);
    if (l % gran != 0 || (bits < 16 && (s * l) % 512 != 0) || s * l <= best) continue;
    S = s;
    sl = l;
    P = p;
    best = s * l;
  }
}
// Bytes per stage row of values (codes) and of scales for a plan (S == 1: the fixed layouts above).
BUNSEN_MEGA_HD int seg_pitch(int bits, int S, int sl) {
  if (S == 1) return bits == 16 ? kBfRow : q_row_bytes(bits);
  return bits == 16 ? S * sl * 2 + 16 : bits == 4 ? S * sl / 2 + (16 * S) % 128 : S * sl + 64;
}
BUNSEN_MEGA_HD int seg_sb_pitch(int bits, int S, int sl) {
  return S == 1 ? q_sb_bytes(bits) : S * sl / 32 + 16;
}

// Where segments 2 tau and 2 tau + 1 start reading (then wrap): bf16 in columns (128 / S per tau), quantized
// in groups of 64 codes (one per tau).
BUNSEN_MEGA_HD int seg_rot(int bits, int S, int tau) {
  return bits == 16 ? tau * (128 / S) : tau;
}
// Bytes of a stage that a plan uses (rows, then the quantized scale and bias rows): at most kStageBytes.
BUNSEN_MEGA_HD int seg_stage_bytes(int bits, int S, int sl) {
  const int R = 16 / S;
  return R * seg_pitch(bits, S, sl) + (bits < 16 ? 2 * R * seg_sb_pitch(bits, S, sl) : 0);
}

}  // namespace bunsen::kernels::cuda::mega
