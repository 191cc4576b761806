// Tests for the logits processors (logit_bias, repetition, presence/frequency, penalty window, XTC) and
// validate(): each processor is checked against a naive per-id computation written here from the
// definitions (HF/CTRL repetition, OpenAI presence/frequency, llama.cpp XTC), or against hand-made cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "sampling/processors.h"
#include "sampling/sampler.h"

using namespace bunsen::sampling;

namespace {

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Naive penalties: window = last n of prompt ++ generated; repetition over the window, then
// presence/frequency over the generated tokens of the window, one id at a time over the whole vocab.
std::vector<float> naive_penalties(std::vector<float> logits, const SamplingParams& p,
                                   const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  size_t n =
      p.penalty_window > 0 ? std::min<size_t>(static_cast<size_t>(p.penalty_window), all.size()) : all.size();
  std::vector<int32_t> window(all.end() - static_cast<long>(n), all.end());
  size_t gen_in_window = std::min(n, gen.size());
  std::vector<int32_t> gen_window(gen.end() - static_cast<long>(gen_in_window), gen.end());
  for (size_t id = 0; id < logits.size(); ++id) {
    bool seen = std::count(window.begin(), window.end(), static_cast<int32_t>(id)) > 0;
    if (seen)
      logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    auto count = std::count(gen_window.begin(), gen_window.end(), static_cast<int32_t>(id));
    logits[id] -= static_cast<float>(count) * p.frequency_penalty;
    if (count > 0) logits[id] -= p.presence_penalty;
  }
  return logits;
}

std::vector<float> processed(std::vector<float> logits, const SamplingParams& p,
                             const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen) {
  std::vector<int32_t> scratch;
  TokenContext ctx{prompt, gen, {}};
  apply_logit_bias(logits.data(), static_cast<int64_t>(logits.size()), p);
  apply_penalties(logits.data(), static_cast<int64_t>(logits.size()), p, ctx, scratch);
  return logits;
}

std::set<int32_t> drawn_set(const std::vector<float>& logits, const SamplingParams& p,
                            const TokenContext& ctx, int n_draws, uint64_t seed) {
  Rng rng(seed);
  SamplerScratch s;
  std::set<int32_t> seen;
  for (int i = 0; i < n_draws; ++i)
    seen.insert(sample_row(logits.data(), static_cast<int64_t>(logits.size()), p, ctx, rng, s).token);
  return seen;
}

}  // namespace

TEST(Processors, HandComputedPenalties) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  // prompt {0, 4}: repetition only; generated {1, 2, 2}: repetition + presence + frequency.
  auto out = processed(l, p, {0, 4}, {1, 2, 2});
  EXPECT_FLOAT_EQ(out[0], 1.0f);                  // 2 / 2
  EXPECT_FLOAT_EQ(out[1], -4.0f - 0.5f - 0.25f);  // -2 * 2, one occurrence
  EXPECT_FLOAT_EQ(out[2], 0.5f - 1.0f - 0.25f);   // 1 / 2, two occurrences, presence once
  EXPECT_FLOAT_EQ(out[3], 0.5f);                  // never seen
  EXPECT_FLOAT_EQ(out[4], 1.5f);                  // 3 / 2, prompt only: no presence/frequency
}

TEST(Processors, WindowExcludesOlderTokens) {
  std::vector<float> l = {2.0f, 2.0f, 2.0f, 2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.penalty_window = 3;  // of prompt {0, 1} ++ generated {2, 3}: {1, 2, 3}
  auto out = processed(l, p, {0, 1}, {2, 3});
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(out[1], 1.0f);
  EXPECT_FLOAT_EQ(out[2], 0.0f);
  EXPECT_FLOAT_EQ(out[3], 0.0f);
  p.penalty_window = 1;  // only the last generated token
  out = processed(l, p, {0, 1}, {2, 3});
  EXPECT_EQ(out, std::vector<float>({2.0f, 2.0f, 2.0f, 0.0f}));
}

TEST(Processors, RandomCasesMatchNaive) {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> small_id(0, 40);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 64;
    std::vector<float> l(vocab);
    for (float& x : l) x = normal(gen);
    std::vector<int32_t> prompt(gen() % 30), generated(gen() % 30);
    for (auto& t : prompt) t = small_id(gen);
    for (auto& t : generated) t = small_id(gen);
    SamplingParams p;
    p.repetition_penalty = 0.5f + static_cast<float>(gen() % 200) / 100.0f;
    p.presence_penalty = static_cast<float>(static_cast<int>(gen() % 401) - 200) / 100.0f;
    p.frequency_penalty = static_cast<float>(static_cast<int>(gen() % 401) - 200) / 100.0f;
    p.penalty_window = static_cast<int64_t>(gen() % 70);  // 0 (all), inside generated, and spanning
    auto want = naive_penalties(l, p, prompt, generated);
    auto got = processed(l, p, prompt, generated);
    for (int id = 0; id < vocab; ++id)
      ASSERT_NEAR(got[id], want[id], 1e-5f * (1.0f + std::fabs(want[id])))
          << "trial " << trial << " id " << id;
  }
}

TEST(Processors, LogitBiasAddsAndForcesGreedy) {
  std::vector<float> l = {5.0f, 1.0f, -3.0f, 0.0f};
  SamplingParams p;
  p.logit_bias = {{2, 100.0f}, {0, -1.5f}};
  auto out = processed(l, p, {}, {});
  EXPECT_EQ(out, std::vector<float>({3.5f, 1.0f, 97.0f, 0.0f}));
  p.temperature = 0.0f;
  EXPECT_EQ(drawn_set(l, p, {}, 20, 1), std::set<int32_t>({2}));
  p.temperature = 1.0f;  // sampled: +100 leaves the others ~e-92 of the mass
  EXPECT_EQ(drawn_set(l, p, {}, 500, 2), std::set<int32_t>({2}));
  p.logit_bias = {{2, -100.0f}, {0, -100.0f}, {1, -100.0f}};  // banning all but id 3
  EXPECT_EQ(drawn_set(l, p, {}, 500, 3), std::set<int32_t>({3}));
  p.logit_bias = {{4, 1.0f}};
  std::vector<int32_t> none;
  Rng rng(1);
  SamplerScratch s;
  EXPECT_THROW(sample_row(l.data(), 4, p, TokenContext{none, none, none}, rng, s), bunsen::Error);
}

TEST(Processors, GreedyAppliesPenalties) {
  std::vector<float> l = {1.0f, 0.9f, 0.5f};
  std::vector<int32_t> prompt = {2}, generated = {0};
  TokenContext ctx{prompt, generated, {}};
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(drawn_set(l, p, ctx, 5, 1), std::set<int32_t>({0}));
  p.presence_penalty = 0.2f;  // 1.0 - 0.2 < 0.9
  EXPECT_EQ(drawn_set(l, p, ctx, 5, 1), std::set<int32_t>({1}));
  p.presence_penalty = 0.0f;
  p.top_k = 1;  // greedy via top_k; repetition 1.0/1.2 < 0.9
  p.temperature = 1.0f;
  p.repetition_penalty = 1.2f;
  EXPECT_EQ(drawn_set(l, p, ctx, 5, 1), std::set<int32_t>({1}));
}

TEST(Xtc, ProbabilityOneRemovesTopChoicesButKeepsExemptAndLeastLikely) {
  auto l = logits_of({0.4, 0.3, 0.2, 0.05, 0.05});
  SamplingParams p;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.1f;  // qualifying: 0, 1, 2; the least likely of them (2) stays
  EXPECT_EQ(drawn_set(l, p, {}, 2000, 7), std::set<int32_t>({2, 3, 4}));
  std::vector<int32_t> exempt = {0, 3};
  EXPECT_EQ(drawn_set(l, p, TokenContext{{}, {}, exempt}, 2000, 7), std::set<int32_t>({0, 2, 3, 4}));
  p.xtc_threshold = 0.35f;  // only one qualifies: nothing removed
  EXPECT_EQ(drawn_set(l, p, {}, 2000, 7), std::set<int32_t>({0, 1, 2, 3, 4}));
  p.xtc_threshold = 0.0f;  // all qualify: only the least likely (ties: the later in the order) stays
  EXPECT_EQ(drawn_set(l, p, {}, 200, 7).size(), 1u);
}

TEST(Xtc, ThresholdAppliesAfterTheFilters) {
  auto l = logits_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.35f;  // raw: only id 0 qualifies; after top_k = 2 (0.57, 0.43) both do
  EXPECT_EQ(drawn_set(l, p, {}, 1000, 3), std::set<int32_t>({0, 1, 2, 3}));
  p.top_k = 2;
  EXPECT_EQ(drawn_set(l, p, {}, 1000, 3), std::set<int32_t>({1}));
}

TEST(Xtc, ProbabilityZeroChangesNothingAndHalfFiresHalfTheTime) {
  auto l = logits_of({0.5, 0.3, 0.15, 0.05});
  SamplingParams p0, px;
  px.xtc_probability = 0.0f;
  px.xtc_threshold = 0.01f;
  Rng a(9), b(9);
  SamplerScratch s;
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(sample_row(l.data(), 4, px, {}, a, s).token, sample(l.data(), 4, p0, b, s));
  // Two tokens, threshold below both: when XTC fires only id 1 remains, so P(0) = (1 - 0.5) * 0.6.
  auto l2 = logits_of({0.6, 0.4});
  px.xtc_probability = 0.5f;
  px.xtc_threshold = 0.1f;
  Rng r(11);
  const int n = 8000;
  int zeros = 0;
  for (int i = 0; i < n; ++i) zeros += sample_row(l2.data(), 2, px, {}, r, s).token == 0;
  double sigma = std::sqrt(0.3 * 0.7 / n);
  EXPECT_NEAR(static_cast<double>(zeros) / n, 0.3, 4 * sigma);
}

TEST(Validate, AcceptsDefaultsAndBoundaries) {
  SamplingParams p;
  EXPECT_NO_THROW(validate(p, 10));
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.0f;
  p.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  EXPECT_NO_THROW(validate(p, 10));
}

TEST(Validate, RejectsEachBadFieldByName) {
  const float nan = std::nanf(""), inf = INFINITY;
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::string field;
  };
  std::vector<Case> cases = {
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {[&](SamplingParams& p) { p.top_p = nan; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[&](SamplingParams& p) { p.repetition_penalty = inf; }, "repetition_penalty"},
      {[&](SamplingParams& p) { p.presence_penalty = nan; }, "presence_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty"},
      {[&](SamplingParams& p) { p.frequency_penalty = inf; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.penalty_window = -1; }, "penalty_window"},
      {[](SamplingParams& p) { p.xtc_probability = 1.1f; }, "xtc_probability"},
      {[&](SamplingParams& p) { p.xtc_probability = nan; }, "xtc_probability"},
      {[](SamplingParams& p) { p.xtc_threshold = -0.1f; }, "xtc_threshold"},
      {[&](SamplingParams& p) { p.xtc_threshold = nan; }, "xtc_threshold"},
      {[](SamplingParams& p) {
         p.logit_bias = {{10, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 100.5f}};
       },
       "logit_bias"},
      {[&](SamplingParams& p) {
         p.logit_bias = {{3, nan}};
       },
       "logit_bias"},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.set(p);
    try {
      validate(p, 10);
      ADD_FAILURE() << "accepted a bad " << c.field;
    } catch (const bunsen::Error& e) {
      EXPECT_EQ(e.component(), "sampling");
      EXPECT_EQ(e.message().rfind(c.field + ":", 0), 0u) << e.what();
    }
  }
  SamplingParams two_bad;  // the first bad field (in declaration order) is the one named
  two_bad.top_p = 2.0f;
  two_bad.xtc_threshold = 2.0f;
  EXPECT_THROW(
      try { validate(two_bad, 10); } catch (const bunsen::Error& e) {
        EXPECT_EQ(e.message().rfind("top_p:", 0), 0u);
        throw;
      },
      bunsen::Error);
}
