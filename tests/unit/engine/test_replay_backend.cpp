// ReplayBackend: scripts handed out in submission order, one token per event, kStop at the script's end
// or an EOS id, kLength at max_tokens, cancellation, validation and shutdown.
#include <gtest/gtest.h>

#include <atomic>

#include "core/status.h"
#include "engine_test_util.h"

namespace bunsen::engine::test {
namespace {

EngineRequest req(int64_t max_tokens, std::vector<int32_t> eos = {}) {
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = max_tokens;
  r.eos_ids = std::move(eos);
  return r;
}

TEST(ReplayBackend, ReplaysScriptsInOrderWithStopLengthAndEos) {
  ReplayBackend b({{5, 6, 7}, {8, 9}, {10, 11, 12, 13}}, 100, 64);
  Collector c0, c1, c2, c3, c4;
  EXPECT_EQ(b.submit(req(10), c0.sink()), 1);  // script 0 to its end
  b.submit(req(1), c1.sink());                  // script 1 cut by max_tokens
  b.submit(req(10, {12}), c2.sink());           // script 2 up to its EOS id
  EngineRequest ignore = req(10, {6});
  ignore.ignore_eos = true;
  b.submit(ignore, c3.sink());                  // script 0 again; the EOS id is ignored
  b.submit(req(0), c4.sink());                  // nothing generated
  for (auto* c : {&c0, &c1, &c2, &c3, &c4}) {
    ASSERT_TRUE(c->wait());
    c->expect_one_terminal();
    for (const EngineEvent& e : c->events()) {
      if (e.kind == EngineEvent::Kind::kTokens) {
        EXPECT_EQ(e.tokens.size(), 1u);
      }
    }
  }
  EXPECT_EQ(c0.tokens(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c0.last().finish, FinishReason::kStop);
  EXPECT_EQ(c0.last().usage.generated_tokens, 3);
  EXPECT_EQ(c0.last().usage.prompt_tokens, 3);
  EXPECT_EQ(c1.tokens(), (std::vector<int32_t>{8}));
  EXPECT_EQ(c1.last().finish, FinishReason::kLength);
  EXPECT_EQ(c2.tokens(), (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(c2.last().finish, FinishReason::kStop);
  EXPECT_EQ(c3.tokens(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(c4.tokens().empty());
  EXPECT_EQ(c4.last().finish, FinishReason::kLength);
  EXPECT_TRUE(eventually([&] { return b.stats().requests_finished == 5; }));
  EXPECT_EQ(b.stats().generated_tokens, 9);
}

TEST(ReplayBackend, CancelEndsALongReplay) {
  std::vector<int32_t> long_script(5000, 42);
  ReplayBackend b({long_script}, 100, 10000);
  Collector c;
  std::atomic<RequestId> id{0};
  std::atomic<int> seen{0};
  auto inner = c.sink();
  id = b.submit(req(6000), [&](EngineEvent&& e) {
    const bool tok = e.kind == EngineEvent::Kind::kTokens;
    inner(std::move(e));
    if (tok && ++seen == 3) {
      while (id.load() == 0) std::this_thread::yield();
      b.cancel(id.load());
    }
  });
  ASSERT_TRUE(c.wait(std::chrono::seconds(5)));
  c.expect_one_terminal();
  EXPECT_EQ(c.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(c.tokens().size(), 3u);  // cancelled before the next token
  b.cancel(id.load());               // finished: no-op
}

TEST(ReplayBackend, ValidatesAndShutsDown) {
  ReplayBackend b({{1, 2}}, 100, 20);
  Collector c;
  try {
    b.submit(req(18), c.sink());  // 3 + 18 > 20
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "memory_admission");
  }
  EngineRequest bad = req(1);
  bad.prompt = {100};
  EXPECT_THROW(b.submit(bad, c.sink()), Error);
  bad.prompt.clear();
  EXPECT_THROW(b.submit(bad, c.sink()), Error);
  EXPECT_TRUE(c.events().empty());

  ReplayBackend slow({std::vector<int32_t>(5000, 7)}, 100, 10000);
  Collector a;
  slow.submit(req(6000), a.sink());
  slow.shutdown();
  ASSERT_TRUE(a.wait(std::chrono::milliseconds(1)));
  a.expect_one_terminal();
  EXPECT_EQ(a.last().finish, FinishReason::kCancelled);
  EXPECT_THROW(slow.submit(req(1), a.sink()), Error);
  slow.shutdown();
}

}  // namespace
}  // namespace bunsen::engine::test
