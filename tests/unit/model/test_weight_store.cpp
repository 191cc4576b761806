// Tests of WeightStore: single-file and sharded (HF index) snapshots, lookups with shape checks, in-memory
// tensors, and the errors for missing tensors, wrong shapes, and inconsistent indexes/shards.
// Not the header-validation tests (test_safetensors.cpp). Files are real, in a fresh scratch dir.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "../../support/scratch_dir.h"
#include "model/weights.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::expect_error;
using testutil::write_bytes;

OwnedTensor iota_f32(std::initializer_list<int64_t> shape, float start) {
  OwnedTensor t = OwnedTensor::make(DType::kF32, shape);
  std::iota(t.tensor.ptr<float>(), t.tensor.ptr<float>() + t.tensor.numel(), start);
  return t;
}

// Two shards: shard 1 holds a [2, 3] and b [4]; shard 2 holds c [3, 2] (bf16).
struct ShardedSnapshot {
  ScratchDir dir{"bunsen_st"};
  OwnedTensor a = iota_f32({2, 3}, 0.0f);
  OwnedTensor b = iota_f32({4}, 100.0f);
  OwnedTensor c = OwnedTensor::make(DType::kBF16, {3, 2});
  std::string shard1 = "model-00001-of-00002.safetensors";
  std::string shard2 = "model-00002-of-00002.safetensors";

  ShardedSnapshot() {
    for (int i = 0; i < 6; ++i) c.tensor.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>(i) - 2.5f);
    write_safetensors(dir.file(shard1), {{"a", a.tensor}, {"b", b.tensor}}, {{"format", "pt"}});
    write_safetensors(dir.file(shard2), {{"c", c.tensor}});
  }
  void write_index(const std::string& weight_map_json) {
    write_bytes(dir.file("model.safetensors.index.json"),
                "{\"metadata\":{\"total_size\":64},\"weight_map\":" + weight_map_json + "}");
  }
  void write_good_index() {
    write_index("{\"a\":\"" + shard1 + "\",\"b\":\"" + shard1 + "\",\"c\":\"" + shard2 + "\"}");
  }
};

TEST(SafetensorsStore, ShardedRoundTrip) {
  ShardedSnapshot snap;
  snap.write_good_index();
  WeightStore store = WeightStore::open(snap.dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b", "c"}));
  Tensor a = store.get("a", {2, 3});
  EXPECT_EQ(a.ptr<float>()[5], 5.0f);
  EXPECT_EQ(store.get("b", {4}).ptr<float>()[3], 103.0f);
  Tensor c = store.get("c", {3, 2});
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(bf16_to_f32(c.ptr<uint16_t>()[0]), -2.5f);
  EXPECT_EQ(bf16_to_f32(c.ptr<uint16_t>()[5]), 2.5f);
  EXPECT_EQ(store.source_of("a"), snap.dir.file(snap.shard1));
  EXPECT_EQ(store.source_of("c"), snap.dir.file(snap.shard2));
  EXPECT_EQ(store.total_bytes(), 6 * 4 + 4 * 4 + 6 * 2u);

  // Views stay valid after the store is moved.
  WeightStore moved = std::move(store);
  EXPECT_EQ(moved.get("a").data, a.data);
  EXPECT_EQ(moved.get("a").ptr<float>()[4], 4.0f);
}

TEST(SafetensorsStore, SingleFileDirectory) {
  ScratchDir dir("bunsen_st");
  OwnedTensor w = iota_f32({3}, 1.0f);
  write_safetensors(dir.file("model.safetensors"), {{"w", w.tensor}});
  WeightStore store = WeightStore::open(dir.path());
  EXPECT_TRUE(store.has("w"));
  EXPECT_FALSE(store.has("x"));
  EXPECT_EQ(store.get("w", {3}).ptr<float>()[2], 3.0f);
  EXPECT_EQ(store.source_of("w"), dir.file("model.safetensors"));
  expect_error([&] { store.get("x"); }, {"weights: ", "missing tensor 'x'", dir.path()});
}

TEST(SafetensorsStore, EmptyDirectory) {
  ScratchDir dir("bunsen_st");
  expect_error([&] { WeightStore::open(dir.path()); },
               {"no model.safetensors or model.safetensors.index.json in " + dir.str()});
}

TEST(SafetensorsStore, MissingTensorNamesFile) {
  ScratchDir dir("bunsen_st");
  OwnedTensor w = iota_f32({3}, 1.0f);
  const std::string path = dir.file("one.safetensors");
  write_safetensors(path, {{"w", w.tensor}});
  WeightStore store = WeightStore::open_file(path);
  expect_error([&] { store.get("model.layers.0.q_proj.weight"); },
               {"missing tensor 'model.layers.0.q_proj.weight'", path});
  expect_error([&] { store.source_of("nope"); }, {"missing tensor 'nope'"});
}

TEST(SafetensorsStore, WrongShapeNamesFileAndBothShapes) {
  ShardedSnapshot snap;
  snap.write_good_index();
  WeightStore store = WeightStore::open(snap.dir.path());
  expect_error(
      [&] {
        store.get("a", {3, 2});
      },
      {"tensor 'a' in " + snap.dir.file(snap.shard1) + " has shape [2, 3], expected [3, 2]"});
  expect_error([&] { store.get("b", {4, 1}); }, {"has shape [4], expected [4, 1]"});
}

TEST(SafetensorsStore, IndexReferencesMissingShard) {
  ShardedSnapshot snap;
  snap.write_index("{\"a\":\"" + snap.shard1 + "\",\"z\":\"model-00003-of-00003.safetensors\"}");
  expect_error([&] { WeightStore::open(snap.dir.path()); },
               {"model.safetensors.index.json", "model-00003-of-00003.safetensors", "does not exist"});
}

TEST(SafetensorsStore, IndexTensorMissingFromItsShard) {
  ShardedSnapshot snap;
  // "c" really lives in shard 2; the index claims shard 1.
  snap.write_index("{\"a\":\"" + snap.shard1 + "\",\"c\":\"" + snap.shard1 + "\",\"b\":\"" + snap.shard1 +
                   "\"}");
  expect_error([&] { WeightStore::open(snap.dir.path()); },
               {"tensor 'c'", "missing from its shard", snap.shard1});
  snap.write_index("{\"a\":\"" + snap.shard1 + "\",\"ghost\":\"" + snap.shard2 + "\"}");
  expect_error([&] { WeightStore::open(snap.dir.path()); }, {"tensor 'ghost'", snap.shard2});
}

TEST(SafetensorsStore, TensorInTwoShards) {
  ShardedSnapshot snap;
  OwnedTensor again = iota_f32({2}, 0.0f);
  write_safetensors(snap.dir.file(snap.shard2), {{"c", snap.c.tensor}, {"a", again.tensor}});
  snap.write_good_index();
  expect_error([&] { WeightStore::open(snap.dir.path()); },
               {"tensor 'a'", "two shards", snap.shard1, snap.shard2});
}

TEST(SafetensorsStore, BadIndexFiles) {
  ShardedSnapshot snap;
  write_bytes(snap.dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
  expect_error([&] { WeightStore::open(snap.dir.path()); },
               {"model.safetensors.index.json", "not valid JSON"});
  snap.write_index("[]");
  expect_error([&] { WeightStore::open(snap.dir.path()); }, {"weight_map"});
  snap.write_index("{\"a\":\"../" + snap.shard1 + "\"}");
  expect_error([&] { WeightStore::open(snap.dir.path()); }, {"not a relative path inside"});
  snap.write_index("{}");
  expect_error([&] { WeightStore::open(snap.dir.path()); }, {"weight_map is empty"});
}

TEST(SafetensorsStore, CorruptShardNamesShard) {
  ShardedSnapshot snap;
  snap.write_good_index();
  std::filesystem::resize_file(snap.dir.file(snap.shard2),
                               std::filesystem::file_size(snap.dir.file(snap.shard2)) - 2);
  expect_error([&] { WeightStore::open(snap.dir.path()); }, {snap.shard2, "truncated", "'c'"});
}

TEST(SafetensorsStore, InMemoryAddReplaceKeepsOldViews) {
  WeightStore store;
  OwnedTensor first = iota_f32({2}, 5.0f);
  store.add("x", std::move(first));
  Tensor old_view = store.get("x", {2});
  store.add("x", iota_f32({3}, 7.0f));
  EXPECT_EQ(store.get("x", {3}).ptr<float>()[2], 9.0f);
  EXPECT_EQ(old_view.ptr<float>()[1], 6.0f);  // earlier view still readable
  EXPECT_EQ(store.source_of("x"), "<in-memory>");
  EXPECT_EQ(store.names(), std::vector<std::string>{"x"});
  EXPECT_EQ(store.total_bytes(), 12u);
  expect_error([&] { store.get("y"); }, {"missing tensor 'y'"});
}

}  // namespace
}  // namespace bunsen::model
