// Token sampling for one logits row: greedy, temperature, top-k, top-p, min-p, XTC, a counter-based RNG,
// and sample_row() tying processors (processors.cpp) and logprobs (logprobs.cpp) together. Not batching.
// Invariants: filters follow HF's order and tie rules (top-k keeps every value >= the k-th; top-p keeps the
// smallest descending prefix reaching top_p; min-p keeps p >= min_p * p_max); NaN and -inf logits are
// never drawn; after the scratch vectors have grown to the vocab size no call allocates. Nothing sorts
// the vocab: value bands (lazy_order.h) pick the few candidates each walk needs, and the final draw walks
// only the band where the CDF crosses u (the bands above it count by their sums).
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/status.h"
#include "sampling/lazy_order.h"
#include "sampling/logprobs.h"
#include "sampling/processors.h"

namespace bunsen::sampling {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Candidate lists longer than this get value bands so walks sort only what they need.
constexpr int64_t kBandedFrom = 4096;
// Slack below a log-probability cutoff that covers the rounding of exp(): a cutoff only picks what gets
// sorted early, never what is kept.
constexpr float kLogSlack = 1.0f / 64.0f;

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

// HF TopKLogitsWarper: keep every candidate whose value is >= the k-th largest value (ties kept). Long
// lists first gather the candidates of the top value bands holding >= k of them (counts), so nth_element
// runs on those only.
int64_t apply_top_k(int32_t* idx, int64_t n, int k, const float* val) {
  if (k <= 0 || k >= n) return n;
  int64_t m = n;  // nth_element range: [0, m) holds the k largest, everything after is smaller
  if (n >= kBandedFrom) {
    ValueBands counts;
    for (int64_t i = 0; i < n; ++i) counts.add(val[idx[i]], 1.0);
    float c = counts.cutoff(static_cast<double>(k - 1));
    if (c > -std::numeric_limits<float>::infinity())
      m = std::partition(idx, idx + n, [val, c](int32_t id) { return val[id] >= c; }) - idx;
  }
  auto cmp = [val](int32_t a, int32_t b) { return val[a] > val[b] || (val[a] == val[b] && a < b); };
  std::nth_element(idx, idx + (k - 1), idx + m, cmp);
  float kth = val[idx[k - 1]];
  // Everything in [k, m) is <= kth and everything after m is < kth; pull the ties forward.
  int32_t* end = std::partition(idx + k, idx + m, [val, kth](int32_t id) { return val[id] >= kth; });
  return end - idx;
}

// Before a walk that stops once the mass reaches `target`: sorts exactly what it will need (bands given).
void presort_for_mass(LazyDescending& order, const ValueBands* bands, double target) {
  if (bands == nullptr || order.fully_sorted()) return;
  float c = bands->cutoff(target);
  if (c > -std::numeric_limits<float>::infinity()) order.sort_down_to(c);
}

// Before a walk over the candidates with exp(val) >= rel (rel > 0): sorts them (and a few more).
void presort_for_relative(LazyDescending& order, double rel) {
  if (rel > 0.0 && !order.fully_sorted()) order.sort_down_to(static_cast<float>(std::log(rel)) - kLogSlack);
}

// HF's min-p then top-p cuts, both prefixes of the descending order: min-p keeps relative probability
// >= min_p; top-p keeps a token while the mass strictly above it is < top_p (of the top-k mass `total`).
void apply_min_p_top_p(LazyDescending& order, const float* val, int64_t keep_min_p, double total,
                       const SamplingParams& p, const ValueBands* bands) {
  if (p.min_p > 0.0f && keep_min_p < order.size()) {
    presort_for_relative(order, p.min_p);
    order.truncate(std::max<int64_t>(keep_min_p, 1));
  }
  if (p.top_p >= 1.0f) return;
  double target = static_cast<double>(p.top_p) * total, cum = 0.0;
  presort_for_mass(order, bands, target);
  int64_t m = 0;
  while (m < order.size()) {
    cum += std::exp(val[order.at(m)]);
    ++m;
    if (cum >= target) break;
  }
  order.truncate(std::max<int64_t>(m, 1));
}

// Banded inverse CDF for long unsorted lists: the bands above the one where the CDF crosses u count by
// their sums, and only that band's candidates are sorted and walked. Returns -1 when rounding leaves
// the crossing outside the band's candidates (the caller then walks the whole order). Reorders ids.
int32_t draw_banded(int32_t* idx, int64_t n, const float* val, double u, const ValueBands& bands) {
  double cum = 0.0;
  int b = bands.crossing(u, &cum);
  if (b < 0) return -1;
  int32_t* end =
      std::partition(idx, idx + n, [val, b](int32_t id) { return ValueBands::band(val[id]) == b; });
  std::sort(idx, end, [val](int32_t x, int32_t y) { return val[x] > val[y] || (val[x] == val[y] && x < y); });
  for (int32_t* it = idx; it != end; ++it) {
    cum += std::exp(val[*it]);
    if (u < cum) return *it;
  }
  return -1;
}

// Inverse CDF over the survivors in descending probability order; `mass` is their unnormalised sum.
// With bands (a long list, not truncated), the bands above u's are summed per band rather than walked.
int32_t draw(LazyDescending& order, const float* val, double mass, double u01, const ValueBands* bands) {
  double u = u01 * mass, cum = 0.0;
  if (bands != nullptr && !order.fully_sorted()) {
    int32_t id = draw_banded(order.ids(), order.size(), val, u, *bands);
    if (id >= 0) return id;
    order = LazyDescending(order.ids(), order.size(), val);  // ids were reordered: start a fresh order
  }
  for (int64_t i = 0; i < order.size(); ++i) {
    int32_t id = order.at(i);
    cum += std::exp(val[id]);
    if (u < cum) return id;
  }
  return order.at(order.size() - 1);  // rounding: u landed on the total
}

// Sum of exp(val) over the surviving candidates, in the order they are held (sorted once truncated).
double survivor_mass(const LazyDescending& order, const float* val) {
  double mass = 0.0;
  for (int64_t i = 0; i < order.size(); ++i) mass += std::exp(val[order.ids()[i]]);
  return mass;
}

// XTC ("exclude top choices"): with probability xtc_probability (one draw from rng whenever it is > 0),
// among the survivors whose renormalised probability is >= xtc_threshold (a prefix of the descending
// order), removes all but the least likely, if at least two qualify; ids in `exempt` always stay.
// Returns the mass removed (also taken out of `bands`).
double apply_xtc(LazyDescending& order, const float* val, double mass, const SamplingParams& p,
                 std::span<const int32_t> exempt, Rng& rng, ValueBands* bands) {
  if (p.xtc_probability <= 0.0f) return 0.0;
  if (rng.next_double() >= static_cast<double>(p.xtc_probability)) return 0.0;
  const double cut = static_cast<double>(p.xtc_threshold) * mass;
  presort_for_relative(order, cut);  // sorts every candidate that can qualify (all of them when cut = 0)
  const int64_t limit = cut > 0.0 ? order.sorted_size() : order.size();
  int64_t m = 0;
  while (m < limit && static_cast<double>(std::exp(val[order.at(m)])) >= cut) ++m;
  if (m < 2) return 0.0;
  double removed = 0.0;
  order.erase_in_prefix(m - 1, [&](int32_t id) {
    bool drop = std::find(exempt.begin(), exempt.end(), id) == exempt.end();
    if (drop) {
      removed += std::exp(val[id]);
      if (bands != nullptr) bands->remove(val[id], std::exp(val[id]));
    }
    return drop;
  });
  return removed;
}

// The samplers of sample(), plus XTC when `xtc` is set: temperature, top-k, min-p, top-p, XTC, draw.
int32_t draw_filtered(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng,
                      SamplerScratch& scratch, bool xtc, std::span<const int32_t> exempt) {
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
  ValueBands bands;  // probability mass per value band, for long lists only
  const bool banded = n >= kBandedFrom;
  for (int64_t i = 0; i < n; ++i) {
    float v = val[idx[i]];
    float e = std::exp(v);
    total += e;
    keep_min_p += (e >= p.min_p);
    if (banded) bands.add(v, e);
  }
  ValueBands* b = banded ? &bands : nullptr;
  LazyDescending order(idx, n, val);
  apply_min_p_top_p(order, val, keep_min_p, total, p, b);
  double mass = order.size() < n ? survivor_mass(order, val) : total;
  if (xtc) mass -= apply_xtc(order, val, mass, p, exempt, rng, b);
  return draw(order, val, mass, rng.next_double(), b);
}

int32_t greedy(const float* logits, int64_t vocab) {
  int64_t best = argmax_no_nan(logits, vocab);
  check(best >= 0, "sampling", "every logit is NaN");
  return static_cast<int32_t>(best);
}

// (Messages are built only on failure: strfmt allocates, and the per-row path must not.)
void check_vocab(int64_t vocab) {
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    throw Error("sampling", strfmt("bad vocab size %lld", static_cast<long long>(vocab)));
}

bool is_greedy(const SamplingParams& p) {
  return p.greedy();
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
  check_vocab(vocab);
  if (is_greedy(p)) return greedy(logits, vocab);
  return draw_filtered(logits, vocab, p, rng, scratch, /*xtc=*/false, {});
}

SampleResult sample_row(const float* logits, int64_t vocab, const SamplingParams& p, const TokenContext& ctx,
                        Rng& rng, SamplerScratch& scratch, int n_top) {
  check_vocab(vocab);
  if (n_top < -1 || n_top > kMaxTopLogprobs)
    throw Error("sampling", strfmt("n_top must be in [-1, %d], got %d", kMaxTopLogprobs, n_top));
  const float* row = logits;  // [vocab] f32, the processed logits
  if (rewrites_logits(p)) {
    if (static_cast<int64_t>(scratch.logits.size()) < vocab)
      scratch.logits.resize(static_cast<size_t>(vocab));
    std::copy(logits, logits + vocab, scratch.logits.data());
    apply_logit_bias(scratch.logits.data(), vocab, p);
    apply_penalties(scratch.logits.data(), vocab, p, ctx, scratch.window);
    row = scratch.logits.data();
  }
  SampleResult r;
  // Greedy takes the argmax of the processed logits and draws nothing (XTC is a sampler: not applied).
  r.token =
      is_greedy(p) ? greedy(row, vocab) : draw_filtered(row, vocab, p, rng, scratch, true, ctx.xtc_exempt);
  if (n_top >= 0) fill_logprobs(logits, vocab, n_top, r);
  return r;
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

}  // namespace bunsen::sampling
