// Every golden family through the serving engine (issue 9): 8 requests of different lengths that share the
// fixture's prompt as a prefix run concurrently on an Engine with batching, chunked prefill and the prefix
// cache, then run again (prefix-cache hits, incl. hybrid state checkpoints); every answer (greedy tokens and
// their logprobs) must equal, bit for bit, the same request run alone on an engine with batch 1 and no cache.
// The batched engine keeps sliding-window layers in their own block space (RunnerOptions::sliding_kv: blocks
// that left the window are released; the fixtures' windows are shorter than the prompts); the lone one keeps
// full-length KV. CPU, f32 weights from the fixture's synthetic generator.
#include <gtest/gtest.h>

#include <cstring>
#include <future>

#include "engine/engine.h"
#include "golden_file.h"
#include "model/registry.h"

namespace bunsen::golden {
namespace {

constexpr int kRequests = 8;
constexpr int64_t kGen = 6;

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t cached = 0;
  bool finished = false;
};

// Submits every prompt at once; returns the answers in prompt order.
std::vector<Answer> run_all(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<Answer> out(prompts.size());
  std::vector<std::promise<void>> done(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = kGen;
    r.sampling.temperature = 0.0f;
    r.top_logprobs = 2;
    r.ignore_eos = true;
    e.submit(std::move(r), [&out, &done, i](engine::EngineEvent&& ev) {
      Answer& a = out[i];
      if (ev.kind == engine::EngineEvent::Kind::kTokens) {
        for (const auto& t : ev.tokens) {
          a.tokens.push_back(t.token);
          a.logprobs.push_back(t.logprob);
        }
      } else if (ev.kind == engine::EngineEvent::Kind::kFinish || ev.kind == engine::EngineEvent::Kind::kError) {
        a.finished = ev.kind == engine::EngineEvent::Kind::kFinish;
        a.cached = ev.usage.cached_tokens;
        done[i].set_value();
      }
    });
  }
  for (auto& d : done) EXPECT_EQ(d.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
  return out;
}

engine::RunnerOptions runner_options(int64_t batch, int64_t max_context) {
  engine::RunnerOptions ro;
  ro.max_seqs = batch;
  ro.max_logit_rows = batch;
  ro.max_tokens_per_step = 24;  // prompts span several prefill chunks
  ro.max_context = max_context;
  ro.block_size = 4;
  return ro;
}

class GoldenBatching : public testing::TestWithParam<std::string> {};

TEST_P(GoldenBatching, BatchedAndCachedAnswersEqualAlone) {
  Fixture f = load_fixture(GetParam());
  auto m = model::load_model(build_checkpoint(f, DType::kF32, "batching"));
  const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  const int64_t vocab = m->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) {  // the shared prompt + 0..(3i) extra tokens, one of them truncated
    std::vector<int32_t> p(ids.begin(), ids.end() - (i == 3 ? 5 : 0));
    for (int j = 0; j < 3 * i; ++j) p.push_back(static_cast<int32_t>((i * 131 + j * 17 + 3) % vocab));
    prompts.push_back(std::move(p));
  }
  const int64_t max_context = static_cast<int64_t>(ids.size()) + 3 * kRequests + kGen + 8;

  std::vector<Answer> alone;
  {
    engine::Runner runner(*m, runner_options(1, max_context));
    engine::EngineOptions o;
    o.max_batch = 1;
    o.max_num_batched_tokens = 24;
    o.prefix_cache = false;
    engine::Engine e(runner, o);
    for (const auto& p : prompts) alone.push_back(run_all(e, {p})[0]);
    e.shutdown();
  }
  engine::RunnerOptions sliding = runner_options(kRequests, max_context);
  sliding.sliding_kv = true;
  engine::Runner runner(*m, sliding);
  const int32_t window = engine::sliding_space_window(m->kv_layout());
  if (window > 0) {  // a mix of sliding and full layers: the sliding space exists and the prompts outgrow it
    EXPECT_TRUE(runner.has_sliding_space());
    EXPECT_GT(static_cast<int64_t>(ids.size()), window) << "the prompts must be longer than the window";
  }
  engine::EngineOptions o;
  o.max_batch = kRequests;
  o.max_num_batched_tokens = 24;
  engine::Engine e(runner, o);
  const std::vector<Answer> first = run_all(e, prompts);
  const std::vector<Answer> again = run_all(e, prompts);
  e.shutdown();
  int64_t hits = 0;
  for (int i = 0; i < kRequests; ++i) {
    for (const auto* got : {&first[static_cast<size_t>(i)], &again[static_cast<size_t>(i)]}) {
      const Answer& want = alone[static_cast<size_t>(i)];
      ASSERT_TRUE(got->finished && want.finished) << "request " << i;
      ASSERT_EQ(got->tokens, want.tokens) << "request " << i;
      ASSERT_EQ(got->logprobs.size(), want.logprobs.size());
      for (size_t t = 0; t < want.logprobs.size(); ++t)
        EXPECT_EQ(std::memcmp(&got->logprobs[t], &want.logprobs[t], sizeof(float)), 0)
            << "request " << i << " token " << t << ": " << got->logprobs[t] << " vs " << want.logprobs[t];
    }
    hits += again[static_cast<size_t>(i)].cached;
  }
  EXPECT_GT(hits, 0) << "the resent prompts hit the prefix cache";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenBatching, testing::ValuesIn(fixture_names()),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace bunsen::golden
