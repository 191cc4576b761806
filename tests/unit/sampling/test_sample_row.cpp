// Tests for sample_row(): logprobs against a double-precision log-softmax of the raw logits, top lists
// (length, order, ties), equivalence with sample() for default params, determinism per seed and context,
// and no heap allocation per row after warm-up (counted by a replaced global operator new).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// Counting replacements of the global allocation functions (malloc/free underneath, so GCC's pairing
// check is silenced for them). Not under AddressSanitizer, which brings its own.
#ifndef __SANITIZE_ADDRESS__
#define BUNSEN_COUNT_ALLOCATIONS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop
#endif

using namespace bunsen::sampling;

namespace {

std::vector<float> random_logits(int64_t vocab, uint64_t seed, float scale = 4.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& x : l) x = normal(gen);
  return l;
}

// Reference log-softmax in double over the non-NaN logits.
std::vector<double> log_softmax(const std::vector<float>& l) {
  double max = -INFINITY;
  for (float x : l)
    if (!std::isnan(x)) max = std::max(max, static_cast<double>(x));
  double sum = 0.0;
  for (float x : l)
    if (!std::isnan(x)) sum += std::exp(static_cast<double>(x) - max);
  std::vector<double> out;
  for (float x : l) out.push_back(static_cast<double>(x) - max - std::log(sum));
  return out;
}

// Naive sampler written from the definitions: sort every candidate (value desc, id asc), HF top-k ->
// min-p -> top-p, XTC (one draw when enabled, then keep exempt ids and the least likely qualifying one),
// then the inverse CDF over the descending survivors with the next draw.
int32_t naive_sample(const std::vector<float>& logits, const SamplingParams& p,
                     const std::vector<int32_t>& exempt, Rng& rng) {
  float max = -INFINITY;
  for (float x : logits) max = std::max(max, x);
  std::vector<int32_t> ids;
  std::vector<float> val(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    val[i] = (logits[i] - max) / p.temperature;
    if (std::isfinite(logits[i])) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return val[a] > val[b] || (val[a] == val[b] && a < b); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) {
    float kth = val[ids[p.top_k - 1]];
    while (val[ids.back()] < kth) ids.pop_back();
  }
  double total = 0.0;
  for (int32_t id : ids) total += std::exp(val[id]);
  if (p.min_p > 0.0f)
    while (ids.size() > 1 && std::exp(val[ids.back()]) < p.min_p) ids.pop_back();
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t m = 0;
    while (m < ids.size() && cum < p.top_p * total) cum += std::exp(val[ids[m++]]);
    ids.resize(std::max<size_t>(m, 1));
  }
  auto mass_of = [&] {
    double m = 0.0;
    for (int32_t id : ids) m += std::exp(val[id]);
    return m;
  };
  if (p.xtc_probability > 0.0f && rng.next_double() < p.xtc_probability) {
    double mass = mass_of();
    size_t q = 0;
    while (q < ids.size() && std::exp(val[ids[q]]) >= p.xtc_threshold * mass) ++q;
    std::vector<int32_t> kept;
    for (size_t i = 0; i < ids.size(); ++i)
      if (q < 2 || i + 1 >= q || std::count(exempt.begin(), exempt.end(), ids[i]) > 0) kept.push_back(ids[i]);
    ids = kept;
  }
  double u = rng.next_double() * mass_of(), cum = 0.0;
  for (int32_t id : ids) {
    cum += std::exp(val[id]);
    if (u < cum) return id;
  }
  return ids.back();
}

}  // namespace

TEST(SampleRow, MatchesNaiveSamplerOnLongVocabs) {
  // Long vocabs take the banded paths (value bands, partial sorts); the draws must be the naive ones.
  const int64_t vocab = 12000;
  std::vector<std::vector<float>> rows = {random_logits(vocab, 21, 3.0f), random_logits(vocab, 22, 1.0f),
                                          random_logits(vocab, 23, 2.0f)};
  for (int i = 0; i < 20; ++i) rows[2][static_cast<size_t>(i * 571)] += 8.0f + 0.3f * static_cast<float>(i);
  for (int i = 0; i < 300; ++i) rows[1][static_cast<size_t>(i * 37)] = rows[1][static_cast<size_t>(i * 39)];
  std::vector<SamplingParams> cases(9);
  cases[1].top_k = 40;
  cases[2].top_p = 0.9f;
  cases[3].min_p = 0.02f;
  cases[4].temperature = 0.6f;
  cases[4].top_p = 0.95f;
  cases[5].top_k = 5000;
  cases[5].top_p = 0.5f;
  cases[6].xtc_probability = 1.0f;
  cases[7].xtc_probability = 0.5f;
  cases[7].xtc_threshold = 0.01f;
  cases[7].min_p = 0.001f;
  cases[8].xtc_probability = 1.0f;
  cases[8].xtc_threshold = 0.001f;
  std::vector<int32_t> exempt = {19 * 571, 5};
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < cases.size(); ++c) {
      Rng rng(100 + r), ref(100 + r);
      SamplerScratch s;
      for (int i = 0; i < 30; ++i) {
        int32_t want = naive_sample(rows[r], cases[c], exempt, ref);
        auto got = sample_row(rows[r].data(), vocab, cases[c], TokenContext{{}, {}, exempt}, rng, s);
        ASSERT_EQ(got.token, want) << "row " << r << " case " << c << " draw " << i;
      }
    }
  }
}

TEST(SampleRow, LogprobsMatchDoubleLogSoftmax) {
  for (int64_t vocab : {1, 7, 33, 4099}) {
    auto l = random_logits(vocab, static_cast<uint64_t>(vocab));
    if (vocab > 10) {
      l[3] = std::numeric_limits<float>::quiet_NaN();
      l[5] = l[8] = 25.0f;  // a tie at the top: id 5 before id 8
    }
    auto want = log_softmax(l);
    SamplingParams p;
    p.logit_bias = {{0, 3.0f}};  // processors must not change the reported logprobs
    Rng rng(1);
    SamplerScratch s;
    for (int n_top : {0, 1, 5, 20}) {
      auto r = sample_row(l.data(), vocab, p, {}, rng, s, n_top);
      EXPECT_NEAR(r.logprob, want[r.token], 1e-5);
      ASSERT_EQ(r.top.size(), static_cast<size_t>(std::min<int64_t>(n_top, vocab - (vocab > 10))));
      std::vector<int32_t> order;  // reference: descending, lower id first, NaN excluded
      for (int32_t i = 0; i < vocab; ++i)
        if (!std::isnan(l[i])) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      for (size_t i = 0; i < r.top.size(); ++i) {
        EXPECT_EQ(r.top[i].token, order[i]) << "vocab " << vocab << " rank " << i;
        EXPECT_NEAR(r.top[i].logprob, want[order[i]], 1e-5);
      }
    }
  }
}

TEST(SampleRow, LogprobsOffAndOutOfRange) {
  auto l = random_logits(50, 3);
  Rng rng(1);
  SamplerScratch s;
  auto r = sample_row(l.data(), 50, SamplingParams{}, {}, rng, s);  // n_top = -1: none
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.logprob, 0.0f);
  EXPECT_THROW(sample_row(l.data(), 50, SamplingParams{}, {}, rng, s, 21), bunsen::Error);
}

TEST(SampleRow, ChosenLogprobIsFromRawLogitsEvenWhenForced) {
  auto l = random_logits(100, 4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{17, 100.0f}};
  Rng rng(1);
  SamplerScratch s;
  auto r = sample_row(l.data(), 100, p, {}, rng, s, 3);
  EXPECT_EQ(r.token, 17);
  EXPECT_NEAR(r.logprob, log_softmax(l)[17], 1e-5);
  EXPECT_LT(r.logprob, r.top[0].logprob);  // the raw top list is unaffected by the bias
}

TEST(SampleRow, DefaultParamsMatchSample) {
  auto l = random_logits(5000, 5, 2.0f);
  std::vector<SamplingParams> cases(6);
  cases[1].temperature = 0.0f;
  cases[2].top_k = 40;
  cases[3].top_p = 0.9f;
  cases[4].min_p = 0.05f;
  cases[5].temperature = 0.7f;
  cases[5].top_k = 100;
  cases[5].top_p = 0.8f;
  for (const auto& p : cases) {
    Rng a(77), b(77);
    SamplerScratch sa, sb;
    for (int i = 0; i < 200; ++i)
      ASSERT_EQ(sample_row(l.data(), 5000, p, {}, a, sa).token, sample(l.data(), 5000, p, b, sb));
    EXPECT_EQ(a.counter(), b.counter());
  }
}

TEST(SampleRow, DeterministicPerSeedAndContext) {
  auto l = random_logits(300, 6, 1.0f);
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.xtc_probability = 0.5f;
  p.top_p = 0.95f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    SamplerScratch s;
    std::vector<int32_t> prompt = {1, 2, 3}, generated;
    for (int i = 0; i < 200; ++i) {
      TokenContext ctx{prompt, generated, {}};
      generated.push_back(sample_row(l.data(), 300, p, ctx, rng, s).token);
    }
    return generated;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
}

TEST(SampleRow, NoAllocationAfterWarmUp) {
  const int64_t vocab = 20000;
  auto l = random_logits(vocab, 8);
  std::vector<int32_t> prompt(64), generated(64);
  std::iota(prompt.begin(), prompt.end(), 0);
  std::iota(generated.begin(), generated.end(), 1000);
  std::vector<int32_t> exempt = {2};
  TokenContext ctx{prompt, generated, exempt};
  SamplingParams p;
  p.logit_bias = {{5, 2.0f}};
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.3f;
  p.xtc_probability = 0.5f;
  p.top_k = 50;
  Rng rng(3);
  SamplerScratch s;
  sample_row(l.data(), vocab, p, ctx, rng, s);  // warm-up
  SamplingParams plain;
  sample_row(l.data(), vocab, plain, {}, rng, s);
  long before = g_allocations.load();
  for (int i = 0; i < 50; ++i) {
    sample_row(l.data(), vocab, p, ctx, rng, s);
    sample_row(l.data(), vocab, plain, {}, rng, s);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
#ifndef BUNSEN_COUNT_ALLOCATIONS
  GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
#endif
}
