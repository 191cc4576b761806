// ResponseAssembler: one generation's GenerationEvents -> an OpenAI Responses `response` object (output
// items: reasoning, message with output_text, function_call) and, event by event, the streaming sequence
// response.created, response.in_progress, then per item output_item.added -> content_part.added ->
// *.delta* -> *.done -> content_part.done -> output_item.done (function calls: output_item.added ->
// function_call_arguments.delta -> .done -> output_item.done), then response.completed / incomplete.
// Not request parsing and not I/O: events come back as (type, JSON text) pairs.
// Invariants: sequence_number counts from 0 over every event; at most one item is open; output_index is
// the item's position in `output`; the final response repeats exactly the items the stream produced.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api/service.h"

namespace bunsen::server::responses {

using Json = nlohmann::ordered_json;

struct SseOut {
  std::string event;  // equals the JSON's "type"
  std::string data;
};

inline std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

class ResponseAssembler {
 public:
  // `base`: the response object with its echo fields (id, created_at, model, instructions, tools, ...);
  // status, output, usage and the error fields are managed here.
  explicit ResponseAssembler(Json base);

  void start(std::vector<SseOut>* out);  // response.created + response.in_progress
  void apply(const GenerationEvent& ev, std::vector<SseOut>* out);
  // kFinish: closes the open item; status completed, incomplete (length) or cancelled. `reasoning_tokens`
  // is reported in usage.output_tokens_details.
  void finish(const GenerationEvent& ev, int64_t reasoning_tokens, std::vector<SseOut>* out);
  // kError after the stream began: an `error` event then response.failed.
  void fail(const std::string& code, const std::string& message, std::vector<SseOut>* out);

  const Json& response() const { return response_; }
  const Json& output() const { return response_["output"]; }
  const std::string& reasoning_text() const { return reasoning_; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  void emit(Json event, std::vector<SseOut>* out);
  void open_item(Open kind, std::vector<SseOut>* out);
  void close_item(const char* status, std::vector<SseOut>* out);
  void text_delta(const std::string& text, std::vector<SseOut>* out);
  void tool_call(const text::ToolCall& call, std::vector<SseOut>* out);
  Json& current() { return response_["output"].back(); }

  Json response_;
  Open open_ = Open::kNone;
  std::string open_text_;  // the open item's text so far
  std::string reasoning_;  // all reasoning text (for reasoning_tokens)
  int64_t sequence_ = 0;
};

}  // namespace bunsen::server::responses
