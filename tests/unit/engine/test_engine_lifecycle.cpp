// Engine lifecycle on a tiny CPU model: cancellation while queued, mid-prefill and mid-decode (within one
// step, blocks returned), EOS, max_tokens 0, validation errors, errors inside a step, shutdown and the
// constructor's limit checks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/status.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

EngineRequest request(std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

// A sink that records events and, at the first event of kind `when`, cancels its own request (the id is
// published by the submitting thread right after submit returns).
struct SelfCancel {
  SelfCancel(Backend* b, EngineEvent::Kind k, int n) : backend(b), when(k), after(n) {}
  Backend* backend;
  EngineEvent::Kind when;
  int after;  // cancel at this many events of kind `when`
  std::atomic<RequestId> id{0};
  int seen = 0;
  Collector c;
  EventSink sink() {
    return [this, inner = c.sink()](EngineEvent&& e) mutable {
      const bool trigger = e.kind == when && ++seen == after;
      inner(std::move(e));
      if (!trigger) return;
      while (id.load() == 0) std::this_thread::yield();
      backend->cancel(id.load());
    };
  }
  void submit(EngineRequest r) { id = backend->submit(std::move(r), sink()); }
};

TEST(EngineLifecycle, CancelMidDecodeStopsWithinOneStep) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(4, 32), cpu_ctx());
  Engine engine(runner, EngineOptions{4, 32, {}, {}});
  SelfCancel sc{&engine, EngineEvent::Kind::kTokens, 3};
  sc.submit(request(make_prompt(0, 9), 100));
  ASSERT_TRUE(sc.c.wait());
  sc.c.expect_one_terminal();
  EXPECT_EQ(sc.c.last().kind, EngineEvent::Kind::kFinish);
  EXPECT_EQ(sc.c.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(sc.c.tokens().size(), 3u);  // cancelled before the next step was scheduled
  EXPECT_EQ(sc.c.last().usage.generated_tokens, 3);
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == runner.pool().n_blocks(); }));
}

TEST(EngineLifecycle, CancelMidPrefill) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 8), cpu_ctx());
  Engine engine(runner, EngineOptions{2, 8, {}, {}});  // a 100-token prompt takes 13 steps
  SelfCancel sc{&engine, EngineEvent::Kind::kPrefill, 2};
  sc.submit(request(make_prompt(1, 100), 10));
  ASSERT_TRUE(sc.c.wait());
  sc.c.expect_one_terminal();
  EXPECT_EQ(sc.c.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(sc.c.count(EngineEvent::Kind::kPrefill), 2);
  EXPECT_EQ(sc.c.events()[1].prefilled, 16);
  EXPECT_EQ(sc.c.count(EngineEvent::Kind::kTokens), 0);
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == runner.pool().n_blocks(); }));
}

TEST(EngineLifecycle, CancelWhileQueued) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(1, 16), cpu_ctx());
  Engine engine(runner, EngineOptions{1, 16, {}, {}});
  Collector queued;
  std::atomic<RequestId> queued_id{0};
  Collector first;
  auto first_sink = first.sink();
  std::atomic<bool> cancelled{false};
  // The running request cancels the queued one at its first token (max_batch 1: it cannot have started).
  engine.submit(request(make_prompt(2, 5), 30), [&](EngineEvent&& e) {
    const bool tok = e.kind == EngineEvent::Kind::kTokens;
    first_sink(std::move(e));
    if (tok && !cancelled.exchange(true)) {
      while (queued_id.load() == 0) std::this_thread::yield();
      engine.cancel(queued_id.load());
    }
  });
  queued_id = engine.submit(request(make_prompt(3, 5), 30), queued.sink());
  ASSERT_TRUE(queued.wait());
  queued.expect_one_terminal();
  EXPECT_EQ(queued.events().size(), 1u);  // no prefill, no tokens: only the kFinish
  EXPECT_EQ(queued.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(queued.last().usage.generated_tokens, 0);
  ASSERT_TRUE(first.wait());
  first.expect_one_terminal();
  EXPECT_EQ(first.last().finish, FinishReason::kLength);
  EXPECT_EQ(first.tokens().size(), 30u);
  engine.cancel(12345);  // unknown ids: no-op
  engine.cancel(1);      // finished: no-op
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == runner.pool().n_blocks(); }));
}

TEST(EngineLifecycle, EosStopsWithoutEmittingItAndIgnoreEosRunsOn) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(4, 32), cpu_ctx());
  Engine engine(runner, EngineOptions{4, 32, {}, {}});
  Collector probe;
  engine.submit(request(make_prompt(4, 6), 8), probe.sink());
  ASSERT_TRUE(probe.wait());
  const std::vector<int32_t> all = probe.tokens();
  ASSERT_EQ(all.size(), 8u);
  const int32_t eos = all[3];
  const auto stop_at = std::find(all.begin(), all.end(), eos);

  EngineRequest r = request(make_prompt(4, 6), 8);
  r.eos_ids = {eos};
  Collector stopped, ignored, by_default;
  engine.submit(r, stopped.sink());
  r.ignore_eos = true;
  engine.submit(r, ignored.sink());
  for (auto* c : {&stopped, &ignored}) ASSERT_TRUE(c->wait());
  EXPECT_EQ(stopped.tokens(), std::vector<int32_t>(all.begin(), stop_at));
  EXPECT_EQ(stopped.last().finish, FinishReason::kStop);
  EXPECT_EQ(ignored.tokens(), all);
  EXPECT_EQ(ignored.last().finish, FinishReason::kLength);

  engine.shutdown();  // one engine drives a runner at a time
  Engine with_default(runner, EngineOptions{4, 32, {eos}, {}});  // default EOS set when eos_ids is empty
  with_default.submit(request(make_prompt(4, 6), 8), by_default.sink());
  ASSERT_TRUE(by_default.wait());
  EXPECT_EQ(by_default.tokens(), stopped.tokens());
  EXPECT_EQ(by_default.last().finish, FinishReason::kStop);
}

TEST(EngineLifecycle, ZeroMaxTokensFinishesAtOnce) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16), cpu_ctx());
  Engine engine(runner, EngineOptions{2, 16, {}, {}});
  Collector c;
  engine.submit(request(make_prompt(5, 4), 0), c.sink());
  ASSERT_TRUE(c.wait());
  c.expect_one_terminal();
  EXPECT_EQ(c.events().size(), 1u);
  EXPECT_EQ(c.last().finish, FinishReason::kLength);
  EXPECT_EQ(c.last().usage.prompt_tokens, 4);
}

TEST(EngineLifecycle, InvalidRequestsThrowFromSubmit) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16), cpu_ctx());
  Engine engine(runner, EngineOptions{2, 16, {}, {}});
  Collector c;
  auto component_of = [&](EngineRequest r) -> std::string {
    try {
      engine.submit(std::move(r), c.sink());
    } catch (const Error& e) {
      return e.component();
    }
    return "accepted";
  };
  EXPECT_EQ(component_of(request({}, 4)), "engine");
  EXPECT_EQ(component_of(request({1, static_cast<int32_t>(kVocab)}, 4)), "engine");
  EXPECT_EQ(component_of(request({1, -1}, 4)), "engine");
  EXPECT_EQ(component_of(request({1, 2}, -1)), "engine");
  EngineRequest r = request({1, 2}, 4);
  r.top_logprobs = 21;
  EXPECT_EQ(component_of(r), "engine");
  r.top_logprobs = 20;
  r.sampling.top_p = 0.0f;
  EXPECT_EQ(component_of(r), "sampling");
  r.sampling.top_p = 1.0f;
  r.sampling.logit_bias = {{static_cast<int32_t>(kVocab), 1.0f}};
  EXPECT_EQ(component_of(r), "sampling");
  EXPECT_TRUE(c.events().empty());
  EXPECT_EQ(engine.stats().waiting, 0);
}

TEST(EngineLifecycle, SamplingErrorsEndTheRequestAndTheEngineKeepsServing) {
  auto m = tiny_model(/*nan_final_norm=*/true);  // every logit is NaN: sampling a row throws
  Runner runner(*m, runner_opts(4, 32), cpu_ctx());
  Engine engine(runner, EngineOptions{4, 32, {}, {}});
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<Collector>> cs;
    for (int i = 0; i < 3; ++i) {
      cs.push_back(std::make_unique<Collector>());
      engine.submit(request(make_prompt(i, 5 + i), 5), cs.back()->sink());
    }
    for (auto& c : cs) {
      ASSERT_TRUE(c->wait());
      c->expect_one_terminal();
      EXPECT_EQ(c->last().kind, EngineEvent::Kind::kError);
      EXPECT_FALSE(c->last().error.empty());
      EXPECT_TRUE(c->tokens().empty());
    }
  }
  EXPECT_TRUE(eventually([&] { return engine.stats().kv_blocks_free == runner.pool().n_blocks(); }));
}

TEST(EngineLifecycle, ShutdownCancelsEverythingAndRefusesNewWork) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(1, 8), cpu_ctx());
  auto engine = std::make_unique<Engine>(runner, EngineOptions{1, 8, {}, {}});
  std::vector<std::unique_ptr<Collector>> cs;
  // Request 0's first event holds the engine thread until shutdown() is on its way (at most 2 s), so a main
  // thread descheduled on a loaded machine cannot let request 1 finish before it: at most request 0 may.
  std::atomic<bool> shutting_down{false};
  for (int i = 0; i < 4; ++i) {
    cs.push_back(std::make_unique<Collector>());
    EventSink sink = cs.back()->sink();
    if (i == 0)
      sink = [inner = sink, &shutting_down, held = false](EngineEvent&& ev) mutable {
        if (!held) {
          held = true;
          for (int t = 0; t < 2000 && !shutting_down.load(); ++t) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        inner(std::move(ev));
      };
    engine->submit(request(make_prompt(i, 60), 60), sink);
  }
  shutting_down.store(true);
  engine->shutdown();
  int cancelled = 0;
  for (auto& c : cs) {
    ASSERT_TRUE(c->wait(std::chrono::milliseconds(1)));  // already delivered: shutdown joined the thread
    c->expect_one_terminal();
    cancelled += c->last().finish == FinishReason::kCancelled;
  }
  EXPECT_GE(cancelled, 3);  // batch 1: at most the first could have finished in the meantime
  Collector late;
  EXPECT_THROW(engine->submit(request({1}, 1), late.sink()), Error);
  engine->shutdown();  // idempotent
  engine.reset();
  EXPECT_EQ(runner.pool().n_free(), runner.pool().n_blocks());
}

TEST(EngineLifecycle, ShutdownFromASinkEndsTheLoopWithoutDeadlock) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16), cpu_ctx());
  auto engine = std::make_unique<Engine>(runner, EngineOptions{2, 16, {}, {}});
  Collector c;
  auto inner = c.sink();
  Engine* e = engine.get();
  engine->submit(request(make_prompt(6, 4), 50), [&, e](EngineEvent&& ev) {
    const bool tok = ev.kind == EngineEvent::Kind::kTokens;
    inner(std::move(ev));
    if (tok) e->shutdown();  // on the engine thread: must not join itself
  });
  ASSERT_TRUE(c.wait());
  c.expect_one_terminal();
  EXPECT_EQ(c.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(c.tokens().size(), 1u);
  engine.reset();  // joins the loop thread here
  EXPECT_EQ(runner.pool().n_free(), runner.pool().n_blocks());
}

TEST(EngineLifecycle, ConstructorChecksTheRunnerLimits) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(4, 32), cpu_ctx());
  auto component_of = [&](EngineOptions o) -> std::string {
    try {
      Engine e(runner, std::move(o));
    } catch (const Error& e) {
      return e.component();
    }
    return "accepted";
  };
  EXPECT_EQ(component_of(EngineOptions{5, 32, {}, {}}), "engine");  // > max_seqs / max_logit_rows
  EXPECT_EQ(component_of(EngineOptions{4, 33, {}, {}}), "engine");  // > max_tokens_per_step
  EXPECT_EQ(component_of(EngineOptions{0, 32, {}, {}}), "engine");
  EXPECT_EQ(component_of(EngineOptions{4, 32, {}, {}}), "accepted");
}

}  // namespace
}  // namespace bunsen::engine::test
