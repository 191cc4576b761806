// Logits processors that rewrite a processed copy of one logits row before the samplers run: logit_bias,
// the repetition penalty (HF/CTRL) and the presence/frequency penalties (OpenAI), over a window of the
// request's context. Not the samplers and not XTC (sampler.cpp: XTC needs the filtered distribution).
// Invariants: each distinct id in the window is penalised once per penalty; context ids outside
// [0, vocab) are ignored; nothing allocates once `window` has grown to the context size.
#pragma once
#include <cstdint>
#include <vector>

#include "sampling/sampler.h"

namespace bunsen::sampling {

// logits[id] += bias for each (id, bias) of p.logit_bias. `logits`: [vocab] f32.
// Throws Error("sampling", ...) for an id outside [0, vocab).
void apply_logit_bias(float* logits, int64_t vocab, const SamplingParams& p);

// The repetition penalty over the last p.penalty_window tokens of prompt ++ generated (0 = all), then the
// presence/frequency penalties over the generated tokens inside that window. `logits`: [vocab] f32.
// `window` is scratch (ends up holding the sorted generated ids of the window).
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, const TokenContext& ctx,
                     std::vector<int32_t>& window);

// True when apply_logit_bias or apply_penalties would change anything.
bool rewrites_logits(const SamplingParams& p);

}  // namespace bunsen::sampling
