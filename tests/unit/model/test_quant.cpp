// model/quant: packing round trips for every bits × group size (against a bit-by-bit packer written here),
// quantize_affine against an implementation written here from MLX's documented algorithm and against a
// hand-derived case, dequantize_affine bit for bit against kernels/ref, and the quantization config block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "kernels/ref/ref_ops.h"
#include "model/config.h"
#include "model/quant.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};

// Bit b of code c is bit (c * bits + b) of the row, counting from bit 0 of word 0 (little-endian stream).
std::vector<uint32_t> pack_bitwise(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint32_t> words(codes.size() * bits / 32, 0u);
  for (size_t c = 0; c < codes.size(); ++c)
    for (int b = 0; b < bits; ++b)
      if ((codes[c] >> b) & 1) words[(c * bits + b) / 32] |= 1u << ((c * bits + b) % 32);
  return words;
}

TEST(QuantPack, RoundTripForEveryBitsAndGroupSize) {
  std::mt19937 rng(1);
  for (int bits : kBits)
    for (int group : kGroups) {
      const int64_t cols = group * 3;
      ASSERT_EQ(packed_cols(cols, bits), cols * bits / 32);
      ASSERT_EQ(group_cols(cols, group), 3);
      std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
      std::vector<uint8_t> codes(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
      for (auto& c : codes) c = static_cast<uint8_t>(code(rng));
      codes[0] = codes[static_cast<size_t>(cols) - 1] = static_cast<uint8_t>((1 << bits) - 1);  // all ones
      std::vector<uint32_t> packed(static_cast<size_t>(packed_cols(cols, bits)));
      pack_row(codes.data(), cols, bits, packed.data());
      EXPECT_EQ(packed, pack_bitwise(codes, bits)) << "bits=" << bits << " group=" << group;
      unpack_row(packed.data(), cols, bits, back.data());
      EXPECT_EQ(back, codes) << "bits=" << bits << " group=" << group;
      for (int64_t i = 0; i < cols; ++i)
        ASSERT_EQ(unpack_one(packed.data(), i, bits), codes[static_cast<size_t>(i)]);
    }
}

TEST(QuantPack, KnownLayouts) {
  // 4-bit: code i in nibble i of word 0 (low first); 3-bit: code 10 straddles words 0 and 1 (bits 30..32).
  std::vector<uint8_t> c4 = {1, 2, 3, 4, 5, 6, 7, 8};
  uint32_t w4 = 0;
  pack_row(c4.data(), 8, 4, &w4);  // 8 codes of 4 bits = exactly one word
  EXPECT_EQ(w4, 0x87654321u);
  std::vector<uint8_t> c3(32, 0);
  c3[10] = 0b101;
  uint32_t w3[3] = {};
  pack_row(c3.data(), 32, 3, w3);
  EXPECT_EQ(w3[0], 1u << 30);
  EXPECT_EQ(w3[1], 1u);
  EXPECT_EQ(w3[2], 0u);
  EXPECT_THROW(packed_cols(33, 4), Error);
  EXPECT_THROW(group_cols(96, 64), Error);
  EXPECT_THROW(check_supported({7, 64}, "x"), Error);
  EXPECT_THROW(check_supported({4, 48}, "x"), Error);
}

// MLX's affine quantizer for one group, written from its documentation and CPU source (facts only):
// n_bins = 2^bits - 1; scale = max((max - min) / n_bins, 1e-7), negative unless |min| > |max|; edge = the
// extreme with the larger magnitude; q0 = round-half-even(edge / scale); when q0 != 0 the scale is
// snapped to edge / q0 and the bias is edge, else the bias is 0; q = clip(round-half-even((w - bias) /
// scale)).
struct GroupQ {
  float scale, bias;
  std::vector<int> q;
};
GroupQ mlx_group(const float* w, int n, int bits) {
  float lo = w[0], hi = w[0];
  for (int i = 1; i < n; ++i) {
    lo = w[i] < lo ? w[i] : lo;
    hi = w[i] > hi ? w[i] : hi;
  }
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const bool min_wins = std::fabs(lo) > std::fabs(hi);
  float range_scale = (hi - lo) / n_bins;
  if (range_scale < 1e-7f) range_scale = 1e-7f;
  GroupQ g{min_wins ? range_scale : -range_scale, 0.0f, {}};
  const float edge = min_wins ? lo : hi;
  const float q0 = std::nearbyint(edge / g.scale);
  if (q0 != 0.0f) {
    g.scale = edge / q0;
    g.bias = edge;
  }
  for (int i = 0; i < n; ++i) {
    const float q = std::nearbyint((w[i] - g.bias) / g.scale);
    g.q.push_back(static_cast<int>(q < 0.0f ? 0.0f : q > n_bins ? n_bins : q));
  }
  return g;
}

TEST(QuantAffine, EqualsTheDocumentedAlgorithmOnRandomMatrices) {
  std::mt19937 rng(2);
  for (int bits : kBits)
    for (int group : kGroups) {
      const int64_t rows = 5, cols = group * 2;
      std::vector<float> w(static_cast<size_t>(rows * cols));
      std::normal_distribution<float> normal(0.0f, 0.05f);
      for (auto& v : w) v = normal(rng);
      for (int64_t c = 0; c < group; ++c) w[static_cast<size_t>(cols + c)] = 0.25f;     // a constant group
      for (int64_t c = 0; c < group; ++c) w[static_cast<size_t>(2 * cols + c)] = 0.0f;  // an all-zero group
      std::vector<uint32_t> packed(static_cast<size_t>(rows * packed_cols(cols, bits)));
      std::vector<float> scales(static_cast<size_t>(rows * 2)), biases(scales.size());
      quantize_affine(w.data(), rows, cols, {bits, group}, packed.data(), scales.data(), biases.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < 2; ++g) {
          const GroupQ want = mlx_group(&w[static_cast<size_t>(r * cols + g * group)], group, bits);
          const size_t gi = static_cast<size_t>(r * 2 + g);
          ASSERT_EQ(std::memcmp(&scales[gi], &want.scale, 4), 0)
              << "bits=" << bits << " r=" << r << " g=" << g;
          ASSERT_EQ(std::memcmp(&biases[gi], &want.bias, 4), 0)
              << "bits=" << bits << " r=" << r << " g=" << g;
          for (int i = 0; i < group; ++i)
            ASSERT_EQ(static_cast<int>(unpack_one(&packed[static_cast<size_t>(r * packed_cols(cols, bits))],
                                                  g * group + i, bits)),
                      want.q[static_cast<size_t>(i)]);
        }
      // Reconstruction error is at most one step: half a step inside the grid; at the far end the snapped
      // grid (scale = edge / q0) falls short of the range by at most one step, where values clip.
      std::vector<float> back(w.size());
      dequantize_affine(packed.data(), scales.data(), biases.data(), rows, cols, {bits, group}, back.data());
      for (size_t i = 0; i < w.size(); ++i) {
        const float step = std::fabs(scales[i / static_cast<size_t>(group)]);
        ASSERT_LE(std::fabs(back[i] - w[i]), step * 1.0001f + 1e-6f) << "bits=" << bits << " at " << i;
      }
    }
}

TEST(QuantAffine, HandDerivedGroup) {
  // w = 0..31 at 5 bits: max wins, scale = -(31 / 31) = -1, edge = 31, q0 = -31, so scale = 31 / -31 = -1,
  // bias = 31 and code i = 31 - i; dequantizing gives w back exactly.
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[static_cast<size_t>(i)] = static_cast<float>(i);
  std::vector<uint32_t> packed(5);
  float scale = 0, bias = 0;
  quantize_affine(w.data(), 1, 32, {5, 32}, packed.data(), &scale, &bias);
  EXPECT_EQ(scale, -1.0f);
  EXPECT_EQ(bias, 31.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(unpack_one(packed.data(), i, 5), static_cast<uint32_t>(31 - i));
  std::vector<float> back(32);
  dequantize_affine(packed.data(), &scale, &bias, 1, 32, {5, 32}, back.data());
  EXPECT_EQ(back, w);
}

TEST(QuantAffine, DequantizeEqualsKernelReferenceBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int bits : kBits)
    for (int group : kGroups) {
      const int64_t rows = 7, cols = group * 3, words = packed_cols(cols, bits);
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (auto& v : w) v = u(rng);
      OwnedTensor packed = OwnedTensor::make(DType::kU32, {rows, words});
      OwnedTensor scales = OwnedTensor::make(DType::kF32, {rows, 3}),
                  biases = OwnedTensor::make(DType::kF32, {rows, 3});
      quantize_affine(w.data(), rows, cols, {bits, group}, packed.tensor.ptr<uint32_t>(),
                      scales.tensor.ptr<float>(), biases.tensor.ptr<float>());
      std::vector<float> mine(w.size());
      dequantize_affine(packed.tensor.ptr<uint32_t>(), scales.tensor.ptr<float>(), biases.tensor.ptr<float>(),
                        rows, cols, {bits, group}, mine.data());
      OwnedTensor ref = OwnedTensor::make(DType::kF32, {rows, cols});
      kernels::ref::dequantize(ref.tensor, {packed.tensor, scales.tensor, biases.tensor, bits, group});
      ASSERT_EQ(std::memcmp(mine.data(), ref.tensor.data, mine.size() * 4), 0)
          << "bits=" << bits << " group=" << group;
    }
}

std::string cfg_with(const std::string& extra) {
  return R"({"model_type":"llama","vocab_size":100,"hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2)" +
         extra + "}";
}

TEST(QuantConfig, DefaultsOverridesAndFalse) {
  const ModelConfig c = parse_config(cfg_with(R"(,"quantization":{"group_size":64,"bits":4,"mode":"affine",
      "model.layers.0.mlp.down_proj":{"group_size":32,"bits":8},"model.layers.1.mlp.down_proj":{"bits":6},
      "lm_head":false,"model.embed_tokens":true})"),
                                     "q");
  ASSERT_TRUE(c.quantization.enabled);
  EXPECT_EQ(c.quant_spec("model.layers.0.self_attn.q_proj"), (QuantSpec{4, 64}));
  EXPECT_EQ(c.quant_spec("model.layers.0.mlp.down_proj"), (QuantSpec{8, 32}));
  EXPECT_EQ(c.quant_spec("model.layers.1.mlp.down_proj"), (QuantSpec{6, 64}));  // group from the default
  EXPECT_EQ(c.quant_spec("lm_head"), std::nullopt);
  EXPECT_EQ(c.quant_spec("model.embed_tokens"), (QuantSpec{4, 64}));
  const ModelConfig hf = parse_config(cfg_with(R"(,"quantization_config":{"group_size":128,"bits":8})"), "q");
  EXPECT_EQ(hf.quant_spec("anything"), (QuantSpec{8, 128}));
  const ModelConfig plain = parse_config(cfg_with(""), "q");
  EXPECT_FALSE(plain.quantization.enabled);
  EXPECT_EQ(plain.quant_spec("lm_head"), std::nullopt);
}

TEST(QuantConfig, Errors) {
  using testutil::expect_error;
  expect_error(
      [] { parse_config(cfg_with(R"(,"quantization":{"group_size":64,"bits":7})"), "x/config.json"); },
      {"x/config.json", "bits=7"});
  expect_error([] { parse_config(cfg_with(R"(,"quantization":{"group_size":48,"bits":4})"), "c"); },
               {"group_size=48"});
  expect_error(
      [] { parse_config(cfg_with(R"(,"quantization":{"group_size":64,"bits":4,"mode":"mxfp4"})"), "c"); },
      {"mode", "mxfp4"});
  expect_error([] { parse_config(cfg_with(R"(,"quantization":{"bits":4})"), "c"); }, {"group_size"});
  expect_error(
      [] { parse_config(cfg_with(R"(,"quantization_config":{"quant_method":"gptq","bits":4})"), "c"); },
      {"gptq"});
  expect_error(
      [] {
        parse_config(
            cfg_with(R"(,"quantization":{"group_size":64,"bits":4,"model.layers.0.mlp.up_proj":{"bits":1}})"),
            "c");
      },
      {"model.layers.0.mlp.up_proj", "bits=1"});
}

}  // namespace
}  // namespace bunsen::model
