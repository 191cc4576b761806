// MLX affine quantization on the host: the quantizer (equal to MLX's mx.quantize, mode "affine"), its
// inverse, and the bit packing of the `weight` tensor. Not a kernel (the fast dequantizing matmul lives in
// kernels/) and not a loader (weights/config resolve which modules are quantized). Layout (MLX's): each row
// of `cols` codes is a little-endian bit stream of `bits`-bit codes (code i in bits [i*bits, (i+1)*bits) of
// the row), stored as uint32 words, packed_cols(cols, bits) words per row; 3/5/6-bit codes may straddle two
// words. scales/biases: [rows, cols / group_size], w = scale * q + bias. Invariants: bits in {2,3,4,5,6,8},
// group_size in {32,64,128}, cols % group_size == 0.
#pragma once
#include <cstdint>
#include <string>

namespace bunsen::model {

struct QuantSpec {
  int bits = 4;
  int group_size = 64;
};

inline bool operator==(QuantSpec a, QuantSpec b) {
  return a.bits == b.bits && a.group_size == b.group_size;
}

// True for bits in {2,3,4,5,6,8} and group_size in {32,64,128}.
bool is_supported(QuantSpec spec);
// Throws Error("quant", "<what>: unsupported quantization bits=.. group_size=..") when !is_supported(spec).
void check_supported(QuantSpec spec, const std::string& what);

// uint32 words per packed row: cols * bits / 32. Throws Error("quant", ...) when cols * bits % 32 != 0.
int64_t packed_cols(int64_t cols, int bits);
// Groups per row: cols / group_size. Throws Error("quant", ...) when group_size does not divide cols.
int64_t group_cols(int64_t cols, int group_size);

// Packs `cols` codes (each < 2^bits) into packed_cols(cols, bits) words (low bits first). Bits of the output
// row not covered by a code are zero.
void pack_row(const uint8_t* codes, int64_t cols, int bits, uint32_t* packed);
// Inverse of pack_row.
void unpack_row(const uint32_t* packed, int64_t cols, int bits, uint8_t* codes);
// One code of a packed row.
uint32_t unpack_one(const uint32_t* packed_row, int64_t i, int bits);

// MLX's affine quantizer, computed in f32 exactly as MLX's CPU backend does, per group of group_size values:
//   n_bins = 2^bits - 1, eps = 1e-7
//   scale = max((w_max - w_min) / n_bins, eps); negated unless |w_min| > |w_max|
//   edge = |w_min| > |w_max| ? w_min : w_max;  q0 = rint(edge / scale)
//   if q0 != 0: scale = edge / q0, bias = edge;  else bias = 0
//   q = clamp(rint((w - bias) / scale), 0, n_bins)          (rint: round half to even)
// Codes use the f32 scale/bias; a caller that stores scales/biases in bf16/f16 (as MLX does for bf16/f16
// weights) rounds them afterwards. w is [rows, cols] f32 row-major.
//   packed [rows, packed_cols(cols, bits)] u32; scales, biases [rows, cols / group_size] f32.
void quantize_affine(const float* w, int64_t rows, int64_t cols, QuantSpec spec, uint32_t* packed,
                     float* scales, float* biases);

// w[r, c] = fmaf(scale[r, c / g], q[r, c], bias[r, c / g]) in f32 (bit for bit what kernels/ref computes).
//   packed [rows, packed_cols] u32; scales, biases [rows, cols / g] f32; out [rows, cols] f32.
void dequantize_affine(const uint32_t* packed, const float* scales, const float* biases, int64_t rows,
                       int64_t cols, QuantSpec spec, float* out);

}  // namespace bunsen::model
