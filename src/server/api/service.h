// ModelService: what the OpenAI and Anthropic dialects share — the served model's identity, tokenizer,
// chat template, output-parser family, request defaults and generation backend — and the text pipeline
// that turns the backend's token events into one internal GenerationEvent stream (detokenize, stop
// strings, reasoning/tool-call parsing, logprobs with token text, usage). Dialects map their JSON onto a
// GenerationRequest and GenerationEvents back onto their JSON/SSE; they never touch the engine directly.
// Not HTTP (no sockets, no routes) and not dialect JSON. Invariants: start() either throws (nothing was
// queued) or the sink gets exactly one terminal event (kFinish or kError); a stop string ends generation
// and cancels the engine request at once; text after a stop string is never emitted.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api/event_relay.h"
#include "server/api/metrics.h"
#include "text/chat_template.h"
#include "text/parsers/output_parser.h"
#include "text/tokenizer.h"

namespace bunsen::server {

// Server-wide defaults (bunsen serve flags); a request's own values win.
struct ServiceDefaults {
  int64_t max_tokens = 4096;  // used when a request gives none (capped to what fits the context)
  float temperature = 0.7f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  std::optional<bool> thinking;  // --thinking: the template's enable_thinking when the request says nothing
  bool allow_request_templates = false;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (from render_chat + tokenize, or a completions prompt)
  sampling::SamplingParams sampling;
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (excluded from the output)
  int top_logprobs = -1;          // -1: none; 0..20
  // Output parsing (text::ParserOptions): reasoning always parsed when the family has it; tool calls
  // only when the request has tools and tool_choice is not "none".
  bool parse_reasoning = true;
  bool reasoning_open_in_prompt = false;
  bool parse_tool_calls = false;
  nlohmann::json tools;  // OpenAI-style tool list (for argument typing)
};

struct TokenLogprob {
  std::string token;           // the token's text (bytes as UTF-8; invalid bytes replaced by U+FFFD)
  std::vector<uint8_t> bytes;  // the token's raw bytes
  float logprob = 0.0f;
  struct Top {
    std::string token;
    std::vector<uint8_t> bytes;
    float logprob = 0.0f;
  };
  std::vector<Top> top;
};

enum class FinishCause { kEos, kStopString, kLength, kCancelled };

struct GenerationEvent {
  enum class Kind { kHeartbeat, kContent, kReasoning, kToolCall, kFinish, kError };
  Kind kind = Kind::kContent;
  std::string text;                    // kContent / kReasoning delta
  text::ToolCall tool_call;            // kToolCall (id "call_<hex>")
  std::vector<TokenLogprob> logprobs;  // tokens released since the previous event (requests with logprobs)
  // kFinish:
  FinishCause cause = FinishCause::kEos;
  std::string stop_sequence;  // kStopString: the stop string that matched
  int n_tool_calls = 0;       // tool calls emitted in this generation
  engine::Usage usage;
  std::vector<int32_t> output_ids;  // every generated id (EOS excluded), for echo/debugging
  // kError:
  std::string error_type;  // "server_error", ...
  std::string error_message;
};
using GenerationSink = std::function<void(GenerationEvent&&)>;

// A running generation; cancel() is thread-safe and idempotent (the sink still gets its terminal event).
class Generation {
 public:
  virtual ~Generation() = default;
  virtual void cancel() = 0;
};

struct ModelServiceConfig {
  std::string model_id;      // what /v1/models lists and responses echo
  std::string model_dir;     // where it was loaded from (shown in /stats)
  std::string parser_family; // text::make_parser family ("none" when the model has none)
  std::string device;        // "cpu", "cuda:0" (shown in /stats)
  int64_t created = 0;       // unix seconds for /v1/models
  ServiceDefaults defaults;
};

class ModelService {
 public:
  // tokenizer and backend must outlive the service; chat_template may be absent (raw models).
  ModelService(ModelServiceConfig config, const text::Tokenizer& tokenizer,
               std::optional<text::ChatTemplate> chat_template, engine::Backend& backend);
  // Runs the events still queued for delivery; the backend must have stopped calling sinks (shut down).
  ~ModelService();
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  const ModelServiceConfig& config() const { return config_; }
  const std::string& model_id() const { return config_.model_id; }
  const ServiceDefaults& defaults() const { return config_.defaults; }
  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  engine::Backend& backend() { return backend_; }
  Metrics& metrics() { return metrics_; }
  bool has_chat_template() const { return chat_template_.has_value(); }

  // True when `name` is this model's id (clients may also send the directory's basename or "default").
  bool accepts_model(const std::string& name) const;

  // Renders messages with the model's template (HF semantics, add_generation_prompt=true); kwargs are
  // template variables (enable_thinking, ...). `request_template` replaces the model's template when
  // allowed (ApiError 400 otherwise). Template errors -> ApiError 400 param "messages".
  std::string render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          const nlohmann::ordered_json& kwargs,
                          const std::optional<std::string>& request_template = std::nullopt) const;
  // Token ids of a rendered chat prompt (no extra BOS/EOS: the template has them) or of plain text
  // (add_special: the tokenizer's BOS rules, as /v1/completions wants).
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const;
  // True when the rendered prompt leaves a reasoning block open (e.g. ends in "<think>\n").
  static bool reasoning_open_at_end(const std::string& rendered);
  // The EOS-exclusive cap: min(default max_tokens, what fits after a prompt of n_prompt tokens).
  int64_t default_max_tokens(int64_t n_prompt) const;

  // Starts a generation. Throws ApiError (e.g. 400 memory_admission/context_over_budget, 400 for bad
  // sampling values) before anything is queued; otherwise the engine's events are handed to the event relay
  // and `sink` receives the generation's events on the relay's thread, in order (on the engine thread
  // with BUNSEN_EVENT_RELAY=0).
  std::shared_ptr<Generation> start(GenerationRequest request, GenerationSink sink);

 private:
  ModelServiceConfig config_;
  const text::Tokenizer& tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  engine::Backend& backend_;
  Metrics metrics_;
  // Shared with the engine's sinks, which may outlive a service whose backend was not shut down first.
  std::shared_ptr<EventRelay> relay_;
};

// Seconds since the epoch (for "created" fields) and a random hex id ("chatcmpl-<hex>", "msg_<hex>").
int64_t unix_now();
std::string random_id(const std::string& prefix, size_t hex_chars = 24);

}  // namespace bunsen::server
