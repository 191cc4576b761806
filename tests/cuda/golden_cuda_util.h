// Helpers shared by the CUDA whole-model tests over the golden fixtures (test_cuda_model.cpp,
// test_cuda_golden_quant.cpp): loading a checkpoint on a device, runner options, teacher-forced decode
// logits, and the row metrics (cosine, argmax, margin).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/runner.h"
#include "model/registry.h"

namespace bunsen::golden {

inline constexpr double kMinCosine = 0.999;
inline constexpr double kMinAgreement = 0.99;
inline constexpr double kClearMargin = 0.05;  // top-1 minus top-2 logit, in units of the row's standard deviation

inline double cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

inline int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// (top1 - top2) / std of the row.
inline double margin(const float* row, int64_t n) {
  double mean = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) mean += row[i];
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) sq += (row[i] - mean) * (row[i] - mean);
  float top1 = -INFINITY, top2 = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > top1) {
      top2 = top1;
      top1 = row[i];
    } else if (row[i] > top2) {
      top2 = row[i];
    }
  }
  const double sd = std::sqrt(sq / static_cast<double>(n));
  return sd > 0 ? (static_cast<double>(top1) - top2) / sd : 0.0;
}

inline std::unique_ptr<model::Model> load(const std::string& dir, Device device) {
  model::LoadOptions lo;
  lo.device = device;
  lo.progress = model::LoadOptions::Progress::kOff;
  return model::load_model(dir, lo);
}

inline engine::RunnerOptions runner_options(int64_t prompt, int64_t extra) {
  engine::RunnerOptions ro;
  ro.max_context = prompt + extra;
  ro.max_tokens_per_step = prompt;
  ro.max_logit_rows = prompt;
  ro.block_size = 4;  // several blocks per sequence even for short fixtures
  return ro;
}

// Logits [greedy.size(), vocab] of the decode steps that produced each golden greedy token, each step one
// token through the KV cache (teacher forced with the golden tokens).
inline std::vector<float> decode_logits(engine::Runner& runner, const std::vector<int32_t>& ids,
                                 const std::vector<int32_t>& greedy) {
  const int64_t vocab = runner.model().config().vocab_size;
  kv::BlockTable table(runner.block_size());
  check(table.acquire_state_slot(runner.pool()), "test", "no free state slot");  // hybrid models
  std::vector<kv::BlockId> blocks;
  const auto total = static_cast<int64_t>(ids.size() + greedy.size());
  check(runner.pool().allocate_n(table.blocks_needed(total), blocks), "test", "out of KV blocks");
  for (auto b : blocks) table.append(b);
  engine::SeqChunk prefill{&table, ids.data(), static_cast<int64_t>(ids.size()), 0,
                           engine::SeqChunk::Logits::kLast};
  Tensor logits = runner.step({&prefill, 1});
  std::vector<float> out;
  for (size_t i = 0; i < greedy.size(); ++i) {
    out.insert(out.end(), logits.ptr<float>(), logits.ptr<float>() + vocab);
    if (i + 1 == greedy.size()) break;
    engine::SeqChunk step{&table, &greedy[i], 1, static_cast<int64_t>(ids.size() + i),
                          engine::SeqChunk::Logits::kLast};
    logits = runner.step({&step, 1});
  }
  table.release_all(runner.pool());
  return out;
}

struct Tally {
  int64_t agree = 0, total = 0;
};

}  // namespace bunsen::golden
