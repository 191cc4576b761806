// Tests for sampling::sample and Rng: greedy rules, reproducibility, a 3-sigma frequency check on a known
// distribution, and the exclusion sets of top-k / top-p / min-p built by hand from HF's definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"

using namespace bunsen::sampling;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Logits whose softmax is exactly `probs` (log of each prob).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -kInf);
  return l;
}

std::set<int32_t> drawn_set(const std::vector<float>& logits, const SamplingParams& p, int n_draws,
                            uint64_t seed) {
  Rng rng(seed);
  SamplerScratch s;
  std::set<int32_t> seen;
  for (int i = 0; i < n_draws; ++i)
    seen.insert(sample(logits.data(), static_cast<int64_t>(logits.size()), p, rng, s));
  return seen;
}

}  // namespace

TEST(Rng, PureFunctionOfSeedAndCounter) {
  Rng a(123), b(123), c(124);
  std::vector<uint64_t> va, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.next_u64());
    vc.push_back(c.next_u64());
    EXPECT_EQ(va.back(), b.next_u64());
  }
  EXPECT_EQ(a.counter(), 100u);
  EXPECT_NE(va, vc);
  Rng copy = a;  // copying carries the position in the stream
  EXPECT_EQ(copy.next_u64(), a.next_u64());
  for (int i = 0; i < 1000; ++i) {
    double d = a.next_double();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(Rng, DoublesAreRoughlyUniform) {
  Rng r(7);
  int buckets[10] = {};
  const int n = 100000;
  for (int i = 0; i < n; ++i) buckets[static_cast<int>(r.next_double() * 10)]++;
  // Binomial(n, 0.1): sigma = 94.9; 5 sigma bounds, deterministic seed.
  for (int b : buckets) EXPECT_NEAR(b, n / 10, 475);
}

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  Rng rng(1);
  SamplerScratch s;
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sample(l.data(), 4, p, rng, s), 1);
  p.temperature = -1.0f;
  EXPECT_EQ(sample(l.data(), 4, p, rng, s), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(sample(l.data(), 4, p, rng, s), 1);
  std::vector<float> with_nan = {kNaN, 0.5f, kNaN, 0.7f, -kInf};
  p.top_k = 0;
  p.temperature = 0.0f;
  EXPECT_EQ(sample(with_nan.data(), 5, p, rng, s), 3);
  std::vector<float> all_nan = {kNaN, kNaN};
  EXPECT_THROW(sample(all_nan.data(), 2, p, rng, s), bunsen::Error);
  EXPECT_EQ(rng.counter(), 0u);  // greedy consumes no randomness
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  std::vector<float> l(1000);
  for (int i = 0; i < 1000; ++i) l[i] = std::sin(i * 0.37f) * 2.0f;
  SamplingParams p;
  p.temperature = 1.5f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    SamplerScratch s;
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(sample(l.data(), 1000, p, rng, s));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, FrequenciesMatchDistributionWithin3Sigma) {
  const std::vector<double> probs = {0.5, 0.25, 0.15, 0.10};
  std::vector<float> l = logits_of(probs);
  for (float& x : l) x += 3.0f;  // shift: softmax is invariant
  Rng rng(2024);
  SamplerScratch s;
  SamplingParams p;  // temperature 1, no filters
  const int n = 20000;
  int counts[4] = {};
  for (int i = 0; i < n; ++i) counts[sample(l.data(), 4, p, rng, s)]++;
  for (int t = 0; t < 4; ++t) {
    double sigma = std::sqrt(n * probs[t] * (1 - probs[t]));
    EXPECT_NEAR(counts[t], n * probs[t], 3 * sigma) << "token " << t;
  }
}

TEST(Sampler, TemperatureFlattensAndSharpens) {
  const std::vector<double> probs = {0.7, 0.2, 0.1};
  std::vector<float> l = logits_of(probs);
  SamplerScratch s;
  auto freq0 = [&](float temp) {
    SamplingParams p;
    p.temperature = temp;
    Rng rng(99);
    int c = 0;
    for (int i = 0; i < 20000; ++i) c += sample(l.data(), 3, p, rng, s) == 0;
    return c / 20000.0;
  };
  // T = 2: p0 = sqrt(.7) / (sqrt(.7) + sqrt(.2) + sqrt(.1)) = 0.4942...
  double expect_t2 = std::sqrt(0.7) / (std::sqrt(0.7) + std::sqrt(0.2) + std::sqrt(0.1));
  EXPECT_NEAR(freq0(2.0f), expect_t2, 3 * std::sqrt(expect_t2 * (1 - expect_t2) / 20000));
  EXPECT_GT(freq0(0.5f), 0.8);
  EXPECT_EQ(freq0(1e-4f), 1.0);  // T -> 0+ is greedy
}

TEST(Sampler, TinyTemperatureWithLargeLogitsIsGreedy) {
  std::vector<float> l = {1000.0f, 999.0f, -1000.0f, 998.5f};
  SamplingParams p;
  p.temperature = 1e-6f;
  EXPECT_EQ(drawn_set(l, p, 500, 5), std::set<int32_t>({0}));
}

TEST(Sampler, TopKNeverLeavesTopK) {
  std::vector<float> l = {0.1f, 2.0f, 0.3f, 1.9f, 0.5f, 1.0f, -3.0f};
  SamplingParams p;
  p.temperature = 5.0f;  // flatten so excluded tokens would show up if not filtered
  p.top_k = 2;
  EXPECT_EQ(drawn_set(l, p, 3000, 11), std::set<int32_t>({1, 3}));
  p.top_k = 3;
  EXPECT_EQ(drawn_set(l, p, 3000, 12), std::set<int32_t>({1, 3, 5}));
  p.top_k = 100;  // larger than vocab: off
  EXPECT_EQ(drawn_set(l, p, 5000, 13).size(), 7u);
}

TEST(Sampler, TopKKeepsTiesAtBoundaryLikeHF) {
  // HF keeps every value >= the k-th largest: with k = 2 and values {3, 2, 2, 2, 1}, all three 2s stay.
  std::vector<float> l = {2.0f, 1.0f, 3.0f, 2.0f, 2.0f};
  SamplingParams p;
  p.temperature = 10.0f;
  p.top_k = 2;
  EXPECT_EQ(drawn_set(l, p, 3000, 21), std::set<int32_t>({0, 2, 3, 4}));
}

TEST(Sampler, TopPExclusionSet) {
  // probs .4 .3 .2 .1 (ids shuffled). top_p = 0.6: .4 < .6 so .3 is also needed (cum .7 >= .6); .2 and .1
  // are removed. HF: ascending cumsum .1 .3 .6 1.0, removed where <= 1 - 0.6 = 0.4 -> {.1, .2}.
  std::vector<float> l = logits_of({0.2, 0.4, 0.1, 0.3});
  SamplingParams p;
  p.top_p = 0.6f;
  EXPECT_EQ(drawn_set(l, p, 3000, 31), std::set<int32_t>({1, 3}));
  p.top_p = 0.35f;  // the top token alone reaches .35
  EXPECT_EQ(drawn_set(l, p, 1000, 32), std::set<int32_t>({1}));
  p.top_p = 0.75f;  // .4 + .3 = .7 < .75 -> the .2 token joins
  EXPECT_EQ(drawn_set(l, p, 3000, 33), std::set<int32_t>({1, 3, 0}));
  p.top_p = 0.0f;  // at least one token is always kept
  EXPECT_EQ(drawn_set(l, p, 100, 34), std::set<int32_t>({1}));
}

TEST(Sampler, TopPRenormalisesAfterTopK) {
  // top-k = 2 keeps {.4, .3} -> renormalised {.571, .429}; top_p = 0.5 then keeps only the first.
  std::vector<float> l = logits_of({0.2, 0.4, 0.1, 0.3});
  SamplingParams p;
  p.top_k = 2;
  p.top_p = 0.5f;
  EXPECT_EQ(drawn_set(l, p, 1000, 35), std::set<int32_t>({1}));
}

TEST(Sampler, MinPExclusionSet) {
  // max prob .5; min_p = .3 -> threshold .15: keeps .5, .2, .16; drops .1, .04.
  std::vector<float> l = logits_of({0.1, 0.5, 0.04, 0.2, 0.16});
  SamplingParams p;
  p.min_p = 0.3f;
  EXPECT_EQ(drawn_set(l, p, 5000, 41), std::set<int32_t>({1, 3, 4}));
  // min-p is computed after temperature: T = 0.5 squares the ratios (.4^2 = .16 and .32^2 = .1024 < .3,
  // only the top token keeps a relative prob >= .3).
  p.temperature = 0.5f;
  EXPECT_EQ(drawn_set(l, p, 2000, 42), std::set<int32_t>({1}));
}

TEST(Sampler, LargeVocabWithFiltersMatchesNaiveSet) {
  const int v = 50000;
  std::vector<float> l(v);
  for (int i = 0; i < v; ++i) l[i] = std::cos(i * 0.013f) * 4.0f + (i % 7) * 0.01f;
  SamplingParams p;
  p.top_k = 40;
  // Naive top-40 set.
  std::vector<int> order(v);
  for (int i = 0; i < v; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::set<int32_t> top40(order.begin(), order.begin() + 40);
  for (int32_t id : drawn_set(l, p, 500, 51)) EXPECT_TRUE(top40.count(id)) << id;
}

TEST(Sampler, NaNAndNegInfAreNeverDrawn) {
  std::vector<float> l = {kNaN, 0.0f, -kInf, 0.0f, kNaN, -kInf, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  EXPECT_EQ(drawn_set(l, p, 2000, 61), std::set<int32_t>({1, 3, 6}));
  p.top_k = 2;
  EXPECT_EQ(drawn_set(l, p, 2000, 62), std::set<int32_t>({1, 3, 6}));  // ties at the boundary kept
  std::vector<float> dead = {kNaN, -kInf};
  Rng rng(1);
  SamplerScratch s;
  EXPECT_THROW(sample(dead.data(), 2, SamplingParams{}, rng, s), bunsen::Error);
  // +inf logits: uniform among them.
  std::vector<float> pinf = {1.0f, kInf, 3.0f, kInf};
  EXPECT_EQ(drawn_set(pinf, SamplingParams{}, 500, 63), std::set<int32_t>({1, 3}));
}

TEST(Sampler, ScratchDoesNotRegrow) {
  std::vector<float> l(3000, 0.5f);
  Rng rng(3);
  SamplerScratch s;
  SamplingParams p;
  p.top_p = 0.9f;
  sample(l.data(), 3000, p, rng, s);
  const float* probs = s.probs.data();
  const int32_t* idx = s.indices.data();
  for (int i = 0; i < 10; ++i) sample(l.data(), 3000, p, rng, s);
  EXPECT_EQ(s.probs.data(), probs);
  EXPECT_EQ(s.indices.data(), idx);
}
