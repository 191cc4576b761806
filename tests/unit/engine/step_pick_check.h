// The check of Runner::step_pick shared by the CPU test (test_runner_pick.cpp) and the CUDA one
// (tests/cuda/test_cuda_step_pick.cpp): seven sequences prefilled in one step whose logits rows are picked in
// runs of different kinds (sampled x2, argmax, host, sampled, host x2) give, against a plain step() of the
// same chunks (the same logits), the host's first maximum for argmax rows, sampling::sample's token from the
// same seeded RNG for sampled rows, and the host rows' logits bit for bit, packed in row order. Header only
// (test sources are globbed as *.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "sampling/sampler.h"

namespace bunsen::engine::test {

inline int32_t first_max(const float* row, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
  return static_cast<int32_t>(best);
}

// runner: max_seqs and max_logit_rows >= 7, max_tokens_per_step >= 77, max_context >= 17, all blocks free.
inline void expect_step_pick_matches_step(Runner& runner) {
  using Kind = Runner::RowPick::Kind;
  constexpr int kSeqs = 7;
  const int64_t vocab = runner.model().config().vocab_size;
  const int32_t bs = runner.block_size();
  std::vector<kv::BlockTable> tables(kSeqs, kv::BlockTable(bs));
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  std::vector<SeqChunk> chunks;
  for (int s = 0; s < kSeqs; ++s) {
    for (int i = 0; i < 5 + 2 * s; ++i)
      prompts[s].push_back((s * 131 + i * 17 + 3) % static_cast<int>(vocab));
    std::vector<kv::BlockId> blocks;
    const auto n = static_cast<int64_t>(prompts[s].size());
    ASSERT_TRUE(runner.pool().allocate_n(tables[s].blocks_needed(n), blocks));
    for (auto b : blocks) tables[s].append(b);
    chunks.push_back({&tables[s], prompts[s].data(), n, 0, SeqChunk::Logits::kLast});
  }
  const Tensor plain = runner.step(chunks);
  ASSERT_EQ(plain.dim(0), kSeqs);
  const std::vector<float> logits(plain.ptr<float>(), plain.ptr<float>() + kSeqs * vocab);

  const Kind kinds[kSeqs] = {Kind::kSample, Kind::kSample, Kind::kArgmax, Kind::kHost,
                             Kind::kSample, Kind::kHost,   Kind::kHost};
  std::vector<sampling::SamplingParams> params(kSeqs);
  std::vector<Runner::RowPick> picks(kSeqs);
  for (int r = 0; r < kSeqs; ++r) {
    params[r].temperature = 0.6f + 0.2f * static_cast<float>(r % 3);
    params[r].top_p = r == 1 ? 0.9f : 1.0f;
    params[r].top_k = r == 4 ? 20 : 0;
    picks[r].kind = kinds[r];
    if (kinds[r] == Kind::kSample)
      picks[r].spec = kernels::SampleSpec{params[r].temperature, params[r].top_k, params[r].top_p,
                                          params[r].min_p, sampling::Rng(900 + r).next_double()};
  }
  const Runner::Picked got = runner.step_pick(chunks, picks);
  ASSERT_EQ(got.ids.size(), static_cast<size_t>(kSeqs));
  ASSERT_EQ(got.host_logits.dim(0), 3);
  int64_t host = 0;
  sampling::SamplerScratch scratch;
  for (int r = 0; r < kSeqs; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const float* row = logits.data() + r * vocab;
    if (kinds[r] == Kind::kArgmax) {
      EXPECT_EQ(got.ids[r], first_max(row, vocab));
    } else if (kinds[r] == Kind::kSample) {
      sampling::Rng rng(900 + r);
      EXPECT_EQ(got.ids[r], sampling::sample(row, vocab, params[r], rng, scratch));
    } else {
      EXPECT_EQ(std::memcmp(got.host_logits.ptr<float>() + host * vocab, row, vocab * sizeof(float)), 0);
      ++host;
    }
  }
  for (auto& t : tables) t.release_all(runner.pool());
}

}  // namespace bunsen::engine::test
