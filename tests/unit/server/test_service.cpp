// ModelService's text pipeline over a ReplayBackend and the real Qwen3 tokenizer/template of the demo model:
// stop strings, reasoning/content split, tool calls, logprobs, usage and the request-body parser.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "../../support/remove_at_exit.h"
#include "core/status.h"
#include "engine/engine.h"
#include "hub/demo_model.h"
#include "server/api/api_error.h"
#include "server/api/error_shapes.h"
#include "server/api/service.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace bunsen::server {
namespace {

using Json = nlohmann::ordered_json;

const std::string& demo_dir() {
  static const std::string dir = [] {
    auto root = std::filesystem::temp_directory_path() / ("bunsen_service_test_" + std::to_string(::getpid()));
    test_support::remove_at_exit(root);
    return hub::ensure_demo_model(root.string());
  }();
  return dir;
}

const text::Tokenizer& demo_tokenizer() {
  static std::unique_ptr<text::Tokenizer> tok = text::load_tokenizer(demo_dir());
  return *tok;
}

// Collects one generation's events and waits for its terminal event.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GenerationEvent> events;
  bool done = false;
  GenerationSink sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard<std::mutex> lock(mu);
      bool terminal = e.kind == GenerationEvent::Kind::kFinish || e.kind == GenerationEvent::Kind::kError;
      EXPECT_FALSE(done) << "event after the terminal event";
      events.push_back(std::move(e));
      if (terminal) {
        done = true;
        cv.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return done; })) << "no terminal event";
  }
  std::string joined(GenerationEvent::Kind kind) {
    std::string out;
    for (auto& e : events)
      if (e.kind == kind) out += e.text;
    return out;
  }
  const GenerationEvent& last() { return events.back(); }
};

class ServiceTest : public ::testing::Test {
 protected:
  void serve(const std::vector<std::string>& texts, int64_t max_request_tokens = 4096) {
    std::vector<std::vector<int32_t>> scripts;
    for (auto& t : texts) scripts.push_back(demo_tokenizer().encode(t, false));
    backend_ = std::make_unique<engine::ReplayBackend>(scripts, demo_tokenizer().vocab_size(), max_request_tokens);
    ModelServiceConfig cfg;
    cfg.model_id = "demo-qwen3-tiny";
    cfg.model_dir = demo_dir();
    cfg.parser_family = "qwen3";
    service_ = std::make_unique<ModelService>(cfg, demo_tokenizer(), text::ChatTemplate::load(demo_dir()), *backend_);
  }
  GenerationRequest request(int64_t max_tokens = 64) {
    GenerationRequest r;
    r.prompt = demo_tokenizer().encode("hello", false);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  void TearDown() override {
    if (backend_) backend_->shutdown();
  }
  std::unique_ptr<engine::ReplayBackend> backend_;
  std::unique_ptr<ModelService> service_;
};

TEST_F(ServiceTest, ReasoningAndContentAreSeparated) {
  serve({"<think>\nplan the answer\n</think>\n\nHello there"});
  Collector c;
  service_->start(request(), c.sink());
  c.wait();
  EXPECT_EQ(c.joined(GenerationEvent::Kind::kReasoning), "plan the answer");
  EXPECT_EQ(c.joined(GenerationEvent::Kind::kContent), "Hello there");
  ASSERT_EQ(c.last().kind, GenerationEvent::Kind::kFinish);
  EXPECT_EQ(c.last().cause, FinishCause::kEos);
  EXPECT_EQ(c.last().usage.prompt_tokens, 1);
  EXPECT_EQ(c.last().usage.generated_tokens, static_cast<int64_t>(c.last().output_ids.size()));
  EXPECT_EQ(demo_tokenizer().decode(c.last().output_ids), "<think>\nplan the answer\n</think>\n\nHello there");
}

TEST_F(ServiceTest, StopStringEndsGenerationAndIsExcluded) {
  serve({"one two three four five six"});
  Collector c;
  auto req = request();
  req.stop = {"four", "nine"};
  service_->start(std::move(req), c.sink());
  c.wait();
  EXPECT_EQ(c.joined(GenerationEvent::Kind::kContent), "one two three ");
  EXPECT_EQ(c.last().cause, FinishCause::kStopString);
  EXPECT_EQ(c.last().stop_sequence, "four");
  // Only tokens up to the stop were consumed: "five six" never reached the client.
  EXPECT_EQ(demo_tokenizer().decode(c.last().output_ids).find("five"), std::string::npos);
}

TEST_F(ServiceTest, ToolCallsAreParsedWhenRequested) {
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  serve({call + "\n" + call});
  Collector c;
  auto req = request(200);
  req.parse_tool_calls = true;
  service_->start(std::move(req), c.sink());
  c.wait();
  int calls = 0;
  for (auto& e : c.events)
    if (e.kind == GenerationEvent::Kind::kToolCall) {
      ++calls;
      EXPECT_EQ(e.tool_call.name, "get_weather");
      EXPECT_EQ(Json::parse(e.tool_call.arguments), Json::parse(R"({"city":"Paris"})"));
    }
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(c.last().n_tool_calls, 2);
  EXPECT_EQ(c.joined(GenerationEvent::Kind::kContent), "");
}

TEST_F(ServiceTest, ToolMarkupIsContentWithoutTools) {
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  serve({call});
  Collector c;
  service_->start(request(200), c.sink());
  c.wait();
  EXPECT_EQ(c.joined(GenerationEvent::Kind::kContent), call);
  EXPECT_EQ(c.last().n_tool_calls, 0);
}

TEST_F(ServiceTest, LengthAndLogprobsPerToken) {
  serve({"a b c d e f g h"});
  Collector c;
  auto req = request(3);
  req.top_logprobs = 2;
  service_->start(std::move(req), c.sink());
  c.wait();
  EXPECT_EQ(c.last().cause, FinishCause::kLength);
  EXPECT_EQ(c.last().usage.generated_tokens, 3);
  size_t n_logprobs = 0;
  std::string from_logprobs;
  for (auto& e : c.events)
    for (auto& lp : e.logprobs) {
      ++n_logprobs;
      from_logprobs += lp.token;
      EXPECT_EQ(std::string(lp.bytes.begin(), lp.bytes.end()), lp.token);
    }
  EXPECT_EQ(n_logprobs, 3u);
  EXPECT_EQ(from_logprobs, c.joined(GenerationEvent::Kind::kContent));
}

TEST_F(ServiceTest, AdmissionFailureIsA400BeforeAnyEvent) {
  serve({"x"}, /*max_request_tokens=*/16);
  Collector c;
  auto req = request(100);
  try {
    service_->start(std::move(req), c.sink());
    FAIL() << "expected ApiError";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "memory_admission");
    EXPECT_EQ(e.code, "context_over_budget");
  }
  EXPECT_TRUE(c.events.empty());
}

TEST_F(ServiceTest, CancelEndsWithCancelled) {
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "word ";
  serve({long_text});
  Collector c;
  auto gen = service_->start(request(1000), c.sink());
  gen->cancel();
  c.wait();
  EXPECT_EQ(c.last().cause, FinishCause::kCancelled);
  EXPECT_LT(c.last().usage.generated_tokens, 400);
}

TEST_F(ServiceTest, RendersChatAndDetectsOpenReasoning) {
  serve({"x"});
  Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  std::string off = service_->render_chat(messages, nullptr, Json{{"enable_thinking", false}});
  EXPECT_FALSE(ModelService::reasoning_open_at_end(off));
  EXPECT_NE(off.find("<|im_start|>assistant"), std::string::npos);
  EXPECT_TRUE(ModelService::reasoning_open_at_end("<|im_start|>assistant\n<think>\n"));
  EXPECT_THROW(service_->render_chat(messages, nullptr, nullptr, std::string("{{ x }}")), ApiError);
  EXPECT_TRUE(service_->accepts_model("demo-qwen3-tiny"));
  EXPECT_FALSE(service_->accepts_model("gpt-4o"));
}

TEST(JsonBody, RejectsBadBodiesWith400) {
  const std::vector<std::string> bad = {"", "   ", "{\"a\": 1", "{\"a\": NaN}", "[1, 2]", "\"str\"", "42",
                                        "{\"a\": \"\xff\xfe\"}", "{\"a\": \"\\ud800\"}", "{\"a\": \"\\udc00x\"}"};
  for (const auto& body : bad) {
    try {
      parse_json_body(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.type, "invalid_request_error");
    }
  }
  std::string deep(10000, '[');
  deep = "{\"a\": " + deep + std::string(10000, ']') + "}";
  EXPECT_THROW(parse_json_body(deep), ApiError);
  EXPECT_EQ(parse_json_body("{\"messages\": [{\"role\": \"user\"}]}")["messages"][0]["role"], "user");
}

TEST(JsonBody, FieldReadersNameTheParam) {
  Json obj = Json::parse(R"({"max_tokens": "10", "n": 2.0, "t": 1.5, "b": 1})");
  try {
    get_int(obj, "max_tokens", 0);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
  }
  EXPECT_EQ(get_int(obj, "n", 0), 2);
  EXPECT_THROW(get_int(obj, "t", 0), ApiError);
  EXPECT_THROW(get_bool(obj, "b", false), ApiError);
  EXPECT_EQ(get_int(obj, "absent", 7), 7);
}

TEST(ErrorShapes, BothDialects) {
  ApiError e(400, "memory_admission", "too long", "max_tokens", "context_over_budget");
  Json o = Json::parse(openai_error_json(e));
  EXPECT_EQ(o["error"]["type"], "memory_admission");
  EXPECT_EQ(o["error"]["param"], "max_tokens");
  EXPECT_EQ(o["error"]["code"], "context_over_budget");
  Json a = Json::parse(anthropic_error_json(ApiError(404, "not_found_error", "no such model")));
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "not_found_error");
  EXPECT_TRUE(is_anthropic_path("/v1/messages/count_tokens"));
  EXPECT_FALSE(is_anthropic_path("/v1/chat/completions"));
  ApiError mapped = to_api_error(Error("memory_admission", "prompt too long"));
  EXPECT_EQ(mapped.status, 400);
  EXPECT_EQ(mapped.code, "context_over_budget");
  EXPECT_EQ(to_api_error(Error("sampling", "top_p: must be in (0, 1]")).param, "top_p");
  EXPECT_EQ(to_api_error(Error("kernels", "boom")).status, 500);
}

}  // namespace
}  // namespace bunsen::server
