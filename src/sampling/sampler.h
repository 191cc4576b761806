// Sampling of one token from one row of logits: greedy, temperature, top-k, top-p, min-p, with a seeded,
// reproducible RNG per request. Not the logits processors of the batching issue (penalties, logit_bias,
// XTC arrive there) and not API parsing. Invariants: temperature <= 0 or top_k == 1 means greedy (argmax,
// first index on ties); the same (params, seed, logits) always yields the same token; a request's random
// stream depends only on its own seed and step count.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace bunsen::sampling {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  std::optional<uint64_t> seed;
};

// Counter-based generator (splitmix64 / philox-like): state = (seed, counter). Cheap to copy; the value
// for draw n is a pure function of (seed, n).
class Rng {
 public:
  explicit Rng(uint64_t seed) : seed_(seed) {}
  uint64_t next_u64();
  // Uniform in [0, 1) with 24 bits of resolution... use 53 bits (double) for sampling.
  double next_double();
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

// Reusable scratch so sampling a row does not allocate after the first call.
struct SamplerScratch {
  std::vector<float> probs;
  std::vector<int32_t> indices;
};

// Samples a token id from `logits` ([vocab] f32, CPU). Filters are applied in HF's order: temperature,
// top-k, top-p, min-p; then a categorical draw from the renormalised distribution.
int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng, SamplerScratch& scratch);

// Seed used when the request gives none (from std::random_device).
uint64_t random_seed();

}  // namespace bunsen::sampling
