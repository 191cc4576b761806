// Sampling of one token from one row of logits: logits processors (logit_bias, repetition/presence/frequency
// penalties over a context window, XTC), then greedy, temperature, top-k, top-p, min-p with a seeded,
// reproducible RNG per request, plus OpenAI-style logprobs. Not API parsing. Invariants: temperature <= 0
// or top_k == 1 means greedy (argmax, first index on ties); the same (params, seed, context, logits) always
// yields the same token; a request's random stream depends only on its own seed and step count (never on
// the other rows of a batch).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace bunsen::sampling {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  std::optional<uint64_t> seed;
  // Logits processors, applied in this order before temperature: logit_bias, repetition penalty,
  // presence/frequency penalties, then XTC after the filters (as llama.cpp orders it).
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the raw logit of each id (ids < vocab)
  float repetition_penalty = 1.0f;  // HF/CTRL: logit > 0 ? logit / p : logit * p over prompt + generated
  float presence_penalty = 0.0f;    // OpenAI: - p once for each distinct id already generated
  float frequency_penalty = 0.0f;   // OpenAI: - p * count of each id already generated
  int64_t penalty_window = 0;       // only the last N tokens of the context count for penalties; 0 = all
  float xtc_probability = 0.0f;     // XTC: with this probability per step, remove every token whose
  float xtc_threshold = 0.1f;       // probability >= threshold except the least likely of them
  bool greedy() const { return temperature <= 0.0f || top_k == 1; }  // argmax, nothing drawn
  bool any_processor() const {
    return !logit_bias.empty() || repetition_penalty != 1.0f || presence_penalty != 0.0f ||
           frequency_penalty != 0.0f || xtc_probability > 0.0f;
  }
};

// What the processors look at besides the logits: the request's tokens so far and the ids XTC never
// removes (EOS and newline tokens, so XTC cannot make a reply endless or one long line).
struct TokenContext {
  std::span<const int32_t> prompt;
  std::span<const int32_t> generated;
  std::span<const int32_t> xtc_exempt;
};

struct Logprob {
  int32_t token = 0;
  float logprob = 0.0f;  // natural log of the model's probability (log-softmax of the raw logits)
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;      // the chosen token's, from the raw logits (OpenAI semantics; also when greedy)
  std::vector<Logprob> top;  // n_top most likely by raw logits, descending (ties: lower id first)
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
  std::vector<float> logits;   // [vocab] f32: the processed copy of a row (sample_row with processors)
  std::vector<int32_t> window;  // ids of the penalty window, sorted (sized to the context, not the vocab)
};

// Samples a token id from `logits` ([vocab] f32, CPU). Filters are applied in HF's order: temperature,
// top-k, top-p, min-p; then a categorical draw from the renormalised distribution.
int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng, SamplerScratch& scratch);

// The full per-row path: copies `logits` into scratch, applies the processors with `ctx`, samples as
// sample() does, and computes logprobs when n_top >= 0 (0: the chosen token's only; at most 20).
// `logits` is left unchanged. Throws Error("sampling", ...) for a logit_bias id outside [0, vocab).
SampleResult sample_row(const float* logits, int64_t vocab, const SamplingParams& p, const TokenContext& ctx,
                        Rng& rng, SamplerScratch& scratch, int n_top = -1);

// Checks every field (finite, in range: temperature >= 0, top_p in (0, 1], min_p in [0, 1], top_k >= 0,
// penalties finite with repetition_penalty > 0, xtc_probability/threshold in [0, 1], logit_bias ids in
// [0, vocab) and finite values); throws Error("sampling", "<field>: ...") naming the first bad field.
void validate(const SamplingParams& p, int64_t vocab);

// Seed used when the request gives none (from std::random_device).
uint64_t random_seed();

}  // namespace bunsen::sampling
