// /v1/completions, /v1/models, /tokenize and /detokenize over real sockets with replayed output: string,
// token-array and batched prompts, echo, legacy logprobs, stop, stream shape, usage; model listing and
// lookup (404 in OpenAI's shape); tokenize/detokenize round trips.
#include "test_openai_util.h"

namespace bunsen::server::openai::testing {
namespace {

TEST(OpenAiCompletions, StringPromptNonStream) {
  Rig rig({"The answer is 42."});
  Json r = rig.post_ok("/v1/completions", Json{{"model", kModelId}, {"prompt", "Question:"}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(r["model"], kModelId);
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"], "The answer is 42.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), qwen3_tokenizer().encode("Question:", true).size());
  EXPECT_EQ(r["usage"]["completion_tokens"].get<size_t>(), qwen3_tokenizer().encode("The answer is 42.").size());
}

TEST(OpenAiCompletions, ReasoningMarkupIsPlainTextHere) {
  Rig rig({kReasoningText});
  Json r = rig.post_ok("/v1/completions", Json{{"prompt", "x"}});
  EXPECT_EQ(r["choices"][0]["text"], kReasoningText);
}

TEST(OpenAiCompletions, EchoAndTokenPromptAndLegacyLogprobs) {
  Rig rig({" world"});
  const auto ids = qwen3_tokenizer().encode("Hello", false);
  Json prompt = Json::array();
  for (int32_t id : ids) prompt.push_back(id);
  Json r = rig.post_ok("/v1/completions", Json{{"prompt", prompt}, {"echo", true}, {"logprobs", 2}});
  const Json& c = r["choices"][0];
  EXPECT_EQ(c["text"], "Hello world");
  const Json& lp = c["logprobs"];
  const auto out_ids = qwen3_tokenizer().encode(" world", false);
  ASSERT_EQ(lp["tokens"].size(), out_ids.size());
  ASSERT_EQ(lp["token_logprobs"].size(), out_ids.size());
  ASSERT_EQ(lp["top_logprobs"].size(), out_ids.size());
  ASSERT_EQ(lp["text_offset"].size(), out_ids.size());
  EXPECT_EQ(lp["text_offset"][0], 5) << "offsets count the echoed prompt";
  EXPECT_EQ(lp["token_logprobs"][0].get<double>(), 0.0);
  EXPECT_TRUE(lp["top_logprobs"][0].is_object());
  EXPECT_TRUE(lp["top_logprobs"][0].contains(lp["tokens"][0].get<std::string>()));
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), ids.size());
}

TEST(OpenAiCompletions, BatchOfPromptsTimesN) {
  Rig rig({"a1", "a2", "b1", "b2"});
  Json r = rig.post_ok("/v1/completions", Json{{"prompt", Json::array({"first", "second prompt"})}, {"n", 2}});
  ASSERT_EQ(r["choices"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r["choices"][i]["index"], i);
  const size_t p1 = qwen3_tokenizer().encode("first", true).size();
  const size_t p2 = qwen3_tokenizer().encode("second prompt", true).size();
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), p1 + p2) << "each prompt counted once";
}

TEST(OpenAiCompletions, StopAndLength) {
  Rig rig({"one, two, three"});
  Json r = rig.post_ok("/v1/completions", Json{{"prompt", "count"}, {"stop", ", t"}});
  EXPECT_EQ(r["choices"][0]["text"], "one");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  Json r2 = rig.post_ok("/v1/completions", Json{{"prompt", "count"}, {"max_tokens", 1}});
  EXPECT_EQ(r2["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r2["usage"]["completion_tokens"], 1);
}

TEST(OpenAiCompletions, StreamShapeWithEchoUsageAndDone) {
  Rig rig({" and more text"});
  bool ended = false;
  auto events = rig.stream(
      "/v1/completions",
      Json{{"prompt", "Start"}, {"stream", true}, {"echo", true}, {"stream_options", {{"include_usage", true}}}},
      nullptr, &ended);
  EXPECT_TRUE(ended);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
  auto chunks = data_chunks(events);
  ASSERT_GE(chunks.size(), 3u);
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "text_completion");
    const Json& c = chunks[i]["choices"][0];
    text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes;
  }
  EXPECT_EQ(text, "Start and more text");
  EXPECT_EQ(finishes, 1);
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"].get<size_t>(),
            qwen3_tokenizer().encode(" and more text").size());
}

TEST(OpenAiModels, ListAndLookup) {
  Rig rig({"x"});
  auto r = rig.get("/v1/models");
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->status, 200);
  Json list = Json::parse(r->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], kModelId);
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_TRUE(list["data"][0]["created"].is_number_integer());
  EXPECT_TRUE(list["data"][0]["owned_by"].is_string());
  EXPECT_EQ(list["data"][0]["max_model_len"], rig.service().backend().max_request_tokens());
  EXPECT_EQ(list["data"][0]["vocab_size"], rig.service().backend().vocab_size());
  auto one = rig.get(std::string("/v1/models/") + kModelId);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(Json::parse(one->body)["id"], kModelId);
  auto missing = rig.get("/v1/models/org/unknown-model");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 404);
  Json err = Json::parse(missing->body);
  EXPECT_EQ(err["error"]["code"], "model_not_found");
  EXPECT_TRUE(err["error"]["message"].is_string());
  EXPECT_TRUE(err["error"].contains("param"));
  EXPECT_TRUE(err["error"]["type"].is_string());
}

TEST(OpenAiTokenize, PromptRoundTripAndCounts) {
  Rig rig({"x"});
  Json tk = rig.post_ok("/tokenize", Json{{"prompt", "Hello, world!"}});
  const auto ids = qwen3_tokenizer().encode("Hello, world!", true);
  ASSERT_EQ(tk["tokens"].size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tk["tokens"][i], ids[i]);
  EXPECT_EQ(tk["count"].get<size_t>(), ids.size());
  EXPECT_EQ(tk["max_model_len"], kContext);
  Json dt = rig.post_ok("/detokenize", Json{{"tokens", tk["tokens"]}});
  EXPECT_EQ(dt["prompt"], "Hello, world!");
  // Messages are chat-templated: the special tokens are in the ids.
  Json chat = rig.post_ok("/tokenize", user_chat("hi"));
  const int32_t im_start = *qwen3_tokenizer().token_id("<|im_start|>");
  EXPECT_EQ(chat["tokens"][0], im_start);
  EXPECT_GT(chat["count"].get<int64_t>(), 3);
}

}  // namespace
}  // namespace bunsen::server::openai::testing
