// Anthropic request mapping without a server: content blocks -> OpenAI-shaped template messages, tools,
// tool_choice, thinking, and the 400s (with the field named) for what cannot be mapped.
#include <gtest/gtest.h>

#include "server/anthropic/message.h"
#include "server/anthropic/request.h"
#include "server/api/api_error.h"

namespace bunsen::server::anthropic {
namespace {

Json body_with(Json messages, Json extra = Json::object()) {
  Json b{{"model", "m"}, {"max_tokens", 16}, {"messages", std::move(messages)}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

// The param of the ApiError that parse_prompt throws for `body` ("" when it does not throw).
std::string rejected_param(const Json& body) {
  try {
    parse_prompt(body, ServiceDefaults{});
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    return e.param.empty() ? "<none>" : e.param;
  }
  return "";
}

TEST(AnthropicRequest, ToolRoundTripBecomesOpenAiShapedMessages) {
  Json messages = Json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "need the tool", "signature": "sig"},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
      {"type": "text", "text": "Thanks"}]}
  ])");
  Json tools = Json::parse(R"([{"name": "get_weather", "description": "d",
      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])");
  Prompt p = parse_prompt(body_with(messages, {{"system", "Be brief."}, {"tools", tools}}), ServiceDefaults{});
  Json expected = Json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "need the tool",
     "tool_calls": [{"id": "toolu_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
    {"role": "user", "content": "Thanks"}
  ])");
  EXPECT_EQ(p.messages, expected);
  Json expected_tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  EXPECT_EQ(p.tools, expected_tools);
  EXPECT_TRUE(p.parse_tool_calls);
}

TEST(AnthropicRequest, SystemBlocksAndSystemRoleMessagesMergeIntoOneSystemPrompt) {
  Json messages = Json::parse(R"([
    {"role": "system", "content": "Rule two."},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
  ])");
  Json system = Json::parse(R"([{"type": "text", "text": "Rule one.", "cache_control": {"type": "ephemeral"}}])");
  Prompt p = parse_prompt(body_with(messages, {{"system", system}}), ServiceDefaults{});
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[0], (Json{{"role", "system"}, {"content", "Rule one.\nRule two."}}));
  EXPECT_EQ(p.messages[1], (Json{{"role", "user"}, {"content", "a\nb"}}));
  EXPECT_TRUE(p.tools.is_null());
  EXPECT_FALSE(p.parse_tool_calls);
}

TEST(AnthropicRequest, ToolErrorResultIsMarked) {
  Json messages = Json::parse(R"([{"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": true}]}])");
  Prompt p = parse_prompt(body_with(messages), ServiceDefaults{});
  ASSERT_EQ(p.messages.size(), 1u);
  EXPECT_EQ(p.messages[0]["role"], "tool");
  EXPECT_EQ(p.messages[0]["content"], "Error: boom");
}

TEST(AnthropicRequest, ToolChoiceNoneDropsToolsAndNamedKeepsOne) {
  Json tools = Json::parse(R"([{"name": "a", "input_schema": {"type": "object"}},
                               {"name": "b", "input_schema": {"type": "object"}}])");
  Json msgs = Json::array({Json{{"role", "user"}, {"content", "x"}}});
  Prompt none = parse_prompt(body_with(msgs, {{"tools", tools}, {"tool_choice", {{"type", "none"}}}}), {});
  EXPECT_TRUE(none.tools.is_null());
  EXPECT_FALSE(none.parse_tool_calls);
  Prompt named = parse_prompt(body_with(msgs, {{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "b"}}}}), {});
  ASSERT_EQ(named.tools.size(), 1u);
  EXPECT_EQ(named.tools[0]["function"]["name"], "b");
  EXPECT_EQ(rejected_param(body_with(msgs, {{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "zzz"}}}})),
            "tool_choice.name");
}

TEST(AnthropicRequest, ThinkingMapsToEnableThinking) {
  Json msgs = Json::array({Json{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(parse_prompt(body_with(msgs, {{"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}}}), {})
                .kwargs["enable_thinking"],
            true);
  EXPECT_EQ(parse_prompt(body_with(msgs, {{"thinking", {{"type", "disabled"}}}}), {}).kwargs["enable_thinking"], false);
  EXPECT_FALSE(parse_prompt(body_with(msgs), {}).kwargs.contains("enable_thinking"));
  ServiceDefaults off;
  off.thinking = false;
  EXPECT_EQ(parse_prompt(body_with(msgs), off).kwargs["enable_thinking"], false);
  EXPECT_EQ(rejected_param(body_with(msgs, {{"thinking", {{"type", "sometimes"}}}})), "thinking.type");
}

TEST(AnthropicRequest, UnmappableBlocksAreRejectedNamingTheField) {
  auto user = [](Json blocks) { return Json{{"role", "user"}, {"content", std::move(blocks)}}; };
  auto asst = [](Json blocks) { return Json{{"role", "assistant"}, {"content", std::move(blocks)}}; };
  Json tool_result = {{"type", "tool_result"}, {"tool_use_id", "t"}, {"content", "r"}};
  Json tool_use = {{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", Json::object()}};
  Json image = {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AA=="}}}};
  Json hi = user(Json::array({{{"type", "text"}, {"text", "hi"}}}));
  EXPECT_EQ(rejected_param(body_with(Json::array({hi, asst(Json::array({tool_result}))}))), "messages[1].content[0].type");
  EXPECT_EQ(rejected_param(body_with(Json::array({user(Json::array({tool_use}))}))), "messages[0].content[0].type");
  EXPECT_EQ(rejected_param(body_with(Json::array({user(Json::array({{{"type", "text"}, {"text", "a"}}, image}))}))),
            "messages[0].content[1].type");
  EXPECT_EQ(rejected_param(body_with(Json::array({Json{{"role", "tool"}, {"content", "x"}}}))), "messages[0].role");
  EXPECT_EQ(rejected_param(body_with(Json::array())), "messages");
  EXPECT_EQ(rejected_param(body_with(Json::array({Json{{"role", "user"}, {"content", 5}}}))), "messages[0].content");
  EXPECT_EQ(rejected_param(body_with(Json::array({asst(Json::array({{{"type", "tool_use"}, {"name", "f"}}}))}))),
            "messages[0].content[0].id");
  // An assistant turn first, consecutive user turns: mappable, so accepted.
  EXPECT_EQ(rejected_param(body_with(Json::array({asst(Json::array({{{"type", "text"}, {"text", "a"}}})), hi, hi}))), "");
}

TEST(AnthropicMessage, StopReasonFollowsTheFinishCause) {
  GenerationEvent ev;
  ev.kind = GenerationEvent::Kind::kFinish;
  ev.cause = FinishCause::kEos;
  EXPECT_STREQ(stop_reason(ev), "end_turn");
  ev.cause = FinishCause::kLength;
  EXPECT_STREQ(stop_reason(ev), "max_tokens");
  ev.cause = FinishCause::kStopString;
  EXPECT_STREQ(stop_reason(ev), "stop_sequence");
  ev.cause = FinishCause::kEos;
  ev.n_tool_calls = 1;
  EXPECT_STREQ(stop_reason(ev), "tool_use");
  EXPECT_EQ(tool_use_id("call_abc"), "toolu_abc");
  EXPECT_EQ(tool_use_id("weird").rfind("toolu_", 0), 0u);
}

}  // namespace
}  // namespace bunsen::server::anthropic
