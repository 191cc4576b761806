// /v1/chat/completions over real sockets with replayed model output: response and chunk shapes, reasoning
// separated from content, tool calls (single, parallel, tool_choice none), stop strings, length, logprobs,
// n > 1 (non-stream and multiplexed stream), usage, and the chat template inputs (tool-call round trip,
// reasoning_effort / chat_template_kwargs / --thinking precedence) checked through /tokenize.
#include <map>
#include <set>

#include "test_openai_util.h"

namespace bunsen::server::openai::testing {
namespace {

// Token count of the rendered prompt for `body`, through /tokenize (the same render the chat route does).
int64_t prompt_tokens(Rig& rig, const Json& body) {
  Json tk = rig.post_ok("/tokenize", body);
  return tk["count"].get<int64_t>();
}

TEST(OpenAiChat, NonStreamSeparatesReasoningFromContent) {
  Rig rig({kReasoningText});
  const Json body = user_chat("hi");
  Json r = rig.post_ok("/v1/chat/completions", body);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["model"], kModelId);
  EXPECT_TRUE(r["created"].is_number_integer());
  EXPECT_TRUE(r["system_fingerprint"].is_string());
  ASSERT_EQ(r["choices"].size(), 1u);
  const Json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hello");
  EXPECT_EQ(c["message"]["reasoning_content"], "plan");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  const int64_t n_script = static_cast<int64_t>(qwen3_tokenizer().encode(kReasoningText, false).size());
  EXPECT_EQ(r["usage"]["completion_tokens"], n_script);
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens(rig, body));
  EXPECT_EQ(r["usage"]["total_tokens"].get<int64_t>(),
            r["usage"]["prompt_tokens"].get<int64_t>() + r["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_TRUE(r["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST(OpenAiChat, StreamChunksRoleDeltasFinishUsageDone) {
  Rig rig({kReasoningText});
  bool ended = false;
  auto events = rig.stream("/v1/chat/completions",
                           user_chat("hi", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}),
                           nullptr, &ended);
  EXPECT_TRUE(ended);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back().data, "[DONE]");
  auto chunks = data_chunks(events);
  ASSERT_GE(chunks.size(), 3u);
  const std::string id = chunks[0]["id"];
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  std::string content, reasoning;
  int finishes = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const Json& ch = chunks[i];
    EXPECT_EQ(ch["id"], id);
    ASSERT_EQ(ch["choices"].size(), 1u);
    const Json& d = ch["choices"][0]["delta"];
    if (i > 0) {
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    }
    if (!ch["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(ch["choices"][0]["finish_reason"], "stop");
      EXPECT_EQ(i + 2, chunks.size()) << "the finish chunk comes right before the usage chunk";
    }
  }
  EXPECT_EQ(content, "Hello");
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(finishes, 1);
  const Json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_GT(usage_chunk["usage"]["prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"].get<int64_t>(),
            static_cast<int64_t>(qwen3_tokenizer().encode(kReasoningText, false).size()));
}

TEST(OpenAiChat, ToolCallParsedWithFinishReasonToolCalls) {
  Rig rig({kToolCallText});
  Json r = rig.post_ok("/v1/chat/completions", user_chat("weather?", {{"tools", weather_tools()}}));
  const Json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_TRUE(c["message"]["content"].is_null());
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  const Json& call = c["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), (Json{{"city", "Paris"}}));
}

TEST(OpenAiChat, ParallelToolCallsStreamOneChunkPerCallWithIndexes) {
  Rig rig({kTwoToolCallsText});
  auto chunks = data_chunks(
      rig.stream("/v1/chat/completions", user_chat("both?", {{"tools", weather_tools()}, {"stream", true}})));
  std::vector<Json> calls;
  std::string finish;
  for (const Json& ch : chunks) {
    const Json& choice = ch["choices"][0];
    if (choice["delta"].contains("tool_calls"))
      for (const Json& tc : choice["delta"]["tool_calls"]) calls.push_back(tc);
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(Json::parse(calls[1]["function"]["arguments"].get<std::string>()), (Json{{"zone", "CET"}}));
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(finish, "tool_calls");
}

TEST(OpenAiChat, ParallelToolCallsNonStreamInOrder) {
  Rig rig({kTwoToolCallsText});
  Json r = rig.post_ok("/v1/chat/completions", user_chat("both?", {{"tools", weather_tools()}}));
  const Json& calls = r["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_FALSE(calls[0].contains("index"));
}

TEST(OpenAiChat, ToolChoiceNoneLeavesMarkupAsContent) {
  Rig rig({kToolCallText});
  Json r = rig.post_ok("/v1/chat/completions",
                       user_chat("weather?", {{"tools", weather_tools()}, {"tool_choice", "none"}}));
  const Json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_NE(c["message"]["content"].get<std::string>().find("get_weather"), std::string::npos);
}

TEST(OpenAiChat, RequiredToolChoiceWithoutCallReturnsTheAnswerAsIs) {
  Rig rig({"No tool needed."});
  Json r = rig.post_ok("/v1/chat/completions",
                       user_chat("hi", {{"tools", weather_tools()}, {"tool_choice", "required"}}));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "No tool needed.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiChat, StopStringCutsTextNonStreamAndStream) {
  Rig rig({"Hello world. Bye now"});
  Json r = rig.post_ok("/v1/chat/completions", user_chat("hi", {{"stop", Json::array({"world", "zzz"})}}));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  auto chunks = data_chunks(rig.stream("/v1/chat/completions", user_chat("hi", {{"stop", ". B"}, {"stream", true}})));
  std::string content;
  for (const Json& ch : chunks)
    if (ch["choices"][0]["delta"].contains("content")) content += ch["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(content, "Hello world");
}

TEST(OpenAiChat, MaxTokensEndsWithLength) {
  Rig rig({"one two three four five six"});
  Json r = rig.post_ok("/v1/chat/completions", user_chat("hi", {{"max_tokens", 2}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 2);
  Json r2 = rig.post_ok("/v1/chat/completions", user_chat("hi", {{"max_completion_tokens", 3}, {"max_tokens", 1}}));
  EXPECT_EQ(r2["usage"]["completion_tokens"], 3) << "max_completion_tokens wins over max_tokens";
}

TEST(OpenAiChat, LogprobsInOpenAiShape) {
  Rig rig({"Hello there"});
  Json r = rig.post_ok("/v1/chat/completions", user_chat("hi", {{"logprobs", true}, {"top_logprobs", 2}}));
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object());
  const Json& content = lp["content"];
  const auto ids = qwen3_tokenizer().encode("Hello there", false);
  ASSERT_EQ(content.size(), ids.size());
  std::string joined;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& e = content[i];
    EXPECT_EQ(e["logprob"].get<double>(), 0.0);  // the replay backend reports probability 1
    EXPECT_TRUE(e["top_logprobs"].is_array());
    ASSERT_TRUE(e["bytes"].is_array());
    std::string bytes;
    for (const Json& b : e["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
    EXPECT_EQ(bytes, qwen3_tokenizer().token_bytes(ids[i]));
    joined += e["token"].get<std::string>();
  }
  EXPECT_EQ(joined, "Hello there");
  auto chunks = data_chunks(rig.stream("/v1/chat/completions", user_chat("hi", {{"logprobs", true}, {"stream", true}})));
  size_t streamed = 0;
  for (const Json& ch : chunks) {
    const Json& l = ch["choices"][0]["logprobs"];
    if (l.is_object()) streamed += l["content"].size();
  }
  EXPECT_EQ(streamed, ids.size());
}

TEST(OpenAiChat, NChoicesNonStreamCountPromptOnce) {
  Rig rig({"alpha", "beta"});
  const Json body = user_chat("hi", {{"n", 2}, {"seed", 7}});
  Json r = rig.post_ok("/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 2u);
  std::set<std::string> texts;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    texts.insert(r["choices"][i]["message"]["content"].get<std::string>());
  }
  EXPECT_EQ(texts, (std::set<std::string>{"alpha", "beta"}));
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens(rig, body));
  EXPECT_EQ(r["usage"]["completion_tokens"].get<size_t>(),
            qwen3_tokenizer().encode("alpha", false).size() + qwen3_tokenizer().encode("beta", false).size());
}

TEST(OpenAiChat, NChoicesStreamMultiplexedWithIndexes) {
  Rig rig({"first answer here", "second answer"});
  bool ended = false;
  auto events = rig.stream("/v1/chat/completions", user_chat("hi", {{"n", 2}, {"stream", true}}), nullptr, &ended);
  EXPECT_TRUE(ended);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
  std::map<int, std::string> text;
  std::map<int, int> roles, finishes;
  for (const Json& ch : data_chunks(events)) {
    ASSERT_EQ(ch["choices"].size(), 1u);
    const Json& c = ch["choices"][0];
    const int i = c["index"];
    if (c["delta"].contains("role")) ++roles[i];
    if (c["delta"].contains("content")) text[i] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      ++finishes[i];
      EXPECT_EQ(c["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  std::set<std::string> got = {text[0], text[1]};
  EXPECT_EQ(got, (std::set<std::string>{"first answer here", "second answer"}));
}

// The rendered prompt of `body` (tokenize, then detokenize).
std::string rendered(Rig& rig, const Json& body) {
  Json tk = rig.post_ok("/tokenize", body);
  Json dt = rig.post_ok("/detokenize", Json{{"tokens", tk["tokens"]}});
  return dt["prompt"];
}

TEST(OpenAiChat, AssistantToolCallsRoundTripThroughTheTemplate) {
  Rig rig({"ok"});
  Json messages = Json::array(
      {Json{{"role", "developer"}, {"content", "Be brief."}},
       Json{{"role", "user"}, {"content", Json::array({Json{{"type", "text"}, {"text", "weather in Paris?"}}})}},
       Json{{"role", "assistant"},
            {"content", nullptr},
            {"tool_calls", Json::array({Json{{"id", "call_1"},
                                             {"type", "function"},
                                             {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
       Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}});
  Json body = {{"messages", messages}, {"tools", weather_tools()}};
  const std::string p = rendered(rig, body);
  EXPECT_NE(p.find("<|im_start|>system\nBe brief."), std::string::npos) << p;
  EXPECT_NE(p.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << p;
  EXPECT_EQ(p.substr(p.size() - 22), "<|im_start|>assistant\n");
  // The same conversation generates fine through the chat route.
  Json r = rig.post_ok("/v1/chat/completions", body);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "ok");
}

TEST(OpenAiChat, ThinkingSwitchPrecedence) {
  ServiceDefaults no_thinking;
  no_thinking.thinking = false;
  Rig rig({"ok"}, no_thinking);
  const std::string kOff = "<think>\n\n</think>\n\n";
  auto ends_off = [&](const Json& body) {
    const std::string p = rendered(rig, body);
    return p.size() >= kOff.size() && p.substr(p.size() - kOff.size()) == kOff;
  };
  EXPECT_TRUE(ends_off(user_chat("hi"))) << "--thinking false applies when the request says nothing";
  EXPECT_FALSE(ends_off(user_chat("hi", {{"reasoning_effort", "high"}})));
  EXPECT_TRUE(ends_off(user_chat("hi", {{"reasoning_effort", "minimal"}})));
  EXPECT_FALSE(ends_off(user_chat("hi", {{"reasoning_effort", "none"},
                                         {"chat_template_kwargs", {{"enable_thinking", true}}}})))
      << "chat_template_kwargs wins over reasoning_effort";
  Rig plain({"ok"});
  const std::string p = rendered(plain, user_chat("hi"));
  EXPECT_EQ(p.substr(p.size() - 22), "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace bunsen::server::openai::testing
