// Logits rows and sampler settings shared by the tests of ops.h's sample() (CPU reference:
// tests/unit/sampling/test_sample_op.cpp; CUDA kernel: tests/cuda/test_cuda_sample.cpp): model-like rows with
// a few peaks, rows of few distinct values (many exact ties), rows with NaN / -inf / +inf entries, flat rows,
// at vocabularies from 1 to 128,256, under filter settings that each cut somewhere else.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace bunsen::sampling::test {

struct SampleRowCase {
  std::string name;
  std::vector<float> logits;
};

inline std::vector<SampleRowCase> sample_row_cases(bool large) {
  std::vector<SampleRowCase> rows;
  std::mt19937 rng(20261202);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int64_t> sizes = {1, 5, 1000, 4099};
  if (large) sizes.push_back(128256);
  for (int64_t n : sizes) {
    const std::string at = "@" + std::to_string(n);
    std::vector<float> model(static_cast<size_t>(n)), ties(static_cast<size_t>(n)),
        odd(static_cast<size_t>(n));
    for (auto& v : model) v = 3.0f * normal(rng);
    for (int i = 0; i < 4 && n > 8; ++i) model[rng() % n] = 9.0f + static_cast<float>(i);  // peaks
    for (auto& v : ties) v = std::round(2.0f * normal(rng)) / 2.0f;  // few distinct values
    odd = model;
    for (int64_t i = 0; i < n; i += 7) odd[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 3; i < n; i += 11) odd[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
    rows.push_back({"model" + at, model});
    rows.push_back({"ties" + at, ties});
    if (n > 3) rows.push_back({"nan_neg_inf" + at, odd});
    rows.push_back({"flat" + at, std::vector<float>(static_cast<size_t>(n), 0.25f)});
    if (n > 8) {
      std::vector<float> inf = model;
      inf[1] = inf[static_cast<size_t>(n) - 2] = inf[static_cast<size_t>(n) / 2] =
          std::numeric_limits<float>::infinity();
      rows.push_back({"pos_inf" + at, inf});
    }
  }
  return rows;
}

// Settings (u is filled in per draw). Every one draws (temperature > 0, top_k != 1).
inline std::vector<kernels::SampleSpec> sample_specs() {
  return {
      {1.0f, 0, 1.0f, 0.0f}, {0.7f, 0, 1.0f, 0.0f},        {1.5f, 0, 1.0f, 0.0f},  {1.0f, 40, 1.0f, 0.0f},
      {0.8f, 0, 0.9f, 0.0f}, {1.0f, 0, 0.5f, 0.0f},        {1.0f, 0, 1.0f, 0.05f}, {0.6f, 50, 0.95f, 0.05f},
      {1.2f, 3, 1.0f, 0.5f}, {1.0f, 2000, 0.999f, 0.001f}, {0.2f, 0, 0.05f, 0.0f}, {1.0f, 0, 1.0f, 0.9f},
      {2.0f, 2, 0.3f, 0.0f},
  };
}

}  // namespace bunsen::sampling::test
