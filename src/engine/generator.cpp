// generate() and score(): one sequence driven through Runner::step.
#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/env.h"
#include "core/status.h"

namespace bunsen::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Owns a sequence's block table (and state slot) and returns them on scope exit.
class SeqBlocks {
 public:
  explicit SeqBlocks(Runner& r) : runner_(r), table_(r.block_size()) {
    check(table_.acquire_state_slot(r.pool()), "engine", "no free linear-attention state slot");
  }
  ~SeqBlocks() { table_.release_all(runner_.pool()); }
  const kv::BlockTable& table() const { return table_; }
  void ensure(int64_t n_tokens) {
    int32_t need = table_.blocks_needed(n_tokens);
    for (int32_t i = 0; i < need; ++i) {
      auto id = runner_.pool().allocate();
      check(id.has_value(), "engine", "out of KV blocks");  // admission makes this unreachable
      table_.append(*id);
    }
  }

 private:
  Runner& runner_;
  kv::BlockTable table_;
};

void admit(const Runner& runner, int64_t total_tokens, int64_t prompt, int64_t max_tokens) {
  const RunnerOptions& o = runner.options();
  const int64_t capacity = std::min<int64_t>(o.max_context, static_cast<int64_t>(runner.storage().n_blocks()) * o.block_size);
  if (total_tokens > capacity)
    throw Error("memory_admission", strfmt("prompt (%lld tokens) + max_tokens (%lld) = %lld tokens exceeds the %lld-token "
                                           "KV capacity; shorten the prompt or lower max_tokens",
                                           (long long)prompt, (long long)max_tokens, (long long)total_tokens,
                                           (long long)capacity));
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

GenerateResult generate(Runner& runner, std::span<const int32_t> prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token) {
  check(!prompt.empty(), "engine", "prompt is empty: at least one token is needed");
  check(opts.max_tokens >= 0, "engine", "max_tokens must be >= 0");
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  admit(runner, n_prompt + opts.max_tokens, n_prompt, opts.max_tokens);
  GenerateResult res;
  res.stats.prompt_tokens = n_prompt;
  if (opts.max_tokens == 0) return res;
  SeqBlocks seq(runner);
  res.tokens.reserve(static_cast<size_t>(opts.max_tokens));  // admission bounded it; no growth while decoding
  const int64_t vocab = runner.model().config().vocab_size;
  sampling::Rng rng(opts.sampling.seed ? *opts.sampling.seed : sampling::random_seed());
  sampling::SamplerScratch scratch;
  const int64_t budget = runner.options().max_tokens_per_step;

  // Where tokens are picked. Greedy (sample() applies no processor then) takes the argmax where the logits
  // are: on CUDA a 4-byte copy instead of the whole row (513 KB for a 128k vocabulary) and a host scan of it.
  // Pipelined, sampled tokens are drawn there too (ops.h's sample(): sampling::sample's filters and draw, fed
  // this step's uniform from the request's RNG, one per token as sample() takes them), so the next step can
  // be queued before the host has the token. Otherwise the logits row comes back and the host draws.
  const bool greedy = opts.sampling.greedy();
  const bool pipeline = opts.pipeline.value_or(env_flag("BUNSEN_DECODE_PIPELINE", runner.device().is_cuda()));
  const bool on_runner = greedy || pipeline;
  const sampling::SamplingParams& sp = opts.sampling;
  kernels::SampleSpec spec{sp.temperature, sp.top_k, sp.top_p, sp.min_p};
  auto enqueue = [&](const SeqChunk& c, bool feed) {
    if (greedy) return runner.enqueue_tokens({&c, 1}, feed);
    spec.u = rng.next_double();
    return runner.enqueue_tokens({&c, 1}, feed, {&spec, 1});
  };
  auto wait = [&](const Runner::PendingTokens& p) {
    const int32_t id = runner.wait_tokens(p)[0];
    // The messages of sampling::sample for the same rows.
    check(id >= 0, "sampling",
          greedy ? "every logit is NaN" : "no finite logit to sample from (all NaN or -inf)");
    return id;
  };
  auto next_token = [&](const SeqChunk& c) -> int32_t {
    if (on_runner) return wait(enqueue(c, false));
    const Tensor logits = runner.step({&c, 1});
    return sampling::sample(logits.ptr<float>(), vocab, opts.sampling, rng, scratch);
  };

  auto t0 = Clock::now();
  int32_t tok = -1;
  for (int64_t start = 0; start < n_prompt; start += budget) {  // chunked prefill
    const int64_t n = std::min(budget, n_prompt - start);
    seq.ensure(start + n);
    const bool last = start + n == n_prompt;
    SeqChunk c{&seq.table(), prompt.data() + start, n, start,
               last ? SeqChunk::Logits::kLast : SeqChunk::Logits::kNone};
    if (last)
      tok = next_token(c);
    else
      runner.step({&c, 1});
  }
  res.stats.prefill_seconds = seconds_since(t0);

  auto t1 = Clock::now();
  int64_t pos = n_prompt;
  // Pipelined: `next` is the queued step that consumes `tok` and produces the token after it (queued with
  // `tok` fed on the device, before the host knew it), or nothing yet.
  std::optional<Runner::PendingTokens> next;
  for (;;) {
    if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), tok) != opts.eos_ids.end()) {
      res.finish = FinishReason::kStop;
      break;
    }
    res.tokens.push_back(tok);
    if (on_token && !on_token(tok)) {
      res.finish = FinishReason::kCancelled;
      break;
    }
    const auto produced = static_cast<int64_t>(res.tokens.size());
    if (produced >= opts.max_tokens) {
      res.finish = FinishReason::kLength;
      break;
    }
    if (!pipeline) {
      seq.ensure(pos + 1);
      SeqChunk c{&seq.table(), &res.tokens.back(), 1, pos++, SeqChunk::Logits::kLast};
      tok = next_token(c);
      ++res.stats.decode_steps;
      continue;
    }
    if (!next) {
      seq.ensure(pos + 1);
      SeqChunk c{&seq.table(), &res.tokens.back(), 1, pos++, SeqChunk::Logits::kLast};
      next = enqueue(c, /*feed=*/false);
    }
    // The step after it, fed on the device, when the token it produces can still be emitted.
    std::optional<Runner::PendingTokens> after;
    if (produced + 1 < opts.max_tokens) {
      seq.ensure(pos + 1);
      SeqChunk c{&seq.table(), &res.tokens.back(), 1, pos++, SeqChunk::Logits::kLast};  // token: placeholder
      after = enqueue(c, /*feed=*/true);
    }
    tok = wait(*next);
    next = after;
    ++res.stats.decode_steps;
  }
  if (next) runner.wait_tokens(*next);  // a step queued past the end: its result is dropped
  res.stats.decode_seconds = seconds_since(t1);
  res.stats.generated_tokens = static_cast<int64_t>(res.tokens.size());
  return res;
}

std::vector<float> score(Runner& runner, std::span<const int32_t> tokens, model::ActivationHook* hook) {
  const auto total = static_cast<int64_t>(tokens.size());
  check(total > 0, "engine", "score: no tokens");
  admit(runner, total, total, 0);
  const int64_t vocab = runner.model().config().vocab_size;
  const int64_t budget = std::min(runner.options().max_tokens_per_step, runner.options().max_logit_rows);
  std::vector<float> out(static_cast<size_t>(total * vocab));
  SeqBlocks seq(runner);
  for (int64_t start = 0; start < total; start += budget) {
    const int64_t n = std::min(budget, total - start);
    seq.ensure(start + n);
    SeqChunk c{&seq.table(), tokens.data() + start, n, start, SeqChunk::Logits::kAll};
    Tensor logits = runner.step({&c, 1}, hook);
    std::copy_n(logits.ptr<float>(), n * vocab, out.data() + start * vocab);
  }
  return out;
}

}  // namespace bunsen::engine
