// Anthropic Messages request -> one GenerationRequest: `system` + `messages` content blocks (text,
// tool_use, tool_result, thinking) become OpenAI-shaped template messages (assistant tool_calls with object
// arguments, role "tool" results, reasoning_content), `tools` become [{type:function, function:{...}}],
// `thinking` becomes enable_thinking, and the sampling fields map onto sampling::SamplingParams.
// Not the response side (message.h) and not HTTP. Invariants: every rejection is an ApiError 400
// invalid_request_error (404 for an unknown model) whose param names the field at fault, e.g.
// "messages[1].content[0].type"; what can be mapped is accepted (no strict alternation).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "server/api/service.h"

namespace bunsen::server::anthropic {

using Json = nlohmann::ordered_json;

// The prompt side shared by /v1/messages and /v1/messages/count_tokens.
struct Prompt {
  Json messages = Json::array();  // template messages, system first when there is one
  Json tools;                     // OpenAI-shaped tool list, or null (none / tool_choice none)
  Json kwargs = Json::object();   // template variables (enable_thinking)
  bool parse_tool_calls = false;
};

Prompt parse_prompt(const Json& body, const ServiceDefaults& defaults);

// Renders and tokenizes a Prompt with the service's chat template.
struct RenderedPrompt {
  std::string text;
  std::vector<int32_t> ids;
};
RenderedPrompt render_prompt(const Prompt& prompt, const ModelService& service);

struct MessagesRequest {
  std::string model;  // as the client sent it (echoed back)
  bool stream = false;
  GenerationRequest gen;
};

// The whole /v1/messages body: model, max_tokens (required, >= 1), stream, stop_sequences, temperature,
// top_p, top_k plus the prompt; renders and tokenizes it.
MessagesRequest parse_messages_request(const Json& body, const ModelService& service);

// `model`: a required string the service accepts (404 not_found_error otherwise).
std::string check_model(const Json& body, const ModelService& service);

}  // namespace bunsen::server::anthropic
