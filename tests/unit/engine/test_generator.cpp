// Runner + generate on a tiny in-memory llama model: chunked prefill and block size do not change results,
// EOS/max_tokens/cancel finish reasons, memory admission, and KV blocks returned on every exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/status.h"
#include "engine/generator.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::engine {
namespace {

std::unique_ptr<model::Model> tiny_model(const std::string& extra = "") {
  auto cfg = model::parse_config(R"({"model_type":"llama","vocab_size":301,"hidden_size":32,"intermediate_size":48,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2)" + extra + "}", "tiny");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(cfg)) ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kBF16, 7));
  return model::create_model(cfg, std::move(ws));
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + 11) % 301);
  return p;
}

RunnerOptions opts(int64_t step, int32_t block, int64_t rows = 64) {
  RunnerOptions o;
  o.max_context = 128;
  o.max_tokens_per_step = step;
  o.max_logit_rows = rows;
  o.block_size = block;
  return o;
}

TEST(Generator, ChunkingAndBlockSizeDoNotChangeLogits) {
  auto m = tiny_model();
  Runner a(*m, opts(64, 16)), b(*m, opts(5, 3)), c(*m, opts(1, 1));
  auto p = prompt(23);
  auto la = score(a, p), lb = score(b, p), lc = score(c, p);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_NEAR(la[i], lb[i], 1e-4f * (1 + std::fabs(la[i])));
    EXPECT_NEAR(la[i], lc[i], 1e-4f * (1 + std::fabs(la[i])));
  }
}

TEST(Generator, GreedyDecodeMatchesRescoring) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  GenerateOptions go;
  go.sampling.temperature = 0;
  go.max_tokens = 12;
  auto p = prompt(9);
  GenerateResult res = generate(r, p, go);
  ASSERT_EQ(res.tokens.size(), 12u);
  EXPECT_EQ(res.finish, FinishReason::kLength);
  // Teacher-forced scoring of prompt + generated tokens reproduces every greedy choice.
  std::vector<int32_t> all = p;
  all.insert(all.end(), res.tokens.begin(), res.tokens.end());
  Runner s(*m, opts(64, 16));
  auto logits = score(s, all);
  for (size_t i = 0; i < res.tokens.size(); ++i) {
    const float* row = logits.data() + (p.size() - 1 + i) * 301;
    EXPECT_EQ(std::max_element(row, row + 301) - row, res.tokens[i]) << "step " << i;
  }
  EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
}

// top_k == 1 is greedy whatever the temperature (and a seed changes nothing): the same argmax path as
// temperature 0, so the same tokens.
TEST(Generator, TopK1IsGreedyAtAnyTemperature) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  GenerateOptions go;
  go.sampling.temperature = 0;
  go.max_tokens = 10;
  auto p = prompt(7);
  const std::vector<int32_t> greedy = generate(r, p, go).tokens;
  go.sampling.temperature = 1.5f;
  go.sampling.top_k = 1;
  go.sampling.seed = 5;
  EXPECT_EQ(generate(r, p, go).tokens, greedy);
  go.sampling.top_k = 0;  // a real draw at temperature 1.5 leaves the argmax path somewhere in 10 tokens
  go.sampling.seed = 6;
  EXPECT_NE(generate(r, p, go).tokens, greedy);
}

TEST(Generator, StopsOnEosAndCancel) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  GenerateOptions go;
  go.sampling.temperature = 0;
  go.max_tokens = 10;
  auto p = prompt(5);
  GenerateResult first = generate(r, p, go);
  go.eos_ids = {first.tokens[3]};
  GenerateResult stopped = generate(r, p, go);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  auto it = std::find(first.tokens.begin(), first.tokens.end(), first.tokens[3]);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(first.tokens.begin(), it));
  go.eos_ids.clear();
  int seen = 0;
  GenerateResult cancelled = generate(r, p, go, [&](int32_t) { return ++seen < 2; });
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens.size(), 2u);
  EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
}

// Pipelined greedy decoding (the CUDA default) forced on the CPU: each step's token is fed from the previous
// step's argmax slot before the host reads it, and a step queued past an EOS or a cancel is dropped. The
// tokens, finish reasons and counted steps equal step-by-step decoding; at most one step is wasted.
TEST(Generator, PipelinedGreedyEqualsStepByStep) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  auto p = prompt(6);
  auto run = [&](bool pipeline, int64_t max_tokens, std::vector<int32_t> eos = {}, int cancel_after = 0) {
    GenerateOptions go;
    go.sampling.temperature = 0;
    go.max_tokens = max_tokens;
    go.eos_ids = std::move(eos);
    go.pipeline = pipeline;
    int seen = 0;
    auto on_token = [&](int32_t) { return cancel_after == 0 || ++seen < cancel_after; };
    const int64_t steps_before = r.stats().steps;
    GenerateResult res = generate(r, p, go, on_token);
    EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
    return std::make_pair(res, r.stats().steps - steps_before);
  };
  for (int64_t n : {1, 2, 3, 14}) {
    SCOPED_TRACE(n);
    auto [plain, plain_steps] = run(false, n);
    auto [piped, piped_steps] = run(true, n);
    EXPECT_EQ(piped.tokens, plain.tokens);
    EXPECT_EQ(piped.finish, FinishReason::kLength);
    EXPECT_EQ(piped.stats.decode_steps, plain.stats.decode_steps);
    EXPECT_EQ(piped_steps, plain_steps);  // nothing queued past max_tokens
  }
  const std::vector<int32_t> full = run(false, 14).first.tokens;
  ASSERT_EQ(full.size(), 14u);
  // An EOS first emitted at e >= 1 (so a decode step produced it, with the next one already queued).
  size_t e = 1;
  while (e < full.size() && std::find(full.begin(), full.begin() + e, full[e]) != full.begin() + e) ++e;
  ASSERT_LT(e + 1, full.size()) << "the tiny model repeats one token: no EOS candidate";
  auto [plain, plain_steps] = run(false, 14, {full[e]});
  auto [piped, piped_steps] = run(true, 14, {full[e]});
  EXPECT_EQ(plain.tokens, std::vector<int32_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(e)));
  EXPECT_EQ(piped.finish, FinishReason::kStop);
  EXPECT_EQ(piped.tokens, plain.tokens);
  EXPECT_EQ(piped.stats.decode_steps, plain.stats.decode_steps);
  EXPECT_EQ(piped_steps, plain_steps + 1);  // the step queued after the EOS, dropped
  auto [cancelled, cancelled_steps] = run(true, 14, {}, 3);
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens, std::vector<int32_t>(full.begin(), full.begin() + 3));
  // The runner stays usable after a dropped step: the next generation is unchanged.
  EXPECT_EQ(run(true, 14).first.tokens, full);
}

// Sampled and pipelined, the runner draws (ops.h's sample(), here its CPU reference) from this request's RNG,
// one draw per token as sampling::sample takes them: the same tokens as the host sampler, for every setting.
TEST(Generator, PipelinedSamplingDrawsWhatTheHostSamplerDraws) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  auto p = prompt(6);
  GenerateOptions go;
  go.max_tokens = 16;
  using Setting = std::tuple<float, int, float, float>;  // temperature, top_k, top_p, min_p
  for (auto [t, k, top_p, min_p] :
       {Setting{1.0f, 0, 1.0f, 0.0f}, {0.7f, 20, 0.9f, 0.0f}, {1.3f, 0, 1.0f, 0.1f}}) {
    go.sampling.temperature = t;
    go.sampling.top_k = k;
    go.sampling.top_p = top_p;
    go.sampling.min_p = min_p;
    for (uint64_t seed : {3ull, 4ull}) {
      go.sampling.seed = seed;
      go.pipeline = false;
      const GenerateResult host = generate(r, p, go);
      go.pipeline = true;
      const GenerateResult piped = generate(r, p, go);
      EXPECT_EQ(piped.tokens, host.tokens) << "T " << t << " seed " << seed;
      EXPECT_EQ(piped.stats.decode_steps, host.stats.decode_steps);
    }
  }
  EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
}

// A fed step must follow an argmax step with one row per chunk.
TEST(Generator, FedStepNeedsAPreviousArgmaxRowPerChunk) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  kv::BlockTable t(r.block_size());
  for (int i = 0; i < 2; ++i) t.append(*r.pool().allocate());
  const std::vector<int32_t> ids = {5, 6, 7};
  SeqChunk c{&t, ids.data(), 1, 0, SeqChunk::Logits::kLast};
  EXPECT_THROW(r.enqueue_tokens({&c, 1}, /*feed=*/true), Error);  // nothing before it
  r.wait_tokens(r.enqueue_tokens({&c, 1}));
  SeqChunk two{&t, ids.data(), 2, 1, SeqChunk::Logits::kLast};
  EXPECT_THROW(r.enqueue_tokens({&two, 1}, /*feed=*/true), Error);  // not a one-token chunk
  r.step({&c, 1});
  EXPECT_THROW(r.enqueue_tokens({&c, 1}, /*feed=*/true), Error);  // a logits step came in between
  r.wait_tokens(r.enqueue_tokens({&c, 1}));
  SeqChunk next{&t, ids.data(), 1, 1, SeqChunk::Logits::kLast};
  const int32_t fed_from = r.wait_tokens(r.enqueue_tokens({&c, 1}))[0];
  const int32_t fed = r.wait_tokens(r.enqueue_tokens({&next, 1}, /*feed=*/true))[0];
  SeqChunk host{&t, &fed_from, 1, 1, SeqChunk::Logits::kLast};
  EXPECT_EQ(r.wait_tokens(r.enqueue_tokens({&host, 1}))[0], fed);  // fed == the host giving that token
  t.release_all(r.pool());
}

TEST(Generator, SeededSamplingIsReproducible) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));
  GenerateOptions go;
  go.sampling.temperature = 1.0f;
  go.sampling.seed = 42;
  go.max_tokens = 16;
  auto p = prompt(6);
  EXPECT_EQ(generate(r, p, go).tokens, generate(r, p, go).tokens);
  go.sampling.seed = 43;
  auto other = generate(r, p, go).tokens;
  go.sampling.seed = 42;
  EXPECT_NE(generate(r, p, go).tokens, other);
}

TEST(Generator, MemoryAdmissionRejectsBeforeWork) {
  auto m = tiny_model();
  Runner r(*m, opts(8, 4));  // 128-token context
  GenerateOptions go;
  go.max_tokens = 120;
  try {
    generate(r, prompt(20), go);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "memory_admission");
    EXPECT_NE(std::string(e.what()).find("140 tokens exceeds the 128-token"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
  EXPECT_THROW(generate(r, std::vector<int32_t>{}, go), Error);
  EXPECT_THROW(generate(r, std::vector<int32_t>{301}, GenerateOptions{}), Error);  // id out of range
  EXPECT_EQ(r.pool().n_free(), r.pool().n_blocks());
}

TEST(Generator, SlidingWindowModelRunsPastTheWindow) {
  auto mistral = model::parse_config(R"({"model_type":"mistral","vocab_size":301,"hidden_size":32,"intermediate_size":48,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"sliding_window":5})", "m");
  model::WeightStore ws;
  for (const auto& s : model::expected_tensors(mistral)) ws.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kF32, 3));
  auto mm = model::create_model(mistral, std::move(ws));
  Runner a(*mm, opts(64, 4)), b(*mm, opts(1, 2));
  auto la = score(a, prompt(20)), lb = score(b, prompt(20));
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-4f * (1 + std::fabs(la[i])));
}

}  // namespace
}  // namespace bunsen::engine
