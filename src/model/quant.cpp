// MLX affine quantizer, dequantizer and bit packing on the host (see quant.h for the layout and formula).
// Not a fast path: convert and tests use it; inference dequantizes inside kernels/.
// Invariant: pack_row/unpack_row treat a row as one little-endian bit stream, whatever bits is.
#include "model/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/status.h"

namespace bunsen::model {

bool is_supported(QuantSpec spec) {
  const bool bits_ok = spec.bits == 2 || spec.bits == 3 || spec.bits == 4 || spec.bits == 5 ||
                       spec.bits == 6 || spec.bits == 8;
  const bool group_ok = spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128;
  return bits_ok && group_ok;
}

void check_supported(QuantSpec spec, const std::string& what) {
  check(is_supported(spec), "quant",
        strfmt("%s: unsupported quantization bits=%d group_size=%d (bits 2,3,4,5,6,8; group 32,64,128)",
               what.c_str(), spec.bits, spec.group_size));
}

int64_t packed_cols(int64_t cols, int bits) {
  check(bits > 0 && bits <= 8 && cols >= 0 && (cols * bits) % 32 == 0, "quant",
        strfmt("%lld columns of %d bits do not fill whole uint32 words", static_cast<long long>(cols), bits));
  return cols * bits / 32;
}

int64_t group_cols(int64_t cols, int group_size) {
  check(group_size > 0 && cols % group_size == 0, "quant",
        strfmt("group size %d does not divide %lld columns", group_size, static_cast<long long>(cols)));
  return cols / group_size;
}

void pack_row(const uint8_t* codes, int64_t cols, int bits, uint32_t* packed) {
  const int64_t words = packed_cols(cols, bits);
  std::fill(packed, packed + words, 0u);
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < cols; ++i) {
    const uint64_t bit = static_cast<uint64_t>(i) * bits;
    const uint64_t word = bit / 32, shift = bit % 32;
    const uint64_t v = static_cast<uint64_t>(codes[i] & mask) << shift;
    packed[word] |= static_cast<uint32_t>(v);
    if (shift + bits > 32) packed[word + 1] |= static_cast<uint32_t>(v >> 32);
  }
}

uint32_t unpack_one(const uint32_t* packed_row, int64_t i, int bits) {
  const uint64_t bit = static_cast<uint64_t>(i) * bits;
  const uint64_t word = bit / 32, shift = bit % 32;
  uint64_t v = packed_row[word] >> shift;
  if (shift + bits > 32) v |= static_cast<uint64_t>(packed_row[word + 1]) << (32 - shift);
  return static_cast<uint32_t>(v & ((1u << bits) - 1u));
}

void unpack_row(const uint32_t* packed, int64_t cols, int bits, uint8_t* codes) {
  for (int64_t i = 0; i < cols; ++i) codes[i] = static_cast<uint8_t>(unpack_one(packed, i, bits));
}

namespace {

// One group: scale/bias as MLX computes them, then the codes.
void quantize_group(const float* w, int group, int bits, uint8_t* codes, float* scale_out, float* bias_out) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (int j = 0; j < group; ++j) {
    w_max = std::max(w_max, w[j]);
    w_min = std::min(w_min, w[j]);
  }
  const bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  const float edge = mask ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < group; ++j) {
    float q = std::rint((w[j] - bias) / scale);
    q = std::min(std::max(q, 0.0f), n_bins);
    codes[j] = static_cast<uint8_t>(q);
  }
  *scale_out = scale;
  *bias_out = bias;
}

}  // namespace

void quantize_affine(const float* w, int64_t rows, int64_t cols, QuantSpec spec, uint32_t* packed,
                     float* scales, float* biases) {
  check_supported(spec, "quantize_affine");
  const int64_t words = packed_cols(cols, spec.bits);
  const int64_t groups = group_cols(cols, spec.group_size);
  std::vector<uint8_t> codes(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    for (int64_t g = 0; g < groups; ++g) {
      quantize_group(wr + g * spec.group_size, spec.group_size, spec.bits, codes.data() + g * spec.group_size,
                     scales + r * groups + g, biases + r * groups + g);
    }
    pack_row(codes.data(), cols, spec.bits, packed + r * words);
  }
}

void dequantize_affine(const uint32_t* packed, const float* scales, const float* biases, int64_t rows,
                       int64_t cols, QuantSpec spec, float* out) {
  check_supported(spec, "dequantize_affine");
  const int64_t words = packed_cols(cols, spec.bits);
  const int64_t groups = group_cols(cols, spec.group_size);
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* pr = packed + r * words;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = r * groups + c / spec.group_size;
      const float q = static_cast<float>(unpack_one(pr, c, spec.bits));
      out[r * cols + c] = std::fma(scales[g], q, biases[g]);
    }
  }
}

}  // namespace bunsen::model
