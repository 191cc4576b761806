// Reading a golden fixture (tests/golden/data/<name>/): config.json, golden.safetensors (HF outputs) and
// its metadata, and rebuilding the exact weights HF ran on from the shared synthetic generator as a real
// checkpoint. Shared by test_golden (CPU) and test_cuda (the same fixtures on the GPU).
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/weights.h"

namespace bunsen::golden {

struct Fixture {
  std::string name;
  std::string dir;  // tests/golden/data/<name>
  std::unique_ptr<model::WeightStore> outputs;  // golden.safetensors
  std::map<std::string, std::string> metadata;
  nlohmann::json weights;  // {name: {"shape": [...], "fnv1a64": "hex"}}
  uint64_t seed = 0;
};

std::string data_dir();
// Fixture names (directories of data_dir() holding golden.safetensors), sorted.
// Fixtures whose family this build supports (model_type in model::supported_model_types()); fixtures of
// families still being written are listed by all_fixture_names() and reported by GoldenData tests.
std::vector<std::string> fixture_names();
std::vector<std::string> all_fixture_names();
std::string fixture_model_type(const std::string& name);
Fixture load_fixture(const std::string& name);
// Writes the fixture's weights (regenerated in `dtype`) + config.json into a fresh directory under the
// test temp dir named "<tag>_<fixture>_<dtype>" (distinct tags keep test binaries that run at the same
// time apart) and returns it; EXPECTs that every regenerated bf16 tensor hashes to HF's FNV-1a value.
std::string build_checkpoint(const Fixture& f, DType dtype, const std::string& tag = "golden");
std::vector<float> to_f32(const Tensor& t);
std::vector<int32_t> to_i32(const Tensor& t);
// max |a - b| / max |b|.
double rel_err(const float* a, const float* b, size_t n);

}  // namespace bunsen::golden
