// POST /v1/messages and /v1/messages/count_tokens over real sockets, with replayed Qwen3 output through the
// real tokenizer, parser and template: non-stream shapes, the exact streaming grammar, thinking and tool_use
// blocks, stop_sequence / max_tokens stop reasons, usage, count_tokens, and the 4xx answers for bad input
// with the server still serving afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dialect_rig.h"

namespace bunsen::server::dialect_testing {
namespace {

constexpr const char* kPath = "/v1/messages";

Json ask(const std::string& text, Json extra = Json::object()) {
  Json b{{"model", kModel}, {"max_tokens", 64}, {"messages", Json::array({Json{{"role", "user"}, {"content", text}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

Json weather_tool() {
  return Json::parse(R"({"name": "get_weather", "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})");
}

// The OpenAI-shaped tool the template sees for weather_tool().
Json weather_tool_openai() {
  Json t = weather_tool();
  return Json{{"type", "function"},
              {"function", Json{{"name", t["name"]}, {"description", t["description"]}, {"parameters", t["input_schema"]}}}};
}

TEST(AnthropicMessages, NonStreamSplitsThinkingFromText) {
  Rig rig({kReasoningText});
  Json m = rig.post_ok(kPath, ask("hi"));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], kModel);
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(m["content"].size(), 2u) << m.dump();
  EXPECT_EQ(m["content"][0], (Json{{"type", "thinking"}, {"thinking", "plan"}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1], (Json{{"type", "text"}, {"text", "Hello"}}));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  const size_t n_prompt = rendered_tokens(Json::array({Json{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(m["usage"]["input_tokens"], n_prompt);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["output_tokens"], script_tokens(kReasoningText));
}

TEST(AnthropicMessages, NonStreamToolUseBlock) {
  Rig rig({kToolCallText});
  Json m = rig.post_ok(kPath, ask("weather?", {{"tools", Json::array({weather_tool()})}}));
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  const Json& b = m["content"][0];
  EXPECT_EQ(b["type"], "tool_use");
  EXPECT_EQ(b["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(b["name"], "get_weather");
  EXPECT_EQ(b["input"], (Json{{"city", "Paris"}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  // The tools reached the template: input_tokens counts the tool preamble.
  const size_t n_prompt = rendered_tokens(Json::array({Json{{"role", "user"}, {"content", "weather?"}}}),
                                          Json::array({weather_tool_openai()}));
  EXPECT_EQ(m["usage"]["input_tokens"], n_prompt);
}

TEST(AnthropicMessages, WithoutToolsToolCallMarkupStaysText) {
  Rig rig({kToolCallText});
  Json m = rig.post_ok(kPath, ask("weather?"));
  ASSERT_EQ(m["content"].size(), 1u);
  EXPECT_EQ(m["content"][0]["type"], "text");
  EXPECT_EQ(m["stop_reason"], "end_turn");
}

TEST(AnthropicMessages, StopSequenceAndMaxTokens) {
  Rig rig({"Hello world. STOP here", "one two three four five six seven"});
  Json m = rig.post_ok(kPath, ask("x", {{"stop_sequences", {"STOP"}}}));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "STOP");
  ASSERT_EQ(m["content"].size(), 1u);
  EXPECT_EQ(m["content"][0]["text"], "Hello world. ");
  Json cut = rig.post_ok(kPath, ask("x", {{"max_tokens", 2}}));
  EXPECT_EQ(cut["stop_reason"], "max_tokens");
  EXPECT_EQ(cut["usage"]["output_tokens"], 2);
}

// Event names, checked against each data payload's "type".
std::vector<std::string> names_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    Json d = Json::parse(e.data, nullptr, false);
    EXPECT_EQ(d.value("type", ""), e.event) << e.data;
    out.push_back(e.event);
  }
  return out;
}

TEST(AnthropicMessages, StreamFollowsTheGrammarExactly) {
  Rig rig({kReasoningText});
  int status = 0;
  bool ended = false;
  auto events = rig.stream(kPath, ask("hi", {{"stream", true}}), &status, &ended);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(ended);
  std::vector<std::string> names = names_of(events);
  // Collapse runs of deltas, then compare with the grammar.
  std::vector<std::string> shape;
  for (const auto& n : names)
    if (shape.empty() || n != "content_block_delta" || shape.back() != n) shape.push_back(n);
  std::vector<std::string> expected = {"message_start", "ping", "content_block_start", "content_block_delta",
                                       "content_block_stop", "content_block_start", "content_block_delta",
                                       "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(shape, expected);
  std::vector<Json> d = payloads(events);
  const Json& start = d[0]["message"];
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_TRUE(start["content"].empty());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], rendered_tokens(Json::array({Json{{"role", "user"}, {"content", "hi"}}})));
  std::string thinking, text;
  for (const Json& j : d) {
    if (j["type"] != "content_block_delta") continue;
    if (j["delta"]["type"] == "thinking_delta") {
      EXPECT_EQ(j["index"], 0);
      thinking += j["delta"]["thinking"].get<std::string>();
    } else {
      EXPECT_EQ(j["delta"]["type"], "text_delta");
      EXPECT_EQ(j["index"], 1);
      text += j["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(thinking, "plan");
  EXPECT_EQ(text, "Hello");
  const Json& delta = d[d.size() - 2];
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_TRUE(delta["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(delta["usage"]["output_tokens"], script_tokens(kReasoningText));
}

TEST(AnthropicMessages, StreamToolUseSendsInputJsonDelta) {
  Rig rig({std::string("Let me check.\n") + kToolCallText});
  auto events = rig.stream(kPath, ask("weather?", {{"stream", true}, {"tools", Json::array({weather_tool()})}}));
  std::vector<Json> d = payloads(events);
  std::vector<Json> starts;
  std::string partial;
  for (const Json& j : d) {
    if (j["type"] == "content_block_start") starts.push_back(j);
    if (j["type"] == "content_block_delta" && j["delta"]["type"] == "input_json_delta") {
      EXPECT_EQ(j["index"], 1);
      partial += j["delta"]["partial_json"].get<std::string>();
    }
  }
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0]["content_block"]["type"], "text");
  const Json& tool = starts[1]["content_block"];
  EXPECT_EQ(tool["type"], "tool_use");
  EXPECT_EQ(tool["name"], "get_weather");
  EXPECT_EQ(tool["input"], Json::object());
  EXPECT_EQ(Json::parse(partial), (Json{{"city", "Paris"}}));
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[d.size() - 2]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(d.back()["type"], "message_stop");
}

TEST(AnthropicMessages, StreamStopSequence) {
  Rig rig({"abc END def"});
  auto d = payloads(rig.stream(kPath, ask("x", {{"stream", true}, {"stop_sequences", {"END"}}})));
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[d.size() - 2]["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(d[d.size() - 2]["delta"]["stop_sequence"], "END");
}

TEST(AnthropicMessages, CountTokensEqualsTheRenderedPrompt) {
  Rig rig({"unused"});
  Json body = ask("What is the weather?", {{"system", "Be brief."}, {"tools", Json::array({weather_tool()})}});
  body.erase("max_tokens");
  Json r = rig.post_ok("/v1/messages/count_tokens", body);
  Json messages = Json::array({Json{{"role", "system"}, {"content", "Be brief."}},
                               Json{{"role", "user"}, {"content", "What is the weather?"}}});
  EXPECT_EQ(r, (Json{{"input_tokens", rendered_tokens(messages, Json::array({weather_tool_openai()}))}}));
  // Thinking disabled changes the generation prompt (the template closes an empty think block).
  body["thinking"] = {{"type", "disabled"}};
  Json off = rig.post_ok("/v1/messages/count_tokens", body);
  EXPECT_EQ(off["input_tokens"],
            rendered_tokens(messages, Json::array({weather_tool_openai()}), Json{{"enable_thinking", false}}));
  EXPECT_GT(off["input_tokens"].get<int64_t>(), r["input_tokens"].get<int64_t>());
}

void expect_anthropic_error(const std::pair<int, Json>& r, int status, const std::string& type,
                            const std::string& mentions) {
  EXPECT_EQ(r.first, status) << r.second.dump();
  EXPECT_EQ(r.second["type"], "error");
  EXPECT_EQ(r.second["error"]["type"], type);
  EXPECT_NE(r.second["error"]["message"].get<std::string>().find(mentions), std::string::npos) << r.second.dump();
}

TEST(AnthropicMessages, BadInputsGetAnthropicErrorsAndTheServerKeepsServing) {
  Rig rig({"fine"});
  Json no_max = ask("x");
  no_max.erase("max_tokens");
  expect_anthropic_error(rig.post_err(kPath, no_max), 400, "invalid_request_error", "max_tokens");
  for (Json bad : {Json(0), Json(-1), Json("10"), Json(1.5)})
    expect_anthropic_error(rig.post_err(kPath, ask("x", {{"max_tokens", bad}})), 400, "invalid_request_error",
                           "max_tokens");
  Json empty = ask("x");
  empty["messages"] = Json::array();
  expect_anthropic_error(rig.post_err(kPath, empty), 400, "invalid_request_error", "messages");
  Json misplaced = ask("x");
  misplaced["messages"].push_back(Json{{"role", "assistant"},
                                       {"content", {{{"type", "tool_result"}, {"tool_use_id", "t"}, {"content", "r"}}}}});
  expect_anthropic_error(rig.post_err(kPath, misplaced), 400, "invalid_request_error", "messages[1].content[0].type");
  expect_anthropic_error(rig.post_err(kPath, ask("x", {{"model", "other-model"}})), 404, "not_found_error", "other-model");
  expect_anthropic_error(rig.post_err(kPath, ask("x", {{"temperature", -1}})), 400, "invalid_request_error",
                         "temperature");
  // Over the context, streaming asked: a JSON error before any SSE byte.
  expect_anthropic_error(rig.post_err(kPath, ask("x", {{"max_tokens", 100000}, {"stream", true}})), 400,
                         "invalid_request_error", "");
  auto truncated = rig.post(kPath, std::string(R"({"model": "demo", "max_tokens": 5, "messa)"));
  ASSERT_TRUE(truncated);
  EXPECT_EQ(truncated->status, 400);
  EXPECT_EQ(Json::parse(truncated->body)["type"], "error");
  Json m = rig.post_ok(kPath, ask("still there?"));
  EXPECT_EQ(m["content"][0]["text"], "fine");
}

TEST(AnthropicMessages, PrefillPingsAndAMidStreamErrorEvent) {
  Rig rig(std::make_unique<FailingBackend>("Hello there"));
  bool ended = false;
  auto events = rig.stream(kPath, ask("hi", {{"stream", true}}), nullptr, &ended);
  EXPECT_TRUE(ended);
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.event);
  ASSERT_GE(names.size(), 6u);
  // message_start, the ping after it, one ping per prefill chunk, then the text block.
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 5),
            (std::vector<std::string>{"message_start", "ping", "ping", "ping", "content_block_start"}));
  EXPECT_EQ(Json::parse(events[2].data), (Json{{"type", "ping"}}));
  EXPECT_EQ(names.back(), "error");
  Json err = Json::parse(events.back().data);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "api_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("boom"), std::string::npos);
  // Without streaming the failure is a 500 in Anthropic's shape.
  auto plain = rig.post_err(kPath, ask("hi"));
  EXPECT_EQ(plain.first, 500);
  EXPECT_EQ(plain.second["error"]["type"], "api_error");
}

// True once `cond` holds, polling for up to `ms`.
template <typename F>
bool eventually(F cond, int ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

TEST(AnthropicMessages, ClientDisconnectCancelsTheGeneration) {
  std::string long_text;
  for (int i = 0; i < 3000; ++i) long_text += "word ";
  const int64_t total = static_cast<int64_t>(script_tokens(long_text));
  Rig rig({long_text});
  engine::Backend& backend = rig.service().backend();
  for (bool stream : {true, false}) {
    const int64_t before = backend.stats().generated_tokens;
    {
      TestClient c(rig.port(), 0, 5000);
      Json body = ask("go", {{"max_tokens", 4000}, {"stream", stream}});
      ASSERT_TRUE(c.send_request("POST", kPath, {{"Content-Type", "application/json"}}, body.dump()));
      if (stream) {
        ASSERT_TRUE(c.read_head());
        EXPECT_EQ(c.read_sse(5).size(), 5u);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }  // the client leaves
    EXPECT_TRUE(eventually([&] { return backend.stats().running == 0; }, 2000)) << "stream=" << stream;
    EXPECT_LT(backend.stats().generated_tokens - before, total) << "stream=" << stream;
  }
}

}  // namespace
}  // namespace bunsen::server::dialect_testing
