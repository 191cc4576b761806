// ResponseAssembler: GenerationEvents -> Responses output items and streaming events (see output.h).
#include "server/responses/output.h"

namespace bunsen::server::responses {

ResponseAssembler::ResponseAssembler(Json base) : response_(std::move(base)) {
  response_["status"] = "in_progress";
  response_["error"] = nullptr;
  response_["incomplete_details"] = nullptr;
  response_["output"] = Json::array();
  response_["usage"] = nullptr;
}

void ResponseAssembler::emit(Json event, std::vector<SseOut>* out) {
  event["sequence_number"] = sequence_++;
  if (!out) return;
  std::string type = event["type"].get<std::string>();
  out->push_back({std::move(type), json_text(event)});
}

void ResponseAssembler::start(std::vector<SseOut>* out) {
  emit(Json{{"type", "response.created"}, {"response", response_}}, out);
  emit(Json{{"type", "response.in_progress"}, {"response", response_}}, out);
}

void ResponseAssembler::open_item(Open kind, std::vector<SseOut>* out) {
  close_item("completed", out);
  Json item;
  Json part;
  if (kind == Open::kReasoning) {
    item = Json{{"type", "reasoning"}, {"id", random_id("rs_")}, {"summary", Json::array()}, {"content", Json::array()}};
    part = Json{{"type", "reasoning_text"}, {"text", ""}};
  } else {
    item = Json{{"type", "message"}, {"id", random_id("msg_")}, {"status", "in_progress"}, {"role", "assistant"},
                {"content", Json::array()}};
    part = Json{{"type", "output_text"}, {"annotations", Json::array()}, {"logprobs", Json::array()}, {"text", ""}};
  }
  response_["output"].push_back(item);
  open_ = kind;
  open_text_.clear();
  const size_t index = response_["output"].size() - 1;
  emit(Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}}, out);
  emit(Json{{"type", "response.content_part.added"}, {"item_id", item["id"]}, {"output_index", index},
            {"content_index", 0}, {"part", part}},
       out);
}

void ResponseAssembler::close_item(const char* status, std::vector<SseOut>* out) {
  if (open_ == Open::kNone) return;
  const size_t index = response_["output"].size() - 1;
  Json& item = current();
  const Json id = item["id"];
  Json part;
  if (open_ == Open::kReasoning) {
    part = Json{{"type", "reasoning_text"}, {"text", open_text_}};
    emit(Json{{"type", "response.reasoning_text.done"}, {"item_id", id}, {"output_index", index},
              {"content_index", 0}, {"text", open_text_}},
         out);
  } else {
    part = Json{{"type", "output_text"}, {"annotations", Json::array()}, {"logprobs", Json::array()}, {"text", open_text_}};
    emit(Json{{"type", "response.output_text.done"}, {"item_id", id}, {"output_index", index},
              {"content_index", 0}, {"text", open_text_}, {"logprobs", Json::array()}},
         out);
    item["status"] = status;
  }
  item["content"] = Json::array({part});
  emit(Json{{"type", "response.content_part.done"}, {"item_id", id}, {"output_index", index},
            {"content_index", 0}, {"part", part}},
       out);
  open_ = Open::kNone;
  open_text_.clear();
  emit(Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", current()}}, out);
}

void ResponseAssembler::text_delta(const std::string& text, std::vector<SseOut>* out) {
  open_text_ += text;
  const size_t index = response_["output"].size() - 1;
  Json ev{{"type", open_ == Open::kReasoning ? "response.reasoning_text.delta" : "response.output_text.delta"},
          {"item_id", current()["id"]},
          {"output_index", index},
          {"content_index", 0},
          {"delta", text}};
  if (open_ == Open::kMessage) ev["logprobs"] = Json::array();
  emit(std::move(ev), out);
}

void ResponseAssembler::tool_call(const text::ToolCall& call, std::vector<SseOut>* out) {
  close_item("completed", out);
  const std::string call_id = call.id.empty() ? random_id("call_") : call.id;
  Json item{{"type", "function_call"}, {"id", random_id("fc_")}, {"call_id", call_id}, {"name", call.name},
            {"arguments", ""}, {"status", "in_progress"}};
  response_["output"].push_back(item);
  const size_t index = response_["output"].size() - 1;
  const Json id = item["id"];
  emit(Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}}, out);
  emit(Json{{"type", "response.function_call_arguments.delta"}, {"item_id", id}, {"output_index", index},
            {"delta", call.arguments}},
       out);
  emit(Json{{"type", "response.function_call_arguments.done"}, {"item_id", id}, {"output_index", index},
            {"name", call.name}, {"arguments", call.arguments}},
       out);
  Json& done = current();
  done["arguments"] = call.arguments;
  done["status"] = "completed";
  emit(Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", done}}, out);
}

void ResponseAssembler::apply(const GenerationEvent& ev, std::vector<SseOut>* out) {
  using Kind = GenerationEvent::Kind;
  if (ev.kind == Kind::kReasoning && !ev.text.empty()) {
    if (open_ != Open::kReasoning) open_item(Open::kReasoning, out);
    reasoning_ += ev.text;
    text_delta(ev.text, out);
  } else if (ev.kind == Kind::kContent && !ev.text.empty()) {
    if (open_ != Open::kMessage) open_item(Open::kMessage, out);
    text_delta(ev.text, out);
  } else if (ev.kind == Kind::kToolCall) {
    tool_call(ev.tool_call, out);
  }
}

void ResponseAssembler::finish(const GenerationEvent& ev, int64_t reasoning_tokens, std::vector<SseOut>* out) {
  const bool length = ev.cause == FinishCause::kLength;
  close_item(length ? "incomplete" : "completed", out);
  const char* status = length ? "incomplete" : ev.cause == FinishCause::kCancelled ? "cancelled" : "completed";
  response_["status"] = status;
  if (length) response_["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  response_["completed_at"] = length ? Json() : Json(unix_now());
  const engine::Usage& u = ev.usage;
  response_["usage"] = Json{{"input_tokens", u.prompt_tokens},
                            {"input_tokens_details", Json{{"cached_tokens", u.cached_tokens}}},
                            {"output_tokens", u.generated_tokens},
                            {"output_tokens_details", Json{{"reasoning_tokens", reasoning_tokens}}},
                            {"total_tokens", u.prompt_tokens + u.generated_tokens}};
  const std::string type = length ? "response.incomplete" : "response.completed";
  emit(Json{{"type", type}, {"response", response_}}, out);
}

void ResponseAssembler::fail(const std::string& code, const std::string& message, std::vector<SseOut>* out) {
  close_item("incomplete", out);
  emit(Json{{"type", "error"}, {"code", code}, {"message", message}, {"param", nullptr}}, out);
  response_["status"] = "failed";
  response_["error"] = Json{{"code", code}, {"message", message}};
  emit(Json{{"type", "response.failed"}, {"response", response_}}, out);
}

}  // namespace bunsen::server::responses
