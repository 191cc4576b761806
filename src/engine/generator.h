// Single-sequence generation on a Runner: memory admission, chunked prefill, decode loop, sampling, EOS and
// max_tokens. This is the one-request path of the foundation; the continuous-batching Engine (loop thread,
// submit/cancel, many sequences) builds on the same Runner. Not text handling: callers detokenize.
// Invariants: nothing is silently truncated (a request that cannot fit fails before any work); the
// sequence's KV blocks are returned to the pool on every exit path.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/runner.h"
#include "sampling/sampler.h"

namespace bunsen::engine {

struct GenerateOptions {
  sampling::SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<int32_t> eos_ids;  // generation stops after emitting one of these (it is not returned)
  // Pipelined decoding: the runner picks each token where the logits are (argmax; a sampled draw with this
  // request's RNG through ops.h's sample(), the same token sampling::sample draws from the same logits) and
  // step N + 1 is queued, its token fed from step N's on the device, before the host reads step N's token,
  // so the GPU does not wait for the host between steps; a step queued past an EOS or a cancel is dropped.
  // Unset: on for CUDA runners, off on the CPU (a step runs synchronously there, and the host sampler is
  // faster than the reference sample()); BUNSEN_DECODE_PIPELINE=0|1 overrides the unset default.
  std::optional<bool> pipeline;
};

enum class FinishReason { kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason r);

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t decode_steps = 0;  // forward passes after the prefill
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
  double ms_per_token() const { return decode_steps > 0 ? 1000.0 * decode_seconds / decode_steps : 0; }
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, EOS excluded
  FinishReason finish = FinishReason::kLength;
  GenerationStats stats;
};

// on_token(id) is called for every generated token (EOS excluded); returning false cancels.
GenerateResult generate(Runner& runner, std::span<const int32_t> prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token = {});

// Logits at every position of `tokens` ([T, vocab_size] row-major), computed in chunks of the runner's
// token budget. The runner needs max_logit_rows >= min(T, max_tokens_per_step).
std::vector<float> score(Runner& runner, std::span<const int32_t> tokens, model::ActivationHook* hook = nullptr);

}  // namespace bunsen::engine
