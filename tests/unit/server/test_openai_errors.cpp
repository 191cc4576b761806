// Bad input to the OpenAI routes: one case per malformed body or out-of-range field from issue 5, each
// answered with the expected 4xx in OpenAI's error shape with `param` naming the field, and the server
// still answering a normal request afterwards. Also: admission failures (prompt + max_tokens over the
// context) are JSON errors even for stream requests, three in a row, then a normal request succeeds.
#include <chrono>
#include <thread>

#include "test_openai_util.h"

namespace bunsen::server::openai::testing {
namespace {

struct BadCase {
  const char* name;
  const char* path;
  std::string body;   // raw bytes
  int status;
  const char* param;  // nullptr: not checked; "": JSON null expected
};

ServiceDefaults allow_templates() {
  ServiceDefaults d;
  d.allow_request_templates = true;
  return d;
}

Json chat_with(Json extra) { return user_chat("hi", std::move(extra)); }

std::string deep_json(int depth) { return "{\"messages\":" + std::string(depth, '[') + std::string(depth, ']') + "}"; }

std::string many_stops(size_t n) {
  Json stops = Json::array();
  for (size_t i = 0; i < n; ++i) stops.push_back("s" + std::to_string(i));
  return chat_with({{"stop", stops}}).dump();
}

std::vector<BadCase> bad_cases() {
  const char* chat = "/v1/chat/completions";
  const char* cmpl = "/v1/completions";
  auto c = [](Json extra) { return chat_with(std::move(extra)).dump(); };
  return {
      {"truncated json", chat, R"({"messages": [{"role": "user", "content": "hi"})", 400, ""},
      {"nan", chat, R"({"messages": [{"role": "user", "content": "hi"}], "temperature": NaN})", 400, ""},
      {"depth 10000", chat, deep_json(10000), 400, ""},
      {"empty body", chat, "", 400, ""},
      {"array body", chat, "[1, 2]", 400, ""},
      {"string body", chat, "\"hello\"", 400, ""},
      {"missing messages", chat, R"({"model": "demo-qwen3-tiny"})", 400, "messages"},
      {"empty messages", chat, R"({"messages": []})", 400, "messages"},
      {"messages not array", chat, R"({"messages": {"role": "user"}})", 400, "messages"},
      {"message not object", chat, R"({"messages": ["hi"]})", 400, "messages[0]"},
      {"bad role", chat, R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
      {"user content null", chat, R"({"messages": [{"role": "user", "content": null}]})", 400, "messages[0].content"},
      {"content number", chat, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {"image part", chat,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400,
       "messages[0].content[0].type"},
      {"invalid utf-8", chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\xff\xfe b\"}]}", 400, ""},
      {"lone surrogate", chat, R"({"messages": [{"role": "user", "content": "a\ud800b"}]})", 400, ""},
      {"unknown model", chat, c({{"model", "gpt-17"}}), 404, "model"},
      {"max_tokens -1", chat, c({{"max_tokens", -1}}), 400, "max_tokens"},
      {"max_tokens 0", chat, c({{"max_tokens", 0}}), 400, "max_tokens"},
      {"max_tokens 1e12", chat, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e12})", 400,
       "max_tokens"},
      {"max_tokens string", chat, c({{"max_tokens", "10"}}), 400, "max_tokens"},
      {"max_completion_tokens 0", chat, c({{"max_completion_tokens", 0}}), 400, "max_completion_tokens"},
      {"n 1e6", chat, c({{"n", 1000000}}), 400, "n"},
      {"n 0", chat, c({{"n", 0}}), 400, "n"},
      {"top_logprobs 21", chat, c({{"logprobs", true}, {"top_logprobs", 21}}), 400, "top_logprobs"},
      {"top_logprobs without logprobs", chat, c({{"top_logprobs", 2}}), 400, "top_logprobs"},
      {"logit_bias id >= vocab", chat, c({{"logit_bias", {{"151936", 1}}}}), 400, "logit_bias"},
      {"logit_bias id negative", chat, c({{"logit_bias", {{"-1", 1}}}}), 400, "logit_bias"},
      {"logit_bias key not a number", chat, c({{"logit_bias", {{"abc", 1}}}}), 400, "logit_bias"},
      {"logit_bias value string", chat, c({{"logit_bias", {{"5", "x"}}}}), 400, "logit_bias"},
      {"logit_bias value NaN", chat, R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": NaN}})",
       400, ""},
      {"temperature -1", chat, c({{"temperature", -1}}), 400, "temperature"},
      {"temperature string", chat, c({{"temperature", "hot"}}), 400, "temperature"},
      {"top_p 2", chat, c({{"top_p", 2}}), 400, "top_p"},
      {"top_k -5", chat, c({{"top_k", -5}}), 400, "top_k"},
      {"min_p 1.5", chat, c({{"min_p", 1.5}}), 400, "min_p"},
      {"presence_penalty 3", chat, c({{"presence_penalty", 3}}), 400, "presence_penalty"},
      {"repetition_penalty 0", chat, c({{"repetition_penalty", 0}}), 400, "repetition_penalty"},
      {"xtc_probability 2", chat, c({{"xtc_probability", 2}}), 400, "xtc_probability"},
      {"seed string", chat, c({{"seed", "abc"}}), 400, "seed"},
      {"10000 stop strings", chat, many_stops(10000), 400, "stop"},
      {"stop empty string", chat, c({{"stop", Json::array({""})}}), 400, "stop"},
      {"stop number", chat, c({{"stop", 5}}), 400, "stop"},
      {"stream not bool", chat, c({{"stream", "yes"}}), 400, "stream"},
      {"stream_options not object", chat, c({{"stream", true}, {"stream_options", 1}}), 400, "stream_options"},
      {"tools not array", chat, c({{"tools", "x"}}), 400, "tools"},
      {"tool without name", chat, c({{"tools", Json::array({Json{{"type", "function"}, {"function", Json::object()}}})}}),
       400, "tools[0].function.name"},
      {"tool_choice unknown", chat, c({{"tools", weather_tools()}, {"tool_choice", "sometimes"}}), 400, "tool_choice"},
      {"tool_choice names missing tool", chat,
       c({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}), 400,
       "tool_choice.function.name"},
      {"required without tools", chat, c({{"tool_choice", "required"}}), 400, "tool_choice"},
      {"reasoning_effort bad", chat, c({{"reasoning_effort", "extreme"}}), 400, "reasoning_effort"},
      {"chat_template_kwargs not object", chat, c({{"chat_template_kwargs", "x"}}), 400, "chat_template_kwargs"},
      {"request template refused", chat, c({{"chat_template", "{{ messages }}"}}), 400, "chat_template"},
      {"assistant tool_calls not array", chat,
       R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]})", 400, "messages[0].tool_calls"},
      {"prompt + max_tokens over context", chat, c({{"max_tokens", kContext - 5}}), 400, nullptr},
      {"max_tokens over context alone", chat, c({{"max_tokens", kContext}}), 400, "max_tokens"},
      {"completions no prompt", cmpl, R"({"max_tokens": 5})", 400, "prompt"},
      {"completions token -1", cmpl, R"({"prompt": [1, -1, 2]})", 400, "prompt"},
      {"completions token >= vocab", cmpl, R"({"prompt": [1, 99999999]})", 400, "prompt"},
      {"completions nested token >= vocab", cmpl, R"({"prompt": [[1, 2], [151936]]})", 400, "prompt"},
      {"completions empty token array", cmpl, R"({"prompt": []})", 400, "prompt"},
      {"completions mixed batch", cmpl, R"({"prompt": ["a", 5]})", 400, "prompt"},
      {"completions suffix", cmpl, R"({"prompt": "a", "suffix": "b"})", 400, "suffix"},
      {"completions logprobs 6", cmpl, R"({"prompt": "a", "logprobs": 6})", 400, "logprobs"},
      {"completions logprobs bool", cmpl, R"({"prompt": "a", "logprobs": true})", 400, "logprobs"},
      {"completions max_tokens -1", cmpl, R"({"prompt": "a", "max_tokens": -1})", 400, "max_tokens"},
      {"completions unknown model", cmpl, R"({"prompt": "a", "model": "nope"})", 404, "model"},
      {"detokenize bad id", "/detokenize", R"({"tokens": [1, -3]})", 400, "tokens"},
      {"detokenize not array", "/detokenize", R"({"tokens": "abc"})", 400, "tokens"},
      {"tokenize neither", "/tokenize", R"({"model": "demo-qwen3-tiny"})", 400, "prompt"},
      {"tokenize bad messages", "/tokenize", R"({"messages": []})", 400, "messages"},
  };
}

TEST(OpenAiErrors, EachBadInputGetsItsStatusAndParamAndTheServerKeepsServing) {
  Rig rig({"fine"});
  for (const BadCase& bc : bad_cases()) {
    SCOPED_TRACE(bc.name);
    auto r = rig.post(bc.path, bc.body);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, bc.status) << r->body;
    Json err = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(err.is_object()) << r->body;
    ASSERT_TRUE(err.contains("error")) << r->body;
    EXPECT_TRUE(err["error"]["message"].is_string());
    EXPECT_TRUE(err["error"]["type"].is_string());
    if (bc.param != nullptr && *bc.param != '\0') {
      EXPECT_EQ(err["error"]["param"], bc.param) << r->body;
    }
    if (bc.status == 404) {
      EXPECT_EQ(err["error"]["code"], "model_not_found");
    }
  }
  Json ok = rig.post_ok("/v1/chat/completions", user_chat("hi"));
  EXPECT_EQ(ok["choices"][0]["message"]["content"], "fine");
}

TEST(OpenAiErrors, AdmissionFailureIsJsonBeforeAnySseByteThenServingContinues) {
  Rig rig({"fine"});
  for (int i = 0; i < 3; ++i) {
    auto r = rig.post("/v1/chat/completions", chat_with({{"max_tokens", kContext - 5}, {"stream", true}}));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 400);
    auto ct = r->headers.get("Content-Type");
    ASSERT_TRUE(ct.has_value());
    EXPECT_NE(ct->find("application/json"), std::string::npos);
    Json err = Json::parse(r->body, nullptr, false);
    EXPECT_TRUE(err.contains("error")) << r->body;
  }
  int status = 0;
  auto chunks = data_chunks(rig.stream("/v1/chat/completions", chat_with({{"stream", true}}), &status));
  EXPECT_EQ(status, 200);
  std::string content;
  for (const Json& ch : chunks)
    if (ch["choices"][0]["delta"].contains("content")) content += ch["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(content, "fine");
}

TEST(OpenAiErrors, RequestTemplateAcceptedWhenAllowed) {
  Rig rig({"fine"}, allow_templates());
  Json body = chat_with({{"chat_template", "{% for m in messages %}{{ m.content }}|{% endfor %}"}});
  Json tk = rig.post_ok("/tokenize", body);
  Json dt = rig.post_ok("/detokenize", Json{{"tokens", tk["tokens"]}});
  EXPECT_EQ(dt["prompt"], "hi|");
  Json r = rig.post_ok("/v1/chat/completions", body);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "fine");
}

TEST(OpenAiErrors, ClientDisconnectCancelsTheGeneration) {
  // A long script replayed at ~1 ms/token: closing the socket mid-stream must end the engine request.
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "word ";
  Rig rig({long_text});
  {
    TestClient c(rig.port());
    c.send_request("POST", "/v1/chat/completions", {{"Content-Type", "application/json"}},
                   chat_with({{"stream", true}}).dump());
    auto head = c.read_head();
    ASSERT_TRUE(head.has_value());
    EXPECT_EQ(head->status, 200);
    c.read_sse(3);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline && rig.service().backend().stats().running > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(rig.service().backend().stats().running, 0);
  const engine::EngineStats st = rig.service().backend().stats();
  EXPECT_EQ(st.requests_finished, 1);
  EXPECT_GT(st.generated_tokens, 0);
  EXPECT_LT(st.generated_tokens, 1500) << "the generation ran on after the client left";
}

}  // namespace
}  // namespace bunsen::server::openai::testing
