// OpenAI-style logprobs of one logits row: the log-softmax of the RAW logits (before any processor or
// sampler), for the chosen token and for the n_top most likely tokens. Not the samplers. Invariants: the
// top list is descending with lower ids first on ties; NaN logits are skipped; one pass finds the max,
// one pass sums exp and keeps the top n in a fixed array (no sort of the vocab, no scratch).
#pragma once
#include <cstdint>

#include "sampling/sampler.h"

namespace bunsen::sampling {

constexpr int kMaxTopLogprobs = 20;  // OpenAI's top_logprobs limit

// Sets r.logprob for r.token and r.top to the n_top (0..kMaxTopLogprobs) most likely tokens of `raw`
// ([vocab] f32).
void fill_logprobs(const float* raw, int64_t vocab, int n_top, SampleResult& r);

}  // namespace bunsen::sampling
