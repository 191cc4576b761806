// Failure paths of the OpenAI routes with a fake engine::Backend: an engine error after streaming began
// (a spec-shaped SSE error event, then the stream closes without [DONE]), the same error on a non-stream
// request (500 in OpenAI's shape), a start() that fails for the second of n choices (JSON 400 before any
// SSE byte; the first choice is cancelled), and a non-stream client that leaves mid-generation.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "core/status.h"
#include "test_openai_util.h"

namespace bunsen::server::openai::testing {
namespace {

// Each request runs on its own thread: kError mode sends the script's tokens, then kError; kHang mode
// sends the tokens, then waits for cancel() and finishes kCancelled. Submit number `fail_at` throws.
class FakeBackend final : public engine::Backend {
 public:
  enum class Mode { kError, kHang };
  FakeBackend(Mode mode, std::vector<int32_t> tokens, int fail_at = -1)
      : mode_(mode), tokens_(std::move(tokens)), fail_at_(fail_at) {}
  ~FakeBackend() override { shutdown(); }

  engine::RequestId submit(engine::EngineRequest req, engine::EventSink sink) override {
    std::lock_guard lock(mu_);
    if (submits_++ == fail_at_) throw Error("memory_admission", "prompt + max_tokens do not fit");
    const engine::RequestId id = next_id_++;
    threads_.emplace_back([this, id, sink = std::move(sink), n_prompt = req.prompt.size()] { run(id, sink, n_prompt); });
    return id;
  }
  void cancel(engine::RequestId id) override {
    std::lock_guard lock(mu_);
    cancelled_.insert(id);
    cv_.notify_all();
  }
  engine::EngineStats stats() const override { return {}; }
  int64_t max_request_tokens() const override { return kContext; }
  int64_t vocab_size() const override { return kVocab; }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  bool was_cancelled(engine::RequestId id, int wait_ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return cancelled_.count(id) > 0; });
  }

 private:
  void run(engine::RequestId id, const engine::EventSink& sink, size_t n_prompt) {
    engine::EngineEvent tokens;
    tokens.kind = engine::EngineEvent::Kind::kTokens;
    for (int32_t t : tokens_) tokens.tokens.push_back({t, 0.0f, {}});
    sink(std::move(tokens));
    engine::EngineEvent end;
    end.usage.prompt_tokens = static_cast<int64_t>(n_prompt);
    if (mode_ == Mode::kError) {
      end.kind = engine::EngineEvent::Kind::kError;
      end.error = "device lost";
    } else {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || cancelled_.count(id) > 0; });
      end.kind = engine::EngineEvent::Kind::kFinish;
      end.finish = engine::FinishReason::kCancelled;
    }
    sink(std::move(end));
  }

  Mode mode_;
  std::vector<int32_t> tokens_;
  int fail_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::set<engine::RequestId> cancelled_;
  int submits_ = 0;
  engine::RequestId next_id_ = 1;
  bool stopping_ = false;
};

class FakeRig {
 public:
  explicit FakeRig(FakeBackend::Mode mode, int fail_at = -1)
      : backend_(mode, qwen3_tokenizer().encode("Hi", false), fail_at),
        service_(config(), qwen3_tokenizer(), qwen3_template(), backend_), server_(http::ServerOptions{}) {
    register_openai_routes(server_.router(), service_);
    server_.start();
  }
  ~FakeRig() {
    server_.stop();
    backend_.shutdown();
  }
  uint16_t port() const { return server_.port(); }
  FakeBackend& backend() { return backend_; }

 private:
  static ModelServiceConfig config() {
    ModelServiceConfig c;
    c.model_id = kModelId;
    c.parser_family = "qwen3";
    return c;
  }
  FakeBackend backend_;
  ModelService service_;
  http::Server server_;
};

TEST(OpenAiFailures, EngineErrorMidStreamIsAnSseErrorEventThenTheStreamEnds) {
  FakeRig rig(FakeBackend::Mode::kError);
  TestClient c(rig.port());
  c.send_request("POST", "/v1/chat/completions", {{"Content-Type", "application/json"}},
                 user_chat("hi", {{"stream", true}}).dump());
  auto head = c.read_head();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  bool ended = false;
  auto events = c.read_sse(100, &ended);
  EXPECT_TRUE(ended);
  ASSERT_GE(events.size(), 3u);
  Json first = Json::parse(events[0].data);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  Json content = Json::parse(events[1].data);
  EXPECT_EQ(content["choices"][0]["delta"]["content"], "Hi");
  Json err = Json::parse(events.back().data, nullptr, false);
  ASSERT_TRUE(err.is_object()) << events.back().data;
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
  for (const auto& e : events) EXPECT_NE(e.data, "[DONE]");
}

TEST(OpenAiFailures, EngineErrorWithoutStreamIs500) {
  FakeRig rig(FakeBackend::Mode::kError);
  auto r = http::testing::fetch(rig.port(), "POST", "/v1/chat/completions", {{"Content-Type", "application/json"}},
                                user_chat("hi").dump());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 500);
  Json err = Json::parse(r->body);
  EXPECT_EQ(err["error"]["type"], "server_error");
  auto c = http::testing::fetch(rig.port(), "POST", "/v1/completions", {{"Content-Type", "application/json"}},
                                R"({"prompt": "x", "n": 2})");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status, 500);
}

TEST(OpenAiFailures, SecondChoiceFailingToStartCancelsTheFirstAndAnswersJson) {
  FakeRig rig(FakeBackend::Mode::kHang, /*fail_at=*/1);
  auto r = http::testing::fetch(rig.port(), "POST", "/v1/chat/completions", {{"Content-Type", "application/json"}},
                                user_chat("hi", {{"n", 2}, {"stream", true}}).dump());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400);
  Json err = Json::parse(r->body);
  EXPECT_EQ(err["error"]["code"], "context_over_budget");
  EXPECT_TRUE(rig.backend().was_cancelled(1, 2000)) << "the first choice kept running";
}

TEST(OpenAiFailures, NonStreamClientLeavingCancelsItsGeneration) {
  FakeRig rig(FakeBackend::Mode::kHang);
  {
    TestClient c(rig.port());
    c.send_request("POST", "/v1/chat/completions", {{"Content-Type", "application/json"}}, user_chat("hi").dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(rig.backend().was_cancelled(1, 2000));
}

}  // namespace
}  // namespace bunsen::server::openai::testing
