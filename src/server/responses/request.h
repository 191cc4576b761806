// OpenAI Responses request -> one GenerationRequest: `input` (a string or items: messages with text parts,
// function_call, function_call_output, reasoning) after the stored conversation of previous_response_id,
// `instructions` as the system prompt, flat function `tools`, tool_choice, reasoning.effort ->
// enable_thinking, max_output_tokens and sampling. Also the echo fields the response object repeats.
// Not the response side (output.h) and not the store. Invariants: every rejection is an ApiError 400
// invalid_request_error (404 for an unknown model) whose param names the field, e.g. "input[2].content".
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api/service.h"

namespace bunsen::server::responses {

using Json = nlohmann::ordered_json;

struct ResponsesRequest {
  std::string model;        // the canonical id echoed back
  bool stream = false;
  bool store = true;
  std::string previous_response_id;  // "" when none
  Json input_items = Json::array();  // this request's input, normalised to an item list
  std::string instructions;          // system prompt ("" when none)
  bool has_instructions = false;
  Json tools = Json::array();        // the function tools as given (flat shape), echoed back
  Json template_tools;               // OpenAI chat-shaped tools for the template, or null
  Json tool_choice = "auto";         // echoed back
  bool parse_tool_calls = false;
  std::optional<int64_t> max_output_tokens;
  bool parallel_tool_calls = true;
  Json metadata = Json::object();
  Json reasoning;                    // {effort, summary} echo
  Json kwargs = Json::object();      // template variables (enable_thinking)
  double temperature = 1.0;          // echoed as given (gen.sampling holds the float)
  double top_p = 1.0;
  GenerationRequest gen;             // sampling filled here; prompt/max_tokens by build_prompt()
};

// Reads and checks every field except the conversation history (needs the store).
ResponsesRequest parse_responses_request(const Json& body, const ModelService& service);

// Template messages of a conversation: system (instructions, then system/developer items) first, then the
// turns. The first `n_history` items come from the store; error params count from the item after them
// ("input[0]" is items[n_history]).
Json items_to_messages(const Json& items, const std::string& instructions, bool has_instructions,
                       size_t n_history = 0);

// Renders history + this request's items, tokenizes, and sets gen.prompt, gen.max_tokens and the parser
// options. `history` holds the previous response's conversation items (empty array when none).
void build_prompt(ResponsesRequest& req, const Json& history, const ModelService& service);

}  // namespace bunsen::server::responses
