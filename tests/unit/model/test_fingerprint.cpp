// Tests of the weights / tokenizer fingerprints that go into the prefix-cache namespace: equal for the same
// content wherever it lives (another directory, another shard split), different when any tensor's data,
// name, dtype or shape, config.json or a tokenizer file differs. Real files in a scratch directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "../../support/scratch_dir.h"
#include "model/fingerprint.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::write_bytes;

OwnedTensor iota_f32(std::initializer_list<int64_t> shape, float start) {
  OwnedTensor t = OwnedTensor::make(DType::kF32, shape);
  std::iota(t.tensor.ptr<float>(), t.tensor.ptr<float>() + t.tensor.numel(), start);
  return t;
}

// Writes config.json + model.safetensors with a [64, 33] tensor "w" (its element `poke` set to 7) and "b".
void write_checkpoint(const std::string& dir, int64_t poke = -1, const std::string& wname = "w",
                      const std::string& config = "{\"model_type\":\"llama\"}") {
  OwnedTensor w = iota_f32({64, 33}, 0.0f), b = iota_f32({5}, 1.0f);
  if (poke >= 0) w.tensor.ptr<float>()[poke] = 7.0f;
  write_safetensors(dir + "/model.safetensors", {{wname, w.tensor}, {"b", b.tensor}});
  write_bytes(dir + "/config.json", config);
}

TEST(Fingerprint, SameContentSameValueAnywhere) {
  ScratchDir a("bunsen_st"), b("bunsen_st");
  write_checkpoint(a.path());
  write_checkpoint(b.path());
  EXPECT_EQ(checkpoint_fingerprint(a.path()), checkpoint_fingerprint(b.path()));
}

TEST(Fingerprint, AnySampledChangeChangesIt) {
  ScratchDir base("bunsen_st");
  write_checkpoint(base.path());
  const uint64_t f0 = checkpoint_fingerprint(base.path());
  const int64_t n = 64 * 33;
  for (int64_t poke : {int64_t{0}, n / 2, n - 1}) {  // first element, the middle window, the last element
    ScratchDir d("bunsen_st");
    write_checkpoint(d.path(), poke);
    EXPECT_NE(checkpoint_fingerprint(d.path()), f0) << "element " << poke;
  }
  ScratchDir renamed("bunsen_st"), config("bunsen_st");
  write_checkpoint(renamed.path(), -1, "w2");
  write_checkpoint(config.path(), -1, "w", "{\"model_type\":\"llama\",\"rms_norm_eps\":1e-5}");
  EXPECT_NE(checkpoint_fingerprint(renamed.path()), f0);
  EXPECT_NE(checkpoint_fingerprint(config.path()), f0);
}

TEST(Fingerprint, ShapeAndDtypeCount) {
  WeightStore s1, s2, s3;
  OwnedTensor a = iota_f32({4, 6}, 0.0f), b = iota_f32({6, 4}, 0.0f);
  s1.add("x", std::move(a));
  s2.add("x", std::move(b));  // same bytes, other shape
  OwnedTensor c = OwnedTensor::make(DType::kI32, {4, 6});
  std::memcpy(c.tensor.data, s1.get("x").data, c.tensor.nbytes());
  s3.add("x", std::move(c));  // same bytes, other dtype
  EXPECT_NE(weights_fingerprint(s1), weights_fingerprint(s2));
  EXPECT_NE(weights_fingerprint(s1), weights_fingerprint(s3));
}

TEST(Fingerprint, TokenizerFiles) {
  ScratchDir a("bunsen_st"), b("bunsen_st");
  write_bytes(a.file("tokenizer.json"), "{\"model\":{}}");
  write_bytes(b.file("tokenizer.json"), "{\"model\":{}}");
  EXPECT_EQ(tokenizer_fingerprint(a.path()), tokenizer_fingerprint(b.path()));
  write_bytes(b.file("tokenizer_config.json"), "{\"bos_token\":\"<s>\"}");
  EXPECT_NE(tokenizer_fingerprint(a.path()), tokenizer_fingerprint(b.path()));
}

}  // namespace
}  // namespace bunsen::model
