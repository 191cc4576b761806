// Tests for KvStorage: view shapes/dtypes, byte accounting, zero init, that no two views overlap, and views
// over caller-owned (device) memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/status.h"
#include "kv/kv_storage.h"

using bunsen::DType;
using bunsen::Error;
using bunsen::Tensor;
using bunsen::kv::KvLayerShape;
using bunsen::kv::KvStorage;
using bunsen::kv::KvStorageOptions;

TEST(KvStorage, ShapesAndBytes) {
  std::vector<KvLayerShape> layers = {{2, 8}, {4, 16}, {1, 3}};
  KvStorageOptions o;
  o.n_blocks = 5;
  o.block_size = 16;
  o.dtype = DType::kBF16;
  KvStorage kv(layers, o);
  ASSERT_EQ(kv.layers().size(), 3u);
  EXPECT_EQ(kv.n_blocks(), 5);
  EXPECT_EQ(kv.block_size(), 16);
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const Tensor* t : {&kv.layers()[i].k, &kv.layers()[i].v}) {
      ASSERT_EQ(t->ndim, 4);
      EXPECT_EQ(t->dim(0), 5);
      EXPECT_EQ(t->dim(1), 16);
      EXPECT_EQ(t->dim(2), layers[i].n_kv_heads);
      EXPECT_EQ(t->dim(3), layers[i].head_dim);
      EXPECT_EQ(t->dtype, DType::kBF16);
      EXPECT_TRUE(t->is_contiguous());
      EXPECT_TRUE(t->device.is_cpu());
    }
  }
  size_t expect = 2u * 5 * 16 * (2 * 8 + 4 * 16 + 1 * 3) * 2;  // K+V, bf16
  EXPECT_EQ(kv.bytes(), expect);
  EXPECT_EQ(KvStorage::bytes_per_block(layers, 16, DType::kBF16) * 5, expect);
  EXPECT_EQ(KvStorage::bytes_per_block(layers, 16, DType::kF32), 2u * 16 * (16 + 64 + 3) * 4);
}

TEST(KvStorage, ViewsDoNotOverlapAndStartZeroed) {
  std::vector<KvLayerShape> layers = {{2, 4}, {2, 4}, {3, 5}, {1, 1}};
  KvStorageOptions o;
  o.n_blocks = 3;
  o.block_size = 4;
  KvStorage kv(layers, o);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const auto& l : kv.layers()) {
    for (const Tensor* t : {&l.k, &l.v}) {
      auto begin = reinterpret_cast<uintptr_t>(t->data);
      ranges.emplace_back(begin, begin + t->nbytes());
      const float* p = t->ptr<float>();
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(p[i], 0.0f);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "overlap at " << i;
  // Writing the last element of one view must not change any other view.
  float* last_k0 = kv.layers()[0].k.ptr<float>() + kv.layers()[0].k.numel() - 1;
  *last_k0 = 1.0f;
  EXPECT_EQ(kv.layers()[0].v.ptr<float>()[0], 0.0f);
  EXPECT_EQ(kv.layers()[1].k.ptr<float>()[0], 0.0f);
}

TEST(KvStorage, RejectsBadOptions) {
  KvStorageOptions o;
  o.n_blocks = 0;
  EXPECT_THROW(KvStorage({{1, 1}}, o), Error);
  o.n_blocks = 2;
  o.block_size = 0;
  EXPECT_THROW(KvStorage({{1, 1}}, o), Error);
  o.block_size = 16;
  o.dtype = DType::kI32;
  EXPECT_THROW(KvStorage({{1, 1}}, o), Error);
  o.dtype = DType::kF32;
  EXPECT_THROW(KvStorage({{0, 8}}, o), Error);
}

TEST(KvStorage, ExternalMemoryViewsStayInsideTheRegionAndCarryTheDevice) {
  std::vector<KvLayerShape> layers = {{2, 4}, {3, 5}, {1, 1}};
  KvStorageOptions o;
  o.n_blocks = 3;
  o.block_size = 4;
  o.dtype = DType::kBF16;
  const size_t need = KvStorage::required_bytes(layers, o);
  EXPECT_GE(need, KvStorage::bytes_per_block(layers, 4, DType::kBF16) * 3);
  bunsen::Buffer region(need + 64);
  // A device tag only: the views are never dereferenced here, so a host region stands in for device memory.
  const bunsen::Device dev = bunsen::Device::cuda(1);
  KvStorage kv(layers, o, region.data(), need, dev);
  EXPECT_EQ(kv.bytes(), KvStorage::bytes_per_block(layers, 4, DType::kBF16) * 3);
  const auto lo = reinterpret_cast<uintptr_t>(region.data());
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const auto& l : kv.layers())
    for (const Tensor* t : {&l.k, &l.v}) {
      EXPECT_EQ(t->device, dev);
      EXPECT_EQ(t->dtype, DType::kBF16);
      const auto begin = reinterpret_cast<uintptr_t>(t->data);
      EXPECT_EQ((begin - lo) % bunsen::kAlignment, 0u);
      ranges.emplace_back(begin, begin + t->nbytes());
    }
  std::sort(ranges.begin(), ranges.end());
  EXPECT_GE(ranges.front().first, lo);
  EXPECT_LE(ranges.back().second, lo + need);
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "overlap at " << i;
  // Too little memory, or none, is an error naming both sizes.
  try {
    KvStorage small(layers, o, region.data(), need - 1, dev);
    ADD_FAILURE() << "a region one byte short was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(need)), std::string::npos) << e.what();
  }
  EXPECT_THROW(KvStorage(layers, o, nullptr, need, dev), Error);
}
