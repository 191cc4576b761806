// OpenAI response pieces shared by chat and completions: finish_reason mapping, usage, the two logprobs
// shapes (chat's content[] entries and the legacy completions arrays), per-choice accumulation for
// non-stream answers, and small send helpers. Not the handlers. Invariants: every dump() replaces invalid
// UTF-8 instead of throwing; usage.total_tokens == prompt_tokens + completion_tokens; legacy text_offset
// values are byte offsets into the choice's full text (echoed prompt included).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api/api_error.h"
#include "server/api/service.h"
#include "server/http/responder.h"

namespace bunsen::server::openai {

using Json = nlohmann::ordered_json;

inline constexpr const char* kSystemFingerprint = "fp_bunsen";

// Compact JSON that never throws (invalid UTF-8 becomes U+FFFD).
std::string dump(const Json& j);

// kFinish → "stop" (EOS, stop string, cancelled; "tool_calls" when the generation emitted tool calls) or
// "length".
std::string finish_reason(const GenerationEvent& finish);

// Sums the usage of several choices; a prompt shared by n choices is counted once (count_prompt only for
// the first choice of each prompt).
struct UsageTotals {
  int64_t prompt = 0;
  int64_t cached = 0;
  int64_t completion = 0;
  void add(const engine::Usage& usage, bool count_prompt);
  Json json() const;  // {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:{cached_tokens}}
};

// Chat: [{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}].
void append_chat_logprobs(Json& content, const std::vector<TokenLogprob>& logprobs);
Json chat_logprobs(const std::vector<TokenLogprob>& logprobs);  // {content:[...], refusal:null}

// Completions (legacy): {tokens, token_logprobs, top_logprobs:[{token: logprob}], text_offset}.
// top_logprobs holds the chosen token plus the top entries, as OpenAI's legacy API did.
struct LegacyLogprobs {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = Json::array();
  Json text_offset = Json::array();
  // `offset` is where the next token's text starts in the choice's text; advanced by each token's bytes.
  void add(const std::vector<TokenLogprob>& logprobs, size_t& offset);
  bool empty() const { return tokens.empty(); }
  Json json() const;
};

// One choice of a non-stream answer, accumulated from its events.
struct ChoiceResult {
  std::string content;
  std::string reasoning;
  std::vector<text::ToolCall> tool_calls;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  bool failed = false;
  std::string error_type;
  std::string error_message;
  FinishCause cause = FinishCause::kEos;
  int n_tool_calls = 0;
  engine::Usage usage;
  void add(GenerationEvent& event);
  std::string finish_reason() const;
};

// The ApiError for a generation that ended in kError.
ApiError generation_error(const std::string& type, const std::string& message);

// Answers with the OpenAI error body and records the request in the metrics.
void answer_error(http::Responder& responder, ModelService& service, const std::string& route, const ApiError& e);
// Answers 200 with `body` and records the request.
void answer_json(http::Responder& responder, ModelService& service, const std::string& route, const Json& body);

}  // namespace bunsen::server::openai
