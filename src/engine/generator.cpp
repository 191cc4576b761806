// generate() and score(): one sequence driven through Runner::step.
#include "engine/generator.h"

#include <algorithm>
#include <chrono>

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

  // The next token after a step that asks for the last row's logits. Greedy (sample() applies no processor
  // then) takes the argmax where the logits are: on CUDA a 4-byte copy instead of the whole row (513 KB for
  // a 128k vocabulary) and a host scan of it, which left the GPU idle ~250-400 us per token.
  auto next_token = [&](const SeqChunk& c) -> int32_t {
    if (opts.sampling.greedy()) {
      const int32_t id = runner.step_argmax({&c, 1})[0];
      check(id >= 0, "sampling", "every logit is NaN");  // as sampling::sample's greedy
      return id;
    }
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
    if (static_cast<int64_t>(res.tokens.size()) >= opts.max_tokens) {
      res.finish = FinishReason::kLength;
      break;
    }
    seq.ensure(pos + 1);
    SeqChunk c{&seq.table(), &res.tokens.back(), 1, pos, SeqChunk::Logits::kLast};
    tok = next_token(c);
    ++pos;
    ++res.stats.decode_steps;
  }
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
