// KvStorage with quantized layers (--kv-quant): per-layer layouts (u8 codes + f32 scale/bias per group),
// the effective group (64, or head_dim when 64 does not divide it), mixed quantized/unquantized layers,
// bytes per token against f32/bf16 (int8 must take less than half of f32), external memory, bad specs.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/status.h"
#include "kv/kv_storage.h"

namespace bunsen::kv {
namespace {

TEST(KvStorageQuant, LayoutPerLayer) {
  const std::vector<KvLayerShape> layers = {{2, 128}, {3, 72}, {1, 64}};
  KvStorageOptions o;
  o.n_blocks = 5;
  o.block_size = 4;
  o.quant = {{8, 64}, {4, 64}};  // layer 2 unquantized (shorter list)
  KvStorage kv(layers, o);
  ASSERT_EQ(kv.layers().size(), 3u);
  EXPECT_TRUE(kv.quantized());
  const KvLayerView& l0 = kv.layers()[0];
  EXPECT_EQ(l0.bits, 8);
  EXPECT_EQ(l0.group_size, 64);
  EXPECT_EQ(l0.k.dtype, DType::kU8);
  EXPECT_EQ(l0.k.shape_str(), Tensor::view(nullptr, DType::kU8, {5, 4, 2, 128}).shape_str());
  EXPECT_EQ(l0.k_params.dtype, DType::kF32);
  EXPECT_EQ(l0.k_params.dim(3), 4);  // 2 groups x (scale, bias)
  const KvLayerView& l1 = kv.layers()[1];
  EXPECT_EQ(l1.bits, 4);
  EXPECT_EQ(l1.group_size, 72);  // 64 does not divide 72: one group per head
  EXPECT_EQ(l1.v.dim(3), 36);
  EXPECT_EQ(l1.v_params.dim(3), 2);
  const KvLayerView& l2 = kv.layers()[2];
  EXPECT_EQ(l2.bits, 0);
  EXPECT_EQ(l2.k.dtype, DType::kF32);
  EXPECT_TRUE(l2.k_params.empty());
  EXPECT_EQ(kv.bytes(), KvStorage::bytes_per_block(layers, 4, DType::kF32, o.quant) * 5);
  // Parts never overlap: codes, then params, per layer.
  EXPECT_GE(static_cast<char*>(l0.v.data), static_cast<char*>(l0.k.data) + l0.k.nbytes());
  EXPECT_GE(static_cast<char*>(l0.k_params.data), static_cast<char*>(l0.v.data) + l0.v.nbytes());
  EXPECT_GE(static_cast<char*>(l0.v_params.data), static_cast<char*>(l0.k_params.data) + l0.k_params.nbytes());
}

TEST(KvStorageQuant, Fp8LayerHasOneScalePairPerHeadByDefault) {
  const std::vector<KvLayerShape> layers = {{2, 128}, {3, 64}};
  KvStorageOptions o;
  o.n_blocks = 3;
  o.block_size = 4;
  o.quant = {{8, 0, true}, {8, 32, true}};  // group 0: the whole head_dim
  KvStorage kv(layers, o);
  const KvLayerView& l0 = kv.layers()[0];
  EXPECT_TRUE(l0.fp8);
  EXPECT_EQ(l0.bits, 8);
  EXPECT_EQ(l0.group_size, 128);
  EXPECT_EQ(l0.k.dim(3), 128);
  EXPECT_EQ(l0.k_params.dim(3), 2);  // (scale, 0) per (token, kv head)
  EXPECT_EQ(kv.layers()[1].group_size, 32);
  EXPECT_EQ(kv.layers()[1].v_params.dim(3), 4);
  EXPECT_EQ(kv.bytes(), KvStorage::bytes_per_block(layers, 4, DType::kF32, o.quant) * 3);
  EXPECT_EQ(KvStorage::required_bytes(layers, o) >= kv.bytes(), true);
  o.quant = {{4, 64, true}};
  EXPECT_THROW(KvStorage(layers, o), Error);  // fp8 needs bits 8
}

TEST(KvStorageQuant, BytesPerTokenInt8UnderHalfOfF32) {
  const std::vector<KvLayerShape> qwen3(28, KvLayerShape{8, 128});  // a Qwen3-1.7B-like KV layout
  const std::vector<KvQuantSpec> q8(28, {8, 64}), q4(28, {4, 64});
  const size_t f32 = KvStorage::bytes_per_block(qwen3, 1, DType::kF32);
  const size_t bf16 = KvStorage::bytes_per_block(qwen3, 1, DType::kBF16);
  const size_t i8 = KvStorage::bytes_per_block(qwen3, 1, DType::kF32, q8);
  const size_t i4 = KvStorage::bytes_per_block(qwen3, 1, DType::kF32, q4);
  std::printf("[ kv bytes/token ] f32 %zu, bf16 %zu, int8 %zu (%.1f %% of f32), int4 %zu (%.1f %% of f32)\n", f32,
              bf16, i8, 100.0 * i8 / f32, i4, 100.0 * i4 / f32);
  EXPECT_EQ(i8, 28u * 2 * 8 * (128 + 2 * 2 * 4));  // codes + (scale, bias) f32 for 2 groups
  EXPECT_EQ(i4, 28u * 2 * 8 * (64 + 2 * 2 * 4));
  EXPECT_LT(2 * i8, f32);
  EXPECT_LT(i8, bf16);
  EXPECT_LT(i4, i8);
}

TEST(KvStorageQuant, ExternalMemoryMatchesOwning) {
  const std::vector<KvLayerShape> layers = {{2, 64}, {2, 64}};
  KvStorageOptions o;
  o.n_blocks = 3;
  o.block_size = 8;
  o.quant = {{4, 64}, {8, 32}};
  const size_t need = KvStorage::required_bytes(layers, o);
  Buffer mem(need, true);
  KvStorage ext(layers, o, mem.data(), need, Device::cpu());
  KvStorage own(layers, o);
  ASSERT_EQ(ext.layers().size(), own.layers().size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(ext.layers()[i].bits, own.layers()[i].bits);
    EXPECT_EQ(ext.layers()[i].group_size, own.layers()[i].group_size);
    EXPECT_EQ(ext.layers()[i].v_params.shape_str(), own.layers()[i].v_params.shape_str());
    EXPECT_LE(static_cast<char*>(ext.layers()[i].v_params.data) + ext.layers()[i].v_params.nbytes(),
              static_cast<char*>(mem.data()) + need);
  }
  EXPECT_EQ(ext.layers()[1].group_size, 32);
  EXPECT_EQ(ext.bytes(), own.bytes());
}

TEST(KvStorageQuant, RejectsBadSpecs) {
  KvStorageOptions o;
  o.n_blocks = 2;
  o.quant = {{3, 64}};
  EXPECT_THROW(KvStorage({{1, 64}}, o), Error);
  o.quant = {{8, 0}};
  EXPECT_THROW(KvStorage({{1, 64}}, o), Error);
  o.quant = {{4, 64}};
  EXPECT_THROW(KvStorage({{1, 7}}, o), Error);  // int4 needs whole bytes: group 7 (= head_dim) is odd
  EXPECT_EQ(kv_effective_group(96, 64), 96);
  EXPECT_EQ(kv_effective_group(256, 64), 64);
}

}  // namespace
}  // namespace bunsen::kv
