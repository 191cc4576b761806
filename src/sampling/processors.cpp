// Logits processors (logit_bias, repetition, presence and frequency penalties) and validate() for
// SamplingParams. Not the samplers or XTC. Invariants: penalties count the window's ids through a sort of
// a context-sized scratch vector (never a vocab-sized table); repetition divides positive logits and
// multiplies negative ones by the penalty; frequency subtracts count * penalty, presence subtracts the
// penalty once per distinct generated id.
#include "sampling/processors.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace bunsen::sampling {
namespace {

constexpr float kMaxBias = 100.0f;        // OpenAI's logit_bias range is [-100, 100]
constexpr float kMaxPresenceFreq = 2.0f;  // OpenAI's presence/frequency range is [-2, 2]

// Throws Error("sampling", "<field>: <why>") when `ok` is false.
void require(bool ok, const char* field, const char* why) {
  if (!ok) throw Error("sampling", strfmt("%s: %s", field, why));
}

bool in_unit(float x) {
  return x >= 0.0f && x <= 1.0f;
}  // false for NaN

}  // namespace

bool rewrites_logits(const SamplingParams& p) {
  return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

void apply_logit_bias(float* logits, int64_t vocab, const SamplingParams& p) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab)
      throw Error("sampling",
                  strfmt("logit_bias: token id %d is outside [0, %lld)", id, static_cast<long long>(vocab)));
    logits[id] += bias;
  }
}

void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, const TokenContext& ctx,
                     std::vector<int32_t>& window) {
  const int64_t n_all = static_cast<int64_t>(ctx.prompt.size() + ctx.generated.size());
  const int64_t n_win = p.penalty_window > 0 ? std::min(p.penalty_window, n_all) : n_all;
  const int64_t n_gen = std::min<int64_t>(n_win, static_cast<int64_t>(ctx.generated.size()));
  const int64_t n_prompt = n_win - n_gen;
  auto gen_begin = ctx.generated.end() - n_gen;
  if (p.repetition_penalty != 1.0f) {
    window.assign(ctx.prompt.end() - n_prompt, ctx.prompt.end());
    window.insert(window.end(), gen_begin, ctx.generated.end());
    std::sort(window.begin(), window.end());
    auto end = std::unique(window.begin(), window.end());
    const float rp = p.repetition_penalty;
    for (auto it = window.begin(); it != end; ++it) {
      if (*it < 0 || *it >= vocab) continue;
      float& x = logits[*it];
      x = x < 0.0f ? x * rp : x / rp;
    }
  }
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  window.assign(gen_begin, ctx.generated.end());
  std::sort(window.begin(), window.end());
  for (size_t i = 0; i < window.size();) {
    size_t j = i;
    while (j < window.size() && window[j] == window[i]) ++j;
    const int32_t id = window[i];
    if (id >= 0 && id < vocab)
      logits[id] -= static_cast<float>(j - i) * p.frequency_penalty + p.presence_penalty;
    i = j;
  }
}

void validate(const SamplingParams& p, int64_t vocab) {
  require(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature",
          "must be a finite number >= 0");
  require(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "must be in (0, 1]");
  require(in_unit(p.min_p), "min_p", "must be in [0, 1]");
  require(p.top_k >= 0, "top_k", "must be >= 0 (0 = off)");
  require(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f, "repetition_penalty",
          "must be a finite number > 0");
  require(std::isfinite(p.presence_penalty) && std::fabs(p.presence_penalty) <= kMaxPresenceFreq,
          "presence_penalty", "must be in [-2, 2]");
  require(std::isfinite(p.frequency_penalty) && std::fabs(p.frequency_penalty) <= kMaxPresenceFreq,
          "frequency_penalty", "must be in [-2, 2]");
  require(p.penalty_window >= 0, "penalty_window", "must be >= 0 (0 = the whole context)");
  require(in_unit(p.xtc_probability), "xtc_probability", "must be in [0, 1]");
  require(in_unit(p.xtc_threshold), "xtc_threshold", "must be in [0, 1]");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab)
      throw Error("sampling",
                  strfmt("logit_bias: token id %d is outside [0, %lld)", id, static_cast<long long>(vocab)));
    require(std::isfinite(bias) && std::fabs(bias) <= kMaxBias, "logit_bias",
            "values must be in [-100, 100]");
  }
}

}  // namespace bunsen::sampling
