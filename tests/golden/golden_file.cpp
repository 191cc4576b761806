// Fixture loading and checkpoint rebuilding for the golden tests.
#include "golden_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../support/remove_at_exit.h"
#include "core/status.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::golden {

namespace fs = std::filesystem;

std::string data_dir() { return std::string(BUNSEN_SOURCE_DIR) + "/tests/golden/data"; }

std::vector<std::string> all_fixture_names() {
  std::vector<std::string> out;
  if (!fs::exists(data_dir())) return out;
  for (const auto& e : fs::directory_iterator(data_dir()))
    if (fs::exists(e.path() / "golden.safetensors")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string fixture_model_type(const std::string& name) {
  std::ifstream in(data_dir() + "/" + name + "/config.json");
  return nlohmann::json::parse(in).at("model_type").get<std::string>();
}

std::vector<std::string> fixture_names() {
  const std::vector<std::string> types = model::supported_model_types();
  std::vector<std::string> out;
  for (const auto& n : all_fixture_names())
    if (std::find(types.begin(), types.end(), fixture_model_type(n)) != types.end()) out.push_back(n);
  return out;
}

std::string build_checkpoint(const Fixture& f, DType dtype, const std::string& tag) {
  // The process id in the name: runs of one test in parallel (the sanitizer's tools) keep apart.
  const fs::path dir = fs::path(testing::TempDir()) /
                       (tag + "_" + f.name + "_" + dtype_name(dtype) + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  test_support::remove_at_exit(dir);
  fs::copy_file(f.dir + "/config.json", dir / "config.json");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, info] : f.weights.items()) {
    std::vector<int64_t> shape = info.at("shape").get<std::vector<int64_t>>();
    OwnedTensor bf = model::synthetic_tensor(name, shape, DType::kBF16, f.seed);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)model::fnv1a64_bytes(bf.tensor.data, bf.tensor.nbytes()));
    EXPECT_EQ(std::string(hex), info.at("fnv1a64").get<std::string>()) << "generator differs from HF weights for " << name;
    owned.push_back(dtype == DType::kBF16 ? std::move(bf) : model::synthetic_tensor(name, shape, dtype, f.seed));
    tensors.emplace_back(name, owned.back().tensor);
  }
  model::write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir.string();
}

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  f.dir = data_dir() + "/" + name;
  const std::string path = f.dir + "/golden.safetensors";
  model::MappedFile file(path);
  model::SafetensorsHeader h = model::parse_safetensors_header(file.data(), file.size(), path);
  f.metadata = h.metadata;
  f.outputs = std::make_unique<model::WeightStore>(model::WeightStore::open_file(path));
  check(f.metadata.count("weights") && f.metadata.count("seed"), "golden", path + ": metadata lacks weights/seed");
  f.weights = nlohmann::json::parse(f.metadata.at("weights"));
  f.seed = std::stoull(f.metadata.at("seed"));
  return f;
}

std::vector<float> to_f32(const Tensor& t) {
  check(t.dtype == DType::kF32 && t.is_contiguous(), "golden", "expected a contiguous f32 tensor");
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

std::vector<int32_t> to_i32(const Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = t.dtype == DType::kI64 ? static_cast<int32_t>(t.ptr<int64_t>()[i]) : t.ptr<int32_t>()[i];
  return out;
}

double rel_err(const float* a, const float* b, size_t n) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

}  // namespace bunsen::golden
