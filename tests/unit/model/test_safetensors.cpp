// Tests of the safetensors format layer: write -> map -> parse round trips for every dtype, and one
// rejection test per malformed-header rule (each message must name the file and the key fact).
// Not the WeightStore sharding tests (test_weight_store.cpp). Files are real, in a fresh scratch dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "../../support/scratch_dir.h"
#include "model/weights.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::expect_error;
using testutil::le64;
using testutil::st_image;
using testutil::write_bytes;

SafetensorsHeader parse_file(const std::string& path) {
  MappedFile f(path);
  return parse_safetensors_header(f.data(), f.size(), path);
}

template <typename T>
OwnedTensor make_tensor(DType dtype, std::initializer_list<int64_t> shape, const std::vector<T>& values) {
  OwnedTensor t = OwnedTensor::make(dtype, shape);
  EXPECT_EQ(t.tensor.nbytes(), values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.tensor.data, values.data(), values.size() * sizeof(T));
  return t;
}

TEST(SafetensorsFormat, RoundTripEveryDtype) {
  ScratchDir dir("bunsen_st");
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 1e-20f, -0.0f, 65504.0f};
  std::vector<uint16_t> f16, bf16;
  for (float v : {1.5f, -2.0f, 0.099975586f, 65504.0f}) f16.push_back(f32_to_f16(v));
  for (float v : {1.5f, -2.0f, 3.0e38f, 0.0078125f, -1.0f, 7.0f}) bf16.push_back(f32_to_bf16(v));
  const std::vector<int32_t> i32 = {-7, 2147483647, 0};
  const std::vector<int64_t> i64 = {-1, int64_t{1} << 40};
  const std::vector<uint8_t> u8 = {0, 255, 17};
  const std::vector<uint32_t> u32 = {0xffffffffu, 3, 9, 12};

  std::vector<OwnedTensor> owned;
  owned.push_back(make_tensor(DType::kF32, {2, 3}, f32));
  owned.push_back(make_tensor(DType::kF16, {4}, f16));
  owned.push_back(make_tensor(DType::kBF16, {3, 1, 2}, bf16));
  owned.push_back(make_tensor(DType::kI32, {3}, i32));
  owned.push_back(make_tensor(DType::kI64, {2}, i64));
  owned.push_back(make_tensor(DType::kU8, {3}, u8));
  owned.push_back(make_tensor(DType::kU32, {2, 2}, u32));
  owned.push_back(make_tensor(DType::kF32, {0, 5}, std::vector<float>{}));   // zero-size is legal
  owned.push_back(make_tensor(DType::kF32, {}, std::vector<float>{42.0f}));  // scalar
  const std::vector<std::string> names = {"z.f32", "f16", "m.bf16", "i32",   "i64",
                                          "u8",    "u32", "empty",  "scalar"};
  std::vector<std::pair<std::string, Tensor>> list;
  for (size_t i = 0; i < owned.size(); ++i) list.emplace_back(names[i], owned[i].tensor);

  const std::string path = dir.file("all.safetensors");
  write_safetensors(path, list, {{"format", "pt"}, {"note", "héllo"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  SafetensorsHeader h = parse_file(path);
  EXPECT_EQ(h.data_offset % 8, 0u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("note"), "héllo");
  ASSERT_EQ(h.tensors.size(), names.size());
  for (size_t i = 1; i < h.tensors.size(); ++i) EXPECT_EQ(h.tensors[i].begin, h.tensors[i - 1].end);

  WeightStore store = WeightStore::open_file(path);
  for (size_t i = 0; i < owned.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const Tensor& want = owned[i].tensor;
    Tensor got = store.get(names[i]);
    EXPECT_EQ(got.dtype, want.dtype);
    ASSERT_EQ(got.ndim, want.ndim);
    for (int d = 0; d < got.ndim; ++d) EXPECT_EQ(got.shape[d], want.shape[d]);
    ASSERT_EQ(got.nbytes(), want.nbytes());
    if (want.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(got.data, want.data, want.nbytes()), 0);
    }
    EXPECT_TRUE(got.device.is_cpu());
    EXPECT_EQ(store.source_of(names[i]), path);
  }
  // Decoded values, not just bytes: the bf16/f16 round trip keeps representable numbers exactly.
  EXPECT_EQ(bf16_to_f32(store.get("m.bf16").ptr<uint16_t>()[0]), 1.5f);
  EXPECT_EQ(bf16_to_f32(store.get("m.bf16").ptr<uint16_t>()[3]), 0.0078125f);
  EXPECT_EQ(f16_to_f32(store.get("f16").ptr<uint16_t>()[3]), 65504.0f);
  EXPECT_EQ(store.get("i64").ptr<int64_t>()[1], int64_t{1} << 40);
  EXPECT_EQ(store.get("scalar", {}).ptr<float>()[0], 42.0f);
  EXPECT_EQ(store.get("empty", {0, 5}).numel(), 0);

  size_t want_total = 0;
  for (const auto& t : owned) want_total += t.tensor.nbytes();
  EXPECT_EQ(store.total_bytes(), want_total);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(store.names(), sorted);
}

TEST(SafetensorsFormat, HeaderKeysKeepInsertionOrderAndPadding) {
  ScratchDir dir("bunsen_st");
  OwnedTensor a = OwnedTensor::make(DType::kU8, {3});
  OwnedTensor b = OwnedTensor::make(DType::kU8, {1});
  const std::string path = dir.file("order.safetensors");
  write_safetensors(path, {{"zzz", a.tensor}, {"aaa", b.tensor}, {"mmm", a.tensor}});
  MappedFile f(path);
  uint64_t len = 0;
  std::memcpy(&len, f.data(), 8);
  EXPECT_EQ(len % 8, 0u);
  std::string header(reinterpret_cast<const char*>(f.data()) + 8, len);
  EXPECT_LT(header.find("\"zzz\""), header.find("\"aaa\""));
  EXPECT_LT(header.find("\"aaa\""), header.find("\"mmm\""));
  EXPECT_EQ(f.size(), 8 + len + 7);
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);  // omitted when empty
}

TEST(SafetensorsFormat, WriteRejectsDuplicateAndNonContiguous) {
  ScratchDir dir("bunsen_st");
  OwnedTensor a = OwnedTensor::make(DType::kF32, {4, 4});
  const std::string path = dir.file("bad.safetensors");
  expect_error(
      [&] {
        write_safetensors(path, {{"x", a.tensor}, {"x", a.tensor}});
      },
      {path, "'x'", "duplicate"});
  expect_error(
      [&] {
        write_safetensors(path, {{"col", a.tensor.slice(1, 0, 2)}});
      },
      {"'col'", "not contiguous"});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsFormat, MappedFileEmptyAndMissing) {
  ScratchDir dir("bunsen_st");
  write_bytes(dir.file("empty"), "");
  MappedFile empty(dir.file("empty"));
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  expect_error([&] { MappedFile m(dir.file("nope")); }, {dir.file("nope"), "No such file"});
  expect_error([&] { MappedFile m(dir.path()); }, {dir.path(), "not a regular file"});
}

TEST(SafetensorsFormat, EmptyHeaderAndZeroSizeOnly) {
  ScratchDir dir("bunsen_st");
  write_bytes(dir.file("none.st"), st_image("{}", 0));
  EXPECT_TRUE(parse_file(dir.file("none.st")).tensors.empty());
  write_bytes(dir.file("zero.st"), st_image(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                            R"("f":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                                            2));
  SafetensorsHeader h = parse_file(dir.file("zero.st"));
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "e");
  EXPECT_EQ(h.tensors[1].end, 2u);
}

TEST(SafetensorsMalformed, TruncatedDataSection) {
  ScratchDir dir("bunsen_st");
  OwnedTensor a = OwnedTensor::make(DType::kF32, {8});
  const std::string path = dir.file("trunc.safetensors");
  write_safetensors(path, {{"w", a.tensor}});
  const uint64_t full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full - 1);
  expect_error([&] { WeightStore::open_file(path); }, {path, "truncated", "'w'"});
  std::filesystem::resize_file(path, full - 32);  // exactly the header, no data at all
  expect_error([&] { WeightStore::open_file(path); }, {path, "truncated", "'w'"});
}

struct MalformedCase {
  const char* label;
  std::string image;  // whole file contents
  std::vector<std::string> facts;
};
void PrintTo(const MalformedCase& c, std::ostream* os) {
  *os << c.label;
}

std::string entry(const char* name, const char* dtype, const char* shape, const char* offsets) {
  return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::vector<MalformedCase> malformed_cases() {
  const std::string ok_a = entry("a", "F32", "[2]", "[0,8]");
  return {
      {"short_file", std::string("\x05\x00\x00", 3), {"shorter than the 8-byte"}},
      {"zero_header", le64(0) + "{}", {"header length is 0"}},
      {"header_past_eof", le64(1000) + "{}", {"header length 1000", "past the end"}},
      {"header_over_100mb", le64(kMaxSafetensorsHeaderBytes + 1) + "{}", {"100000001", "limit"}},
      {"invalid_utf8", st_image("{\"a\xff\":{}}", 0), {"not valid UTF-8"}},
      {"overlong_utf8", st_image("{\"a\xc0\xaf\":{}}", 0), {"not valid UTF-8"}},
      {"invalid_json", st_image("{\"a\": ", 0), {"not valid JSON"}},
      {"not_object", st_image("[1,2]", 0), {"not a JSON object"}},
      {"entry_not_object", st_image("{\"a\":3}", 0), {"'a'", "not an object"}},
      {"unknown_dtype",
       st_image("{" + entry("w", "F64", "[1]", "[0,8]") + "}", 8),
       {"'w'", "unsupported dtype 'F64'"}},
      {"bool_dtype",
       st_image("{" + entry("w", "BOOL", "[1]", "[0,1]") + "}", 1),
       {"'w'", "unsupported dtype 'BOOL'"}},
      {"size_mismatch",
       st_image("{" + entry("w", "F32", "[2]", "[0,4]") + "}", 4),
       {"'w'", "needs 8 bytes", "span 4"}},
      {"overflow_shape",
       st_image("{" + entry("w", "F32", "[1099511627776,1099511627776]", "[0,8]") + "}", 8),
       {"'w'", "overflows"}},
      {"negative_dim", st_image("{" + entry("w", "U8", "[-1]", "[0,0]") + "}", 0), {"'w'", "non-negative"}},
      {"fractional_dim",
       st_image("{" + entry("w", "U8", "[1.5]", "[0,1]") + "}", 1),
       {"'w'", "non-negative"}},
      {"too_many_dims",
       st_image("{" + entry("w", "U8", "[1,1,1,1,1,1,1]", "[0,1]") + "}", 1),
       {"'w'", "7 dims"}},
      {"bad_offsets", st_image("{" + entry("w", "U8", "[1]", "[0]") + "}", 1), {"'w'", "data_offsets"}},
      {"reversed_offsets",
       st_image("{" + entry("w", "U8", "[0]", "[4,0]") + "}", 0),
       {"'w'", "begin 4 > end 0"}},
      {"missing_dtype", st_image("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1), {"'w'", "dtype"}},
      {"gap",
       st_image("{" + ok_a + "," + entry("b", "F32", "[1]", "[12,16]") + "}", 16),
       {"gap", "'a'", "'b'"}},
      {"first_not_zero",
       st_image("{" + entry("b", "F32", "[1]", "[4,8]") + "}", 8),
       {"gap", "'b'", "expected 0"}},
      {"overlap",
       st_image("{" + ok_a + "," + entry("b", "F32", "[2]", "[4,12]") + "}", 12),
       {"overlaps", "'a'", "'b'"}},
      {"same_offsets", st_image("{" + ok_a + "," + entry("b", "F32", "[2]", "[0,8]") + "}", 8), {"overlaps"}},
      {"duplicate_name",
       st_image("{" + ok_a + "," + entry("a", "F32", "[2]", "[8,16]") + "}", 16),
       {"duplicate tensor name 'a'"}},
      {"duplicate_inner_key",
       st_image("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],"
                "\"data_offsets\":[0,1]}}",
                1),
       {"duplicate key 'dtype'"}},
      {"deep_nesting",
       st_image("{\"a\":" + std::string(40, '[') + std::string(40, ']') + "}", 0),
       {"nests deeper"}},
      {"trailing_bytes", st_image("{" + ok_a + "}", 12), {"4 trailing bytes"}},
      {"metadata_not_strings", st_image("{\"__metadata__\":{\"k\":1}}", 0), {"__metadata__", "'k'"}},
      {"metadata_not_object", st_image("{\"__metadata__\":[]}", 0), {"__metadata__", "not an object"}},
  };
}

class SafetensorsMalformedTest : public testing::TestWithParam<MalformedCase> {};

TEST_P(SafetensorsMalformedTest, RejectedWithFileAndFact) {
  ScratchDir dir("bunsen_st");
  const std::string path = dir.file(std::string(GetParam().label) + ".safetensors");
  write_bytes(path, GetParam().image);
  expect_error([&] { WeightStore::open_file(path); }, {"safetensors: " + path + ": "});
  for (const auto& fact : GetParam().facts) expect_error([&] { WeightStore::open_file(path); }, {fact});
  // The in-memory parser gives the same verdict on the same bytes.
  const auto* bytes = reinterpret_cast<const uint8_t*>(GetParam().image.data());
  expect_error([&] { parse_safetensors_header(bytes, GetParam().image.size(), "mem"); }, {"mem: "});
}

INSTANTIATE_TEST_SUITE_P(Cases, SafetensorsMalformedTest, testing::ValuesIn(malformed_cases()),
                         [](const testing::TestParamInfo<MalformedCase>& info) { return info.param.label; });

}  // namespace
}  // namespace bunsen::model
