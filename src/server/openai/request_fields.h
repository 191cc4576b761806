// The request fields /v1/chat/completions and /v1/completions share (model, stream, n, max_tokens, stop,
// sampling, seed, logit_bias) read from the parsed JSON body into one struct, each field checked with the
// OpenAI parameter name at fault. Not the message/prompt parsing (chat_request.h, completions_handler.cpp)
// and not the generation itself. Invariants: every reader throws ApiError (400 invalid_request_error with
// `param` set, or 404 model_not_found) and never returns a value the engine would refuse for range reasons.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "server/api/service.h"

namespace bunsen::server::openai {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxChoices = 8;          // n
inline constexpr size_t kMaxStopStrings = 64;  // OpenAI allows 4; llama.cpp/vLLM clients send more
inline constexpr size_t kMaxStopBytes = 1024;  // one stop string
inline constexpr int kMaxTopLogprobs = 20;     // chat top_logprobs
inline constexpr double kMaxLogitBias = 100.0; // |logit_bias value|, as OpenAI

struct CommonParams {
  std::string model;  // the canonical id to echo in responses
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int n = 1;                          // choices per prompt
  std::optional<int64_t> max_tokens;  // absent: ModelService::default_max_tokens(n_prompt)
  std::vector<std::string> stop;
  sampling::SamplingParams sampling;  // seed included when given
  bool ignore_eos = false;            // vLLM/llama.cpp extension
};

// `model`: absent/null is fine; otherwise a string the service accepts (404 model_not_found if not).
std::string check_model(const Json& body, const ModelService& service);

// Reads everything CommonParams holds. `max_tokens_keys` lists the accepted names, the first present wins
// (chat: max_completion_tokens, max_tokens; completions: max_tokens).
CommonParams parse_common(const Json& body, ModelService& service,
                          const std::vector<const char*>& max_tokens_keys);

// `stop`: a string or an array of at most kMaxStopStrings non-empty strings.
std::vector<std::string> parse_stop(const Json& body);

// `logit_bias`: {"<token id>": number in [-100, 100]}, ids inside the vocabulary.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& body, int64_t vocab_size);

// A strictly typed integer field in [lo, hi]; `def` when absent or null.
int64_t get_int_in(const Json& body, const char* key, int64_t def, int64_t lo, int64_t hi);

// The per-choice requests of one prompt: copies of `base`, choice i seeded with seed + i when seeded.
std::vector<GenerationRequest> expand_choices(const GenerationRequest& base, int n);

// Token ids given by the client (/v1/completions prompt, /detokenize): integers in [0, vocab).
std::vector<int32_t> parse_token_ids(const Json& arr, int64_t vocab_size, const std::string& param);

}  // namespace bunsen::server::openai
