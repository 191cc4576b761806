// Reading a golden fixture (tests/golden/data/<name>/): config.json, golden.safetensors (HF outputs) and
// its metadata, and rebuilding the exact weights HF ran on from the shared synthetic generator.
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
Fixture load_fixture(const std::string& name);
std::vector<float> to_f32(const Tensor& t);
std::vector<int32_t> to_i32(const Tensor& t);
// max |a - b| / max |b|.
double rel_err(const float* a, const float* b, size_t n);

}  // namespace bunsen::golden
