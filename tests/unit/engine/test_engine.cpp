// Engine on a tiny CPU model: batched outputs equal the single-sequence path bit for bit (greedy tokens,
// logprobs, seeded sampling), with and without preemption; logprobs shape; memory admission.
#include <gtest/gtest.h>

#include <cmath>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

struct Req {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
};

// 32 requests of different prompt lengths (3..42) and max_tokens (4..24).
std::vector<Req> mixed_requests(int n = 32) {
  std::vector<Req> v;
  for (int i = 0; i < n; ++i) v.push_back({make_prompt(i, 3 + (i * 7) % 40), 4 + (i * 5) % 21});
  return v;
}

EngineRequest to_request(const Req& r, const sampling::SamplingParams& sp, int top_logprobs = -1) {
  EngineRequest e;
  e.prompt = r.prompt;
  e.max_tokens = r.max_tokens;
  e.sampling = sp;
  e.top_logprobs = top_logprobs;
  return e;
}

sampling::SamplingParams greedy() {
  sampling::SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// Submits every request at once and waits for all of them; checks the one-terminal-event rule.
std::vector<std::unique_ptr<Collector>> run_all(Backend& b, const std::vector<EngineRequest>& reqs) {
  std::vector<std::unique_ptr<Collector>> cs;
  for (const auto& r : reqs) {
    cs.push_back(std::make_unique<Collector>());
    b.submit(r, cs.back()->sink());
  }
  for (auto& c : cs) {
    EXPECT_TRUE(c->wait());
    c->expect_one_terminal();
  }
  return cs;
}

// Each request alone through an engine of batch 1 (submitted one after another).
std::vector<std::unique_ptr<Collector>> run_alone(model::Model& m, const std::vector<EngineRequest>& reqs) {
  Runner r(m, runner_opts(1, 16), cpu_ctx());
  Engine e(r, EngineOptions{1, 16, {}, {}});
  std::vector<std::unique_ptr<Collector>> cs;
  for (const auto& q : reqs) {
    cs.push_back(std::make_unique<Collector>());
    e.submit(q, cs.back()->sink());
    EXPECT_TRUE(cs.back()->wait());
  }
  return cs;
}

class BatchInvariance : public ::testing::TestWithParam<int64_t> {};

TEST_P(BatchInvariance, GreedyTokensAndLogprobsEqualTheSingleSequencePath) {
  const int64_t batch = GetParam();
  auto m = tiny_model();
  const std::vector<Req> reqs = mixed_requests();
  std::vector<EngineRequest> ereqs;
  for (const Req& r : reqs) ereqs.push_back(to_request(r, greedy(), 0));

  // The batched run of 32 also uses two threads: results must not depend on the thread split either.
  Runner runner(*m, runner_opts(batch, 256), cpu_ctx(batch == 32 ? 2 : 1));
  Engine engine(runner, EngineOptions{batch, 256, {}, {}});
  auto batched = run_all(engine, ereqs);
  auto alone = run_alone(*m, ereqs);

  Runner single(*m, runner_opts(1, 16), cpu_ctx());
  GenerateOptions go;
  go.sampling = greedy();
  for (size_t i = 0; i < reqs.size(); ++i) {
    go.max_tokens = reqs[i].max_tokens;
    const GenerateResult want = generate(single, reqs[i].prompt, go);
    EXPECT_EQ(batched[i]->tokens(), want.tokens) << "request " << i;
    const EngineEvent fin = batched[i]->last();
    EXPECT_EQ(fin.kind, EngineEvent::Kind::kFinish);
    EXPECT_EQ(fin.finish, FinishReason::kLength);
    EXPECT_EQ(fin.usage.prompt_tokens, static_cast<int64_t>(reqs[i].prompt.size()));
    EXPECT_EQ(fin.usage.generated_tokens, reqs[i].max_tokens);
    // Logprobs come from the raw logits: equal bit for bit only if every kernel is batch-invariant.
    const auto a = batched[i]->token_outs(), b = alone[i]->token_outs();
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].logprob, b[t].logprob) << "request " << i << " token " << t;
  }
  EXPECT_TRUE(eventually([&] { return engine.stats().requests_finished == 32; }));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_free, runner.pool().n_blocks());
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_GT(s.steps, 0);
}

INSTANTIATE_TEST_SUITE_P(Engine, BatchInvariance, ::testing::Values(8, 32));

TEST(Engine, BatchInvariantOnEveryCpuIsaLevel) {
  struct Restore {
    ~Restore() { kernels::cpu::set_isa_for_testing(kernels::cpu::detected_isa()); }
  } restore;
  auto m = tiny_model();
  std::vector<EngineRequest> ereqs;
  for (const Req& r : mixed_requests(12)) ereqs.push_back(to_request(r, greedy(), 0));
  for (auto isa : {kernels::cpu::Isa::kScalar, kernels::cpu::Isa::kAvx2, kernels::cpu::Isa::kAvx512}) {
    if (!kernels::cpu::isa_supported(isa)) continue;
    kernels::cpu::set_isa_for_testing(isa);
    Runner runner(*m, runner_opts(12, 256), cpu_ctx());
    Engine engine(runner, EngineOptions{12, 256, {}, {}});
    auto batched = run_all(engine, ereqs);
    auto alone = run_alone(*m, ereqs);
    for (size_t i = 0; i < ereqs.size(); ++i) {
      const auto a = batched[i]->token_outs(), b = alone[i]->token_outs();
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t) {
        EXPECT_EQ(a[t].token, b[t].token) << kernels::cpu::isa_name(isa) << " request " << i;
        EXPECT_EQ(a[t].logprob, b[t].logprob) << kernels::cpu::isa_name(isa) << " request " << i;
      }
    }
  }
}

TEST(Engine, SeededSamplingIsTheSameAloneAndInABatch) {
  auto m = tiny_model();
  std::vector<EngineRequest> ereqs;
  const std::vector<Req> reqs = mixed_requests(16);
  for (size_t i = 0; i < reqs.size(); ++i) {
    sampling::SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_p = 0.9f;
    sp.seed = 1000 + i;
    ereqs.push_back(to_request(reqs[i], sp));
  }
  Runner runner(*m, runner_opts(8, 64), cpu_ctx());
  Engine engine(runner, EngineOptions{8, 64, {}, {}});
  auto batched = run_all(engine, ereqs);
  auto alone = run_alone(*m, ereqs);
  Runner single(*m, runner_opts(1, 16), cpu_ctx());
  int differs_from_greedy = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(batched[i]->tokens(), alone[i]->tokens()) << "request " << i;
    GenerateOptions go;
    go.sampling = ereqs[i].sampling;
    go.max_tokens = reqs[i].max_tokens;
    EXPECT_EQ(batched[i]->tokens(), generate(single, reqs[i].prompt, go).tokens) << "request " << i;
    go.sampling = greedy();
    differs_from_greedy += batched[i]->tokens() != generate(single, reqs[i].prompt, go).tokens;
  }
  EXPECT_GT(differs_from_greedy, 0);  // the requests really sampled
}

// EngineOptions::device_sampling: plain sampled rows drawn by ops.h's sample() where the logits are (on the
// CPU its reference), the rows that need the host sampler (penalties, logit_bias, logprobs) copied back,
// greedy rows by argmax, all in one batch: every request's tokens and logprobs equal the host-only engine's.
TEST(Engine, DeviceSamplingDrawsTheHostSamplersTokensInMixedBatches) {
  auto m = tiny_model();
  std::vector<EngineRequest> ereqs;
  const std::vector<Req> reqs = mixed_requests(24);
  for (size_t i = 0; i < reqs.size(); ++i) {
    sampling::SamplingParams sp;
    sp.temperature = 0.7f + 0.1f * static_cast<float>(i % 4);
    sp.seed = 500 + i;
    int top_logprobs = -1;
    switch (i % 6) {
      case 0:
        sp = greedy();
        break;
      case 1:
        sp.top_p = 0.9f;
        break;
      case 2:
        sp.top_k = 20;
        sp.min_p = 0.02f;
        break;
      case 3:
        sp.repetition_penalty = 1.3f;
        break;  // a processor: the host sampler
      case 4:
        top_logprobs = 3;
        break;  // logprobs: the host sampler
      default:
        sp.logit_bias = {{7, 2.5f}};
        break;  // a processor: the host sampler
    }
    ereqs.push_back(to_request(reqs[i], sp, top_logprobs));
  }
  std::vector<std::unique_ptr<Collector>> got[2];
  for (int device : {0, 1}) {
    Runner runner(*m, runner_opts(8, 64), cpu_ctx());
    EngineOptions eo{8, 64, {}, {}};
    eo.device_sampling = device == 1;
    Engine engine(runner, eo);
    got[device] = run_all(engine, ereqs);
  }
  int sampled_differs_from_greedy = 0;
  Runner single(*m, runner_opts(1, 16), cpu_ctx());
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[1][i]->tokens(), got[0][i]->tokens());
    EXPECT_EQ(static_cast<int64_t>(got[1][i]->tokens().size()), reqs[i].max_tokens);
    const auto a = got[0][i]->token_outs(), b = got[1][i]->token_outs();
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_EQ(a[t].logprob, b[t].logprob);
      EXPECT_EQ(a[t].top.size(), b[t].top.size());
    }
    if (i % 6 == 1 || i % 6 == 2) {
      GenerateOptions go;
      go.sampling = greedy();
      go.max_tokens = reqs[i].max_tokens;
      sampled_differs_from_greedy += got[1][i]->tokens() != generate(single, reqs[i].prompt, go).tokens;
    }
  }
  EXPECT_GT(sampled_differs_from_greedy, 0);  // the device-drawn rows really sampled
}

// Sampled rows whose logits have no candidate end with the host sampler's error on either path.
TEST(Engine, DeviceSampledRowsWithoutCandidatesEndWithTheHostSamplersError) {
  auto m = tiny_model(/*nan_final_norm=*/true);  // every logit is NaN
  std::string errors[2];
  for (int device : {0, 1}) {
    Runner runner(*m, runner_opts(4, 32), cpu_ctx());
    EngineOptions eo{4, 32, {}, {}};
    eo.device_sampling = device == 1;
    Engine engine(runner, eo);
    sampling::SamplingParams sp;
    sp.temperature = 0.9f;
    sp.seed = 3;
    auto cs = run_all(engine,
                      {to_request({make_prompt(1, 6), 4}, sp), to_request({make_prompt(2, 6), 4}, greedy())});
    for (auto& c : cs) {
      EXPECT_EQ(c->last().kind, EngineEvent::Kind::kError);
      EXPECT_TRUE(c->tokens().empty());
    }
    errors[device] = cs[0]->last().error + " | " + cs[1]->last().error;
    EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == runner.pool().n_blocks(); }));
  }
  EXPECT_EQ(errors[1], errors[0]);
  EXPECT_NE(errors[0].find("no finite logit"), std::string::npos) << errors[0];
}

TEST(Engine, TopLogprobsAreSortedAndIncludeTheGreedyChoice) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(4, 32), cpu_ctx());
  Engine engine(runner, EngineOptions{4, 32, {}, {}});
  auto cs = run_all(engine, {to_request({make_prompt(1, 7), 6}, greedy(), 5),
                             to_request({make_prompt(2, 3), 4}, greedy(), 5)});
  for (auto& c : cs) {
    const auto outs = c->token_outs();
    ASSERT_FALSE(outs.empty());
    for (const TokenOut& t : outs) {
      ASSERT_EQ(t.top.size(), 5u);
      EXPECT_TRUE(std::isfinite(t.logprob));
      EXPECT_LE(t.logprob, 0.0f);
      for (size_t k = 1; k < t.top.size(); ++k) EXPECT_GE(t.top[k - 1].logprob, t.top[k].logprob);
      EXPECT_EQ(t.top[0].token, t.token);  // greedy picks the most likely token
      EXPECT_EQ(t.top[0].logprob, t.logprob);
    }
  }
}

TEST(Engine, RejectsRequestsThatCanNeverFit) {
  auto m = tiny_model();
  // Pool: 20 blocks of 4 = 80 tokens, less than the 128-token context.
  Runner runner(*m, runner_opts(4, 32, /*n_blocks=*/20, /*block=*/4), cpu_ctx());
  Engine engine(runner, EngineOptions{4, 32, {}, {}});
  EXPECT_EQ(engine.max_request_tokens(), 80);
  EngineRequest r = to_request({make_prompt(0, 30), 51}, greedy());
  Collector c;
  try {
    engine.submit(r, c.sink());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "memory_admission");
    const std::string what = e.what();
    EXPECT_NE(what.find("context_over_budget"), std::string::npos) << what;
    EXPECT_NE(what.find("81 tokens exceeds the 80-token"), std::string::npos) << what;
  }
  r.max_tokens = 50;  // exactly the limit: accepted and completed
  auto cs = run_all(engine, {r});
  EXPECT_EQ(cs[0]->tokens().size(), 50u);
  EXPECT_TRUE(c.events().empty());  // the refused request's sink was never called
  EXPECT_EQ(engine.stats().max_request_tokens, 80);
}

TEST(Engine, BurstLargerThanThePoolCompletesWithPreemption) {
  auto m = tiny_model();
  // 24 blocks of 4 = 96 tokens of KV; each request needs 40..70 tokens, the burst ~700.
  Runner runner(*m, runner_opts(8, 64, /*n_blocks=*/24, /*block=*/4), cpu_ctx());
  Engine engine(runner, EngineOptions{8, 64, {}, {}});
  std::vector<Req> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back({make_prompt(100 + i, 20 + (i * 3) % 20), 20 + (i * 7) % 11});
  std::vector<EngineRequest> ereqs;
  for (const Req& r : reqs) ereqs.push_back(to_request(r, greedy(), 0));
  auto cs = run_all(engine, ereqs);
  auto alone = run_alone(*m, ereqs);
  Runner single(*m, runner_opts(1, 16), cpu_ctx());
  for (size_t i = 0; i < reqs.size(); ++i) {
    GenerateOptions go;
    go.sampling = greedy();
    go.max_tokens = reqs[i].max_tokens;
    EXPECT_EQ(cs[i]->tokens(), generate(single, reqs[i].prompt, go).tokens) << "request " << i;
    EXPECT_EQ(cs[i]->last().finish, FinishReason::kLength);
    const auto a = cs[i]->token_outs(), b = alone[i]->token_outs();  // recompute is bit-exact too
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].logprob, b[t].logprob) << "request " << i;
    // A preempted request reports its prompt once: kPrefill values never go backwards.
    int64_t last = 0;
    for (const EngineEvent& e : cs[i]->events())
      if (e.kind == EngineEvent::Kind::kPrefill) {
        EXPECT_GT(e.prefilled, last);
        last = e.prefilled;
      }
  }
  // Stats are refreshed at the end of the step whose events were just delivered.
  EXPECT_TRUE(eventually([&] { return engine.stats().requests_finished == 12; }));
  const EngineStats s = engine.stats();
  EXPECT_GT(s.preemptions, 0);
  int64_t prompt_total = 0, gen_total = 0;
  for (const Req& r : reqs) prompt_total += r.prompt.size(), gen_total += r.max_tokens;
  EXPECT_EQ(s.prompt_tokens, prompt_total);
  EXPECT_EQ(s.generated_tokens, gen_total);
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == 24; }));
}

}  // namespace
}  // namespace bunsen::engine::test
