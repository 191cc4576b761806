// SafetensorsWriter / save_safetensors: files read back through the project's own parser and WeightStore
// bit for bit (bf16/f16/f32/u32, empty and 1-element tensors), the 8-byte aligned header with mlx-lm's
// {"format": "mlx"} metadata, streamed writes in pieces, and misuse (wrong order, wrong size, unfinished
// file, duplicate names) failing with nothing left on disk.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;
using testutil::expect_error;

// A tensor whose bytes are a position-dependent pattern (any dtype: raw bytes).
OwnedTensor patterned(DType dt, std::initializer_list<int64_t> shape, uint8_t salt) {
  OwnedTensor t = OwnedTensor::make(dt, shape);
  auto* p = static_cast<uint8_t*>(t.tensor.data);
  for (size_t i = 0; i < t.tensor.nbytes(); ++i) p[i] = static_cast<uint8_t>(i * 31 + salt);
  return t;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t header_len(const std::string& bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

TEST(SafetensorsWriter, RoundTripsEveryDtypeAndEdgeShape) {
  ScratchDir dir("bunsen_st");
  std::vector<std::pair<std::string, OwnedTensor>> src;
  src.emplace_back("a.bf16", patterned(DType::kBF16, {3, 5}, 1));
  src.emplace_back("b.f16", patterned(DType::kF16, {7}, 2));
  src.emplace_back("c.f32", patterned(DType::kF32, {2, 3, 4}, 3));
  src.emplace_back("d.u32", patterned(DType::kU32, {4, 9}, 4));
  src.emplace_back("e.empty", patterned(DType::kBF16, {0, 64}, 5));
  src.emplace_back("f.one", patterned(DType::kF32, {1}, 6));
  src.emplace_back("g.empty_u32", patterned(DType::kU32, {5, 0}, 7));
  std::vector<std::pair<std::string, Tensor>> views;
  for (auto& [n, t] : src) views.emplace_back(n, t.tensor);
  const std::string path = dir.file("rt.safetensors");
  save_safetensors(path, views);

  WeightStore ws = WeightStore::open_file(path);
  EXPECT_EQ(ws.names().size(), src.size());
  for (const auto& [name, owned] : src) {
    ASSERT_TRUE(ws.has(name)) << name;
    const Tensor got = ws.get(name);
    EXPECT_EQ(got.dtype, owned.tensor.dtype) << name;
    ASSERT_EQ(got.ndim, owned.tensor.ndim) << name;
    for (int d = 0; d < got.ndim; ++d) EXPECT_EQ(got.shape[d], owned.tensor.shape[d]) << name;
    ASSERT_EQ(got.nbytes(), owned.tensor.nbytes()) << name;
    if (got.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(got.data, owned.tensor.data, got.nbytes()), 0) << name;
    }
  }
  MappedFile f(path);
  const SafetensorsHeader h = parse_safetensors_header(f.data(), f.size(), path);
  EXPECT_EQ(h.metadata.at("format"), "mlx");
  EXPECT_EQ(h.metadata.size(), 1u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsWriter, HeaderIsPaddedToEightBytes) {
  ScratchDir dir("bunsen_st");
  OwnedTensor t = patterned(DType::kF16, {3}, 9);
  for (int len = 1; len <= 12; ++len) {  // every residue of the header length mod 8
    const std::string name(static_cast<size_t>(len), 'w');
    const std::string path = dir.file("pad" + std::to_string(len) + ".safetensors");
    save_safetensors(path, {{name, t.tensor}});
    const std::string bytes = read_all(path);
    const uint64_t hl = header_len(bytes);
    EXPECT_EQ(hl % 8, 0u) << len;
    EXPECT_EQ(bytes.size(), 8 + hl + t.tensor.nbytes()) << len;
    const std::string header = bytes.substr(8, hl);
    const size_t close = header.rfind('}');
    ASSERT_NE(close, std::string::npos);
    EXPECT_LT(hl - 1 - close, 8u);  // at most 7 padding bytes
    for (size_t i = close + 1; i < header.size(); ++i) EXPECT_EQ(header[i], ' ');
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + hl, t.tensor.data, t.tensor.nbytes()), 0);
    EXPECT_EQ(safetensors_header({{name, DType::kF16, {3}}}, mlx_metadata(), path), header);
  }
}

TEST(SafetensorsWriter, StreamsATensorInPieces) {
  ScratchDir dir("bunsen_st");
  OwnedTensor big = patterned(DType::kU32, {6, 10}, 11);
  OwnedTensor small = patterned(DType::kBF16, {6, 2}, 12);
  const std::string path = dir.file("parts.safetensors");
  {
    SafetensorsWriter w(path, {{"w", DType::kU32, {6, 10}}, {"z", DType::kBF16, {0}}, {"s", DType::kBF16, {6, 2}}},
                        {{"format", "mlx"}, {"note", "x"}});
    EXPECT_EQ(w.data_bytes(), big.tensor.nbytes() + small.tensor.nbytes());
    const auto* p = static_cast<const uint8_t*>(big.tensor.data);
    w.write_part("w", p, 40);  // two rows
    w.write_part("w", p + 40, 0);
    w.write_part("w", p + 40, big.tensor.nbytes() - 40);
    w.write("s", small.tensor);  // the zero-byte "z" needs no write
    EXPECT_FALSE(fs::exists(path));  // nothing visible before finish()
    w.finish();
  }
  WeightStore ws = WeightStore::open_file(path);
  EXPECT_EQ(std::memcmp(ws.get("w", {6, 10}).data, big.tensor.data, big.tensor.nbytes()), 0);
  EXPECT_EQ(std::memcmp(ws.get("s", {6, 2}).data, small.tensor.data, small.tensor.nbytes()), 0);
  EXPECT_EQ(ws.get("z").numel(), 0);
  MappedFile f(path);
  EXPECT_EQ(parse_safetensors_header(f.data(), f.size(), path).metadata.at("note"), "x");
}

TEST(SafetensorsWriter, MisuseFailsAndLeavesNoFile) {
  ScratchDir dir("bunsen_st");
  OwnedTensor a = patterned(DType::kF32, {4}, 1);
  const std::string path = dir.file("bad.safetensors");
  {
    SafetensorsWriter w(path, {{"a", DType::kF32, {4}}, {"b", DType::kF32, {4}}});
    expect_error([&] { w.write("b", a.tensor); }, {"bad.safetensors", "'b'", "'a' is next"});
    expect_error([&] { w.write("a", a.tensor.data, 12); }, {"'a'", "12 bytes", "16"});
    OwnedTensor wrong = patterned(DType::kF16, {8}, 2);  // same bytes, other dtype
    expect_error([&] { w.write("a", wrong.tensor); }, {"'a'", "declared [4] f32"});
    w.write("a", a.tensor);
    expect_error([&] { w.finish(); }, {"finish()", "'b'"});
  }  // destroyed unfinished
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  expect_error([&] { save_safetensors(path, {{"a", a.tensor}, {"a", a.tensor}}); }, {"duplicate", "'a'"});
  expect_error([&] { save_safetensors(path, {{"__metadata__", a.tensor}}); }, {"reserved"});
  expect_error([&] { SafetensorsWriter w(path, {{"n", DType::kF32, {-1}}}); }, {"'n'", "negative"});
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsWriter, DeclBytes) {
  EXPECT_EQ(decl_bytes({"x", DType::kBF16, {3, 5}}), 30u);
  EXPECT_EQ(decl_bytes({"x", DType::kU32, {}}), 4u);  // a scalar holds one element
  EXPECT_EQ(decl_bytes({"x", DType::kF32, {0, 7}}), 0u);
  expect_error([] { decl_bytes({"huge", DType::kF32, {int64_t{1} << 62, 8}}); }, {"'huge'", "overflows"});
}

}  // namespace
}  // namespace bunsen::model
