// /v1/chat/completions request parsing: OpenAI messages, tools, tool_choice, reasoning controls and
// logprobs fields checked and converted into what the chat template and the generation pipeline take.
// Not the handler (chat_handler.cpp) and not rendering (ModelService::render_chat). Invariants: every
// error is an ApiError naming the field ("messages[2].content[0].type"); converted messages have string
// content, "developer" mapped to "system", and tool-call arguments as JSON objects (HF templates expect a
// mapping) whenever the client sent a JSON-object string.
//
// tool_choice: "auto" and the named/"required" forms parse tool calls; "none" does not (the tools still
// reach the template). Nothing forces a call under "required" or a named choice: when the model answers
// without one, the answer is returned as it is (finish_reason "stop").
#pragma once
#include <optional>
#include <string>

#include "server/openai/request_fields.h"

namespace bunsen::server::openai {

struct ChatRequest {
  CommonParams common;
  Json messages;                             // template-ready messages (array)
  Json tools;                                // validated OpenAI tools array, or null
  Json kwargs;                               // template kwargs: chat_template_kwargs + enable_thinking
  std::optional<std::string> chat_template;  // request-supplied template (refused unless allowed)
  bool parse_tool_calls = false;
  int top_logprobs = -1;                     // -1: logprobs off; 0..20
};

ChatRequest parse_chat_request(const Json& body, ModelService& service);

// The pieces /tokenize reuses.
Json convert_messages(const Json& body);  // body["messages"], validated
Json convert_tools(const Json& body);     // body["tools"] validated, or null when absent/empty
Json template_kwargs(const Json& body, const ModelService& service);
std::optional<std::string> request_template(const Json& body);

}  // namespace bunsen::server::openai
