// MessageAssembler: GenerationEvents -> Anthropic content blocks and streaming events.
#include "server/anthropic/message.h"

namespace bunsen::server::anthropic {

namespace {
constexpr auto kReplace = Json::error_handler_t::replace;  // invalid UTF-8 never throws from dump()
}  // namespace

const char* stop_reason(const GenerationEvent& finish) {
  if (finish.cause == FinishCause::kLength) return "max_tokens";
  if (finish.n_tool_calls > 0) return "tool_use";
  if (finish.cause == FinishCause::kStopString) return "stop_sequence";
  return "end_turn";
}

std::string tool_use_id(const std::string& call_id) {
  const std::string prefix = "call_";
  if (call_id.size() > prefix.size() && call_id.compare(0, prefix.size(), prefix) == 0)
    return "toolu_" + call_id.substr(prefix.size());
  return random_id("toolu_");
}

MessageAssembler::MessageAssembler(std::string id, std::string model, int64_t input_tokens)
    : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}

Json MessageAssembler::usage() const {
  return Json{{"input_tokens", input_tokens_},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", cached_tokens_},
              {"output_tokens", output_tokens_}};
}

SseOut MessageAssembler::message_start() const {
  Json msg{{"id", id_},          {"type", "message"},       {"role", "assistant"}, {"model", model_},
           {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}, {"usage", usage()}};
  return {"message_start", Json{{"type", "message_start"}, {"message", std::move(msg)}}.dump(-1, ' ', false, kReplace)};
}

void MessageAssembler::open_block(Open kind, Json block, std::vector<SseOut>* out) {
  close_block(out);
  content_.push_back(block);
  open_ = kind;
  if (out)
    out->push_back({"content_block_start", Json{{"type", "content_block_start"},
                                                {"index", content_.size() - 1},
                                                {"content_block", std::move(block)}}
                                               .dump(-1, ' ', false, kReplace)});
}

void MessageAssembler::close_block(std::vector<SseOut>* out) {
  if (open_ == Open::kNone) return;
  open_ = Open::kNone;
  if (out)
    out->push_back({"content_block_stop",
                    Json{{"type", "content_block_stop"}, {"index", content_.size() - 1}}.dump(-1, ' ', false, kReplace)});
}

void MessageAssembler::delta(Json delta, std::vector<SseOut>* out) {
  if (out)
    out->push_back({"content_block_delta", Json{{"type", "content_block_delta"},
                                                {"index", content_.size() - 1},
                                                {"delta", std::move(delta)}}
                                               .dump(-1, ' ', false, kReplace)});
}

void MessageAssembler::apply(const GenerationEvent& ev, std::vector<SseOut>* out) {
  using Kind = GenerationEvent::Kind;
  if (ev.kind == Kind::kContent && !ev.text.empty()) {
    if (open_ != Open::kText) open_block(Open::kText, Json{{"type", "text"}, {"text", ""}}, out);
    content_.back()["text"].get_ref<std::string&>() += ev.text;
    delta(Json{{"type", "text_delta"}, {"text", ev.text}}, out);
  } else if (ev.kind == Kind::kReasoning && !ev.text.empty()) {
    if (open_ != Open::kThinking)
      open_block(Open::kThinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
    content_.back()["thinking"].get_ref<std::string&>() += ev.text;
    delta(Json{{"type", "thinking_delta"}, {"thinking", ev.text}}, out);
  } else if (ev.kind == Kind::kToolCall) {
    Json input = Json::parse(ev.tool_call.arguments, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object()) input = Json::object();
    Json start{{"type", "tool_use"}, {"id", tool_use_id(ev.tool_call.id)}, {"name", ev.tool_call.name},
               {"input", Json::object()}};
    open_block(Open::kText, start, out);  // any open kind: closed right below
    content_.back()["input"] = input;
    delta(Json{{"type", "input_json_delta"}, {"partial_json", input.dump(-1, ' ', false, kReplace)}}, out);
    close_block(out);
  }
}

void MessageAssembler::finish(const GenerationEvent& ev, std::vector<SseOut>* out) {
  close_block(out);
  cached_tokens_ = ev.usage.cached_tokens;
  input_tokens_ = ev.usage.prompt_tokens - ev.usage.cached_tokens;
  output_tokens_ = ev.usage.generated_tokens;
  stop_reason_ = stop_reason(ev);
  stop_sequence_ = ev.cause == FinishCause::kStopString && ev.n_tool_calls == 0 ? Json(ev.stop_sequence) : Json();
  if (!out) return;
  Json delta{{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}};
  out->push_back({"message_delta",
                  Json{{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", usage()}}.dump(-1, ' ', false, kReplace)});
  out->push_back({"message_stop", Json{{"type", "message_stop"}}.dump(-1, ' ', false, kReplace)});
}

Json MessageAssembler::message() const {
  return Json{{"id", id_},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model_},
              {"content", content_},
              {"stop_reason", stop_reason_.empty() ? Json() : Json(stop_reason_)},
              {"stop_sequence", stop_sequence_},
              {"usage", usage()}};
}

}  // namespace bunsen::server::anthropic
