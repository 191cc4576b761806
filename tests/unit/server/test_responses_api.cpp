// POST /v1/responses over real sockets with replayed Qwen3 output: the response object (reasoning, message
// and function_call items, usage), the exact streaming event sequence with sequence numbers,
// max_output_tokens -> incomplete, previous_response_id chains (prompt checked against the template
// rendered directly), store: false, GET/DELETE of stored responses, and 4xx answers for bad input.
#include <gtest/gtest.h>

#include "dialect_rig.h"

namespace bunsen::server::dialect_testing {
namespace {

constexpr const char* kPath = "/v1/responses";

Json create(Json input, Json extra = Json::object()) {
  Json b{{"model", kModel}, {"input", std::move(input)}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

Json weather_tool() {
  return Json::parse(R"({"type": "function", "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})");
}

Json user(const std::string& text) { return Json{{"role", "user"}, {"content", text}}; }

TEST(ResponsesApi, NonStreamReasoningAndMessageItems) {
  Rig rig({kReasoningText});
  Json r = rig.post_ok(kPath, create("hi", {{"instructions", "Be brief."}}));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], kModel);
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_TRUE(r["incomplete_details"].is_null());
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_EQ(r["text"], (Json{{"format", {{"type", "text"}}}}));
  EXPECT_EQ(r["store"], true);
  ASSERT_EQ(r["output"].size(), 2u) << r.dump();
  const Json& reasoning = r["output"][0];
  EXPECT_EQ(reasoning["type"], "reasoning");
  EXPECT_EQ(reasoning["summary"], Json::array());
  EXPECT_EQ(reasoning["content"], Json::parse(R"([{"type": "reasoning_text", "text": "plan"}])"));
  const Json& msg = r["output"][1];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "completed");
  ASSERT_EQ(msg["content"].size(), 1u);
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], "Hello");
  EXPECT_EQ(msg["content"][0]["annotations"], Json::array());
  const Json& u = r["usage"];
  const size_t n_prompt =
      rendered_tokens(Json::array({Json{{"role", "system"}, {"content", "Be brief."}}, user("hi")}));
  EXPECT_EQ(u["input_tokens"], n_prompt);
  EXPECT_EQ(u["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(u["output_tokens"], script_tokens(kReasoningText));
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], script_tokens("plan"));
  EXPECT_EQ(u["total_tokens"], n_prompt + script_tokens(kReasoningText));
}

TEST(ResponsesApi, FunctionCallItem) {
  Rig rig({kToolCallText});
  Json r = rig.post_ok(kPath, create("weather?", {{"tools", Json::array({weather_tool()})}}));
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  const Json& fc = r["output"][0];
  EXPECT_EQ(fc["type"], "function_call");
  EXPECT_EQ(fc["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(fc["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(fc["name"], "get_weather");
  EXPECT_EQ(Json::parse(fc["arguments"].get<std::string>()), (Json{{"city", "Paris"}}));
  EXPECT_EQ(fc["status"], "completed");
  EXPECT_EQ(r["tools"], Json::array({weather_tool()}));
  EXPECT_EQ(r["tool_choice"], "auto");
}

// Event types with runs of one delta type collapsed, after checking names, types and sequence numbers.
std::vector<std::string> shape_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> shape;
  int64_t seq = 0;
  for (const auto& e : events) {
    Json d = Json::parse(e.data, nullptr, false);
    EXPECT_EQ(d.value("type", ""), e.event);
    EXPECT_EQ(d.value("sequence_number", -1), seq++) << e.data;
    const bool delta = e.event.size() > 6 && e.event.compare(e.event.size() - 6, 6, ".delta") == 0;
    if (!(delta && !shape.empty() && shape.back() == e.event)) shape.push_back(e.event);
  }
  return shape;
}

TEST(ResponsesApi, StreamEventSequenceIsExact) {
  Rig rig({kReasoningText});
  int status = 0;
  bool ended = false;
  auto events = rig.stream(kPath, create("hi", {{"stream", true}}), &status, &ended);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(ended);
  std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(shape_of(events), expected);
  std::vector<Json> d = payloads(events);
  EXPECT_EQ(d[0]["response"]["status"], "in_progress");
  EXPECT_EQ(d[0]["response"]["output"], Json::array());
  std::string text;
  for (const Json& j : d)
    if (j["type"] == "response.output_text.delta") {
      EXPECT_EQ(j["output_index"], 1);
      EXPECT_EQ(j["content_index"], 0);
      text += j["delta"].get<std::string>();
    }
  EXPECT_EQ(text, "Hello");
  const Json& done = d.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["id"], d[0]["response"]["id"]);
  ASSERT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "plan");
  EXPECT_EQ(done["usage"]["output_tokens"], script_tokens(kReasoningText));
}

TEST(ResponsesApi, StreamFunctionCallEvents) {
  Rig rig({kToolCallText});
  auto events = rig.stream(kPath, create("weather?", {{"stream", true}, {"tools", Json::array({weather_tool()})}}));
  std::vector<std::string> expected = {"response.created", "response.in_progress", "response.output_item.added",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done", "response.output_item.done",
                                       "response.completed"};
  EXPECT_EQ(shape_of(events), expected);
  std::vector<Json> d = payloads(events);
  ASSERT_EQ(d.size(), expected.size());
  EXPECT_EQ(d[2]["item"]["arguments"], "");
  EXPECT_EQ(Json::parse(d[4]["arguments"].get<std::string>()), (Json{{"city", "Paris"}}));
  EXPECT_EQ(d[4]["name"], "get_weather");
  EXPECT_EQ(d[5]["item"]["status"], "completed");
}

TEST(ResponsesApi, MaxOutputTokensMakesTheResponseIncomplete) {
  Rig rig({"one two three four five six seven eight"});
  Json r = rig.post_ok(kPath, create("x", {{"max_output_tokens", 2}}));
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], (Json{{"reason", "max_output_tokens"}}));
  EXPECT_EQ(r["usage"]["output_tokens"], 2);
  EXPECT_EQ(r["max_output_tokens"], 2);
  auto events = rig.stream(kPath, create("x", {{"max_output_tokens", 2}, {"stream", true}}));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "response.incomplete");
}

TEST(ResponsesApi, PreviousResponseIdPrependsTheStoredConversation) {
  Rig rig({kReasoningText, "Second", "Third"});
  Json first = rig.post_ok(kPath, create("Hi", {{"instructions", "Old rules."}}));
  Json second = rig.post_ok(kPath, create("And?", {{"previous_response_id", first["id"]}, {"instructions", "New."}}));
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  // Instructions are not carried over; the earlier turn (with its reasoning) is.
  Json expected = Json::array({Json{{"role", "system"}, {"content", "New."}}, user("Hi"),
                               Json{{"role", "assistant"}, {"content", "Hello"}, {"reasoning_content", "plan"}},
                               user("And?")});
  EXPECT_EQ(second["usage"]["input_tokens"], rendered_tokens(expected));
  // A chain of three, streamed.
  auto events = rig.stream(kPath, create(Json::array({user("More")}), {{"previous_response_id", second["id"]}, {"stream", true}}));
  ASSERT_FALSE(events.empty());
  Json third = Json::parse(events.back().data)["response"];
  EXPECT_EQ(third["status"], "completed");
  expected.erase(0);  // no instructions this time
  expected.push_back(Json{{"role", "assistant"}, {"content", "Second"}});
  expected.push_back(user("More"));
  EXPECT_EQ(third["usage"]["input_tokens"], rendered_tokens(expected));
  // The stored objects can be read back and deleted.
  auto got = rig.request("GET", std::string(kPath) + "/" + third["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(Json::parse(got->body)["output"], third["output"]);
  auto del = rig.request("DELETE", std::string(kPath) + "/" + third["id"].get<std::string>());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(rig.request("GET", std::string(kPath) + "/" + third["id"].get<std::string>())->status, 404);
}

TEST(ResponsesApi, FunctionCallOutputRoundTrip) {
  Rig rig({kToolCallText, "It is sunny."});
  Json first = rig.post_ok(kPath, create("weather?", {{"tools", Json::array({weather_tool()})}}));
  const Json& fc = first["output"][0];
  Json output_item{{"type", "function_call_output"}, {"call_id", fc["call_id"]}, {"output", "sunny"}};
  Json second = rig.post_ok(kPath, create(Json::array({output_item}), {{"previous_response_id", first["id"]},
                                                                       {"tools", Json::array({weather_tool()})}}));
  EXPECT_EQ(second["output"][0]["content"][0]["text"], "It is sunny.");
  Json tools = Json::array({Json{{"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"description", "Weather of a city"},
                                               {"parameters", weather_tool()["parameters"]}}}}});
  Json expected = Json::array(
      {user("weather?"),
       Json{{"role", "assistant"},
            {"content", ""},
            {"tool_calls", {{{"id", fc["call_id"]}, {"type", "function"},
                             {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
       Json{{"role", "tool"}, {"tool_call_id", fc["call_id"]}, {"content", "sunny"}}});
  EXPECT_EQ(second["usage"]["input_tokens"], rendered_tokens(expected, tools));
}

TEST(ResponsesApi, StoreFalseIsNotRetrievable) {
  Rig rig({"a", "b"});
  Json r = rig.post_ok(kPath, create("x", {{"store", false}}));
  EXPECT_EQ(r["store"], false);
  EXPECT_EQ(rig.request("GET", std::string(kPath) + "/" + r["id"].get<std::string>())->status, 404);
  auto err = rig.post_err(kPath, create("y", {{"previous_response_id", r["id"]}}));
  EXPECT_EQ(err.first, 404);
}

TEST(ResponsesApi, BadInputsGetOpenAiErrorsAndTheServerKeepsServing) {
  Rig rig({"fine"});
  auto unknown = rig.post_err(kPath, create("x", {{"previous_response_id", "resp_nope"}}));
  EXPECT_EQ(unknown.first, 404);
  EXPECT_EQ(unknown.second["error"]["param"], "previous_response_id");
  EXPECT_EQ(unknown.second["error"]["type"], "invalid_request_error");
  auto image = rig.post_err(kPath, create(Json::parse(R"([{"role": "user", "content": [{"type": "input_image"}]}])")));
  EXPECT_EQ(image.first, 400);
  EXPECT_EQ(image.second["error"]["param"], "input[0].content[0].type");
  EXPECT_EQ(rig.post_err(kPath, create(Json::array())).first, 400);
  EXPECT_EQ(rig.post_err(kPath, create("x", {{"max_output_tokens", 0}})).second["error"]["param"], "max_output_tokens");
  EXPECT_EQ(rig.post_err(kPath, create("x", {{"model", "nope"}})).first, 404);
  EXPECT_EQ(rig.post_err(kPath, create("x", {{"top_p", 2}})).first, 400);
  auto over = rig.post_err(kPath, create("x", {{"max_output_tokens", 100000}, {"stream", true}}));
  EXPECT_EQ(over.first, 400);
  EXPECT_TRUE(over.second.contains("error")) << over.second.dump();
  Json ok = rig.post_ok(kPath, create("still there?"));
  EXPECT_EQ(ok["output"][0]["content"][0]["text"], "fine");
}

TEST(ResponsesApi, PrefillHeartbeatsAndAMidStreamFailure) {
  Rig rig(std::make_unique<FailingBackend>("Hello there"));
  bool ended = false;
  auto events = rig.stream(kPath, create("hi", {{"stream", true}}), nullptr, &ended);
  EXPECT_TRUE(ended);
  std::vector<SseEvent> data_events;
  int comments = 0;
  for (const auto& e : events) {
    if (e.data.empty()) {
      EXPECT_EQ(e.comment, "ping");
      ++comments;
    } else {
      data_events.push_back(e);
    }
  }
  EXPECT_EQ(comments, 2);
  std::vector<std::string> shape = shape_of(data_events);
  ASSERT_GE(shape.size(), 3u);
  EXPECT_EQ(shape[shape.size() - 2], "error");
  EXPECT_EQ(shape.back(), "response.failed");
  std::vector<Json> d = payloads(data_events);
  EXPECT_NE(d[d.size() - 2]["message"].get<std::string>().find("boom"), std::string::npos);
  EXPECT_EQ(d.back()["response"]["status"], "failed");
  EXPECT_EQ(d.back()["response"]["error"]["code"], "server_error");
  auto plain = rig.post_err(kPath, create("hi"));
  EXPECT_EQ(plain.first, 500);
  EXPECT_EQ(plain.second["error"]["type"], "server_error");
}

}  // namespace
}  // namespace bunsen::server::dialect_testing
