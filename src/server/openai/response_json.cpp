// Shared OpenAI response pieces (see response_json.h).
#include "server/openai/response_json.h"

#include "server/api/error_shapes.h"

namespace bunsen::server::openai {
namespace {

Json bytes_json(const std::vector<uint8_t>& bytes) {
  Json out = Json::array();
  for (uint8_t b : bytes) out.push_back(static_cast<int>(b));
  return out;
}

}  // namespace

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string finish_reason(const GenerationEvent& finish) {
  if (finish.cause == FinishCause::kLength) return "length";
  return finish.n_tool_calls > 0 ? "tool_calls" : "stop";
}

void UsageTotals::add(const engine::Usage& usage, bool count_prompt) {
  if (count_prompt) {
    prompt += usage.prompt_tokens;
    cached += usage.cached_tokens;
  }
  completion += usage.generated_tokens;
}

Json UsageTotals::json() const {
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

void append_chat_logprobs(Json& content, const std::vector<TokenLogprob>& logprobs) {
  for (const TokenLogprob& lp : logprobs) {
    Json top = Json::array();
    for (const TokenLogprob::Top& t : lp.top)
      top.push_back(Json{{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_json(t.bytes)}});
    content.push_back(Json{{"token", lp.token},
                           {"logprob", lp.logprob},
                           {"bytes", bytes_json(lp.bytes)},
                           {"top_logprobs", std::move(top)}});
  }
}

Json chat_logprobs(const std::vector<TokenLogprob>& logprobs) {
  Json content = Json::array();
  append_chat_logprobs(content, logprobs);
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

void LegacyLogprobs::add(const std::vector<TokenLogprob>& logprobs, size_t& offset) {
  for (const TokenLogprob& lp : logprobs) {
    tokens.push_back(lp.token);
    token_logprobs.push_back(lp.logprob);
    Json top = Json::object();
    top[lp.token] = lp.logprob;
    for (const TokenLogprob::Top& t : lp.top) top[t.token] = t.logprob;
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += lp.bytes.size();
  }
}

Json LegacyLogprobs::json() const {
  return Json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top_logprobs},
              {"text_offset", text_offset}};
}

void ChoiceResult::add(GenerationEvent& event) {
  for (auto& lp : event.logprobs) logprobs.push_back(std::move(lp));
  switch (event.kind) {
    case GenerationEvent::Kind::kHeartbeat: break;
    case GenerationEvent::Kind::kContent: content += event.text; break;
    case GenerationEvent::Kind::kReasoning: reasoning += event.text; break;
    case GenerationEvent::Kind::kToolCall: tool_calls.push_back(std::move(event.tool_call)); break;
    case GenerationEvent::Kind::kFinish:
      finished = true;
      cause = event.cause;
      n_tool_calls = event.n_tool_calls;
      usage = event.usage;
      break;
    case GenerationEvent::Kind::kError:
      finished = true;
      failed = true;
      error_type = event.error_type;
      error_message = event.error_message;
      usage = event.usage;
      break;
  }
}

std::string ChoiceResult::finish_reason() const {
  if (cause == FinishCause::kLength) return "length";
  return n_tool_calls > 0 || !tool_calls.empty() ? "tool_calls" : "stop";
}

ApiError generation_error(const std::string& type, const std::string& message) {
  return ApiError(500, type.empty() ? "server_error" : type, "generation failed: " + message);
}

void answer_error(http::Responder& responder, ModelService& service, const std::string& route, const ApiError& e) {
  service.metrics().record_request(route, e.status);
  responder.send(openai_error_response(e));
}

void answer_json(http::Responder& responder, ModelService& service, const std::string& route, const Json& body) {
  service.metrics().record_request(route, 200);
  responder.send(http::Response::json(200, dump(body)));
}

}  // namespace bunsen::server::openai
