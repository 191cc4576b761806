// Token sampling for one logits row: greedy, temperature, top-k, top-p, min-p and a counter-based RNG.
// Not logits processors (penalties, bias) and not batching. Invariants: filters follow HF's order and tie
// rules (top-k keeps every value >= the k-th; top-p keeps the smallest descending prefix reaching top_p;
// min-p keeps p >= min_p * p_max); NaN and -inf logits are never drawn; after the scratch vectors have
// grown to the vocab size no call allocates. Only the descending prefix that is actually needed gets
// sorted (nth_element + sort in doubling steps), so a 150k vocab is not sorted per token.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/status.h"

namespace bunsen::sampling {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr int64_t kFirstSortedPrefix = 64;

uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Argmax over non-NaN values, first index on ties; -1 when every value is NaN.
int64_t argmax_no_nan(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best;
}

// Candidate ids sorted lazily in descending order of val[id] (lower id first on ties): only the prefix
// that callers walk gets sorted.
class LazyDescending {
 public:
  LazyDescending(int32_t* idx, int64_t n, const float* val) : idx_(idx), n_(n), val_(val) {}
  int64_t size() const { return n_; }
  // Keeps only the n largest candidates.
  void truncate(int64_t n) {
    if (n >= n_) return;
    if (sorted_ < n) grow(n);
    n_ = n;
    sorted_ = std::min(sorted_, n_);
  }
  // The i-th largest candidate.
  int32_t at(int64_t i) {
    if (i >= sorted_) grow(i + 1);
    return idx_[i];
  }

 private:
  bool before(int32_t a, int32_t b) const { return val_[a] > val_[b] || (val_[a] == val_[b] && a < b); }
  void grow(int64_t need) {
    int64_t target = std::min(n_, std::max({need, 2 * sorted_, sorted_ + kFirstSortedPrefix}));
    auto cmp = [this](int32_t a, int32_t b) { return before(a, b); };
    if (target < n_) std::nth_element(idx_ + sorted_, idx_ + target, idx_ + n_, cmp);
    std::sort(idx_ + sorted_, idx_ + target, cmp);
    sorted_ = target;
  }
  int32_t* idx_;
  int64_t n_;
  int64_t sorted_ = 0;
  const float* val_;
};

// Fills scratch.indices with drawable ids and scratch.probs[id] with (logit - max) / temperature (<= 0).
// Returns the number of candidates. A row with +inf logits draws uniformly among those.
int64_t collect_candidates(const float* logits, int64_t vocab, float temperature, SamplerScratch& s) {
  float max = -std::numeric_limits<float>::infinity();
  bool any_pos_inf = false;
  for (int64_t i = 0; i < vocab; ++i) {
    float v = logits[i];
    if (std::isnan(v)) continue;
    if (v > max) max = v;
    any_pos_inf |= (v == std::numeric_limits<float>::infinity());
  }
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    float v = logits[i];
    if (std::isnan(v) || v == -std::numeric_limits<float>::infinity()) continue;
    if (any_pos_inf) {
      if (v != max) continue;
      s.probs[i] = 0.0f;
    } else {
      s.probs[i] = (v - max) / temperature;
    }
    s.indices[n++] = static_cast<int32_t>(i);
  }
  return n;
}

// HF TopKLogitsWarper: keep every candidate whose value is >= the k-th largest value (ties kept).
int64_t apply_top_k(int32_t* idx, int64_t n, int k, const float* val) {
  if (k <= 0 || k >= n) return n;
  auto cmp = [val](int32_t a, int32_t b) { return val[a] > val[b] || (val[a] == val[b] && a < b); };
  std::nth_element(idx, idx + (k - 1), idx + n, cmp);
  float kth = val[idx[k - 1]];
  // Everything in [k, n) is <= kth; pull the ties forward.
  int32_t* end = std::partition(idx + k, idx + n, [val, kth](int32_t id) { return val[id] >= kth; });
  return end - idx;
}

// HF's min-p then top-p cuts, both prefixes of the descending order: min-p keeps relative probability
// >= min_p; top-p keeps a token while the mass strictly above it is < top_p (of the top-k mass `total`).
void apply_min_p_top_p(LazyDescending& order, const float* val, int64_t keep_min_p, double total,
                       const SamplingParams& p) {
  if (p.min_p > 0.0f) order.truncate(std::max<int64_t>(keep_min_p, 1));
  if (p.top_p >= 1.0f) return;
  double target = static_cast<double>(p.top_p) * total, cum = 0.0;
  int64_t m = 0;
  while (m < order.size()) {
    cum += std::exp(val[order.at(m)]);
    ++m;
    if (cum >= target) break;
  }
  order.truncate(std::max<int64_t>(m, 1));
}

// Inverse CDF over the survivors in descending probability order; `mass` is their unnormalised sum.
int32_t draw(LazyDescending& order, const float* val, double mass, double u01) {
  double u = u01 * mass, cum = 0.0;
  for (int64_t i = 0; i < order.size(); ++i) {
    int32_t id = order.at(i);
    cum += std::exp(val[id]);
    if (u < cum) return id;
  }
  return order.at(order.size() - 1);  // rounding: u landed on the total
}

}  // namespace

uint64_t Rng::next_u64() {
  // splitmix64 evaluated at position counter+1 of the stream that starts at mix(seed): a pure function of
  // (seed, counter), so a request's draws never depend on anyone else's.
  uint64_t z = splitmix64_mix(seed_ + kGolden) + kGolden * (counter_ + 1);
  ++counter_;
  return splitmix64_mix(z);
}

double Rng::next_double() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng,
               SamplerScratch& scratch) {
  check(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(), "sampling",
        strfmt("bad vocab size %lld", static_cast<long long>(vocab)));
  if (p.temperature <= 0.0f || p.top_k == 1) {
    int64_t best = argmax_no_nan(logits, vocab);
    check(best >= 0, "sampling", "every logit is NaN");
    return static_cast<int32_t>(best);
  }
  if (static_cast<int64_t>(scratch.probs.size()) < vocab) scratch.probs.resize(static_cast<size_t>(vocab));
  if (static_cast<int64_t>(scratch.indices.size()) < vocab)
    scratch.indices.resize(static_cast<size_t>(vocab));
  // val[id] = (logit - max) / T <= 0 for candidates; exp(val) is the probability relative to the most
  // likely token. exp() is recomputed on the short prefixes walked below instead of being stored.
  float* val = scratch.probs.data();
  int32_t* idx = scratch.indices.data();
  int64_t n = collect_candidates(logits, vocab, p.temperature, scratch);
  check(n > 0, "sampling", "no finite logit to sample from (all NaN or -inf)");
  n = apply_top_k(idx, n, p.top_k, val);

  double total = 0.0;
  int64_t keep_min_p = 0;
  for (int64_t i = 0; i < n; ++i) {
    float e = std::exp(val[idx[i]]);
    total += e;
    keep_min_p += (e >= p.min_p);
  }
  LazyDescending order(idx, n, val);
  apply_min_p_top_p(order, val, keep_min_p, total, p);
  double mass = total;
  if (order.size() < n) {
    mass = 0.0;
    for (int64_t i = 0; i < order.size(); ++i) mass += std::exp(val[order.at(i)]);
  }
  return draw(order, val, mass, rng.next_double());
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

}  // namespace bunsen::sampling
