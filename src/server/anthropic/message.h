// MessageAssembler: turns one generation's GenerationEvents into an Anthropic Message — the content
// blocks (thinking, text, tool_use) for the non-stream body and, event by event, the streaming grammar
// message_start -> (content_block_start -> content_block_delta* -> content_block_stop)* -> message_delta ->
// message_stop. Not the request parsing (request.h) and not I/O: it returns (event, data) pairs.
// Invariants: block indexes are consecutive from 0; at most one block is open; adjacent deltas of the same
// kind extend one block; every opened block is stopped before message_delta; a tool_use block carries its
// whole input as one input_json_delta.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "server/api/service.h"

namespace bunsen::server::anthropic {

using Json = nlohmann::ordered_json;

// Compact JSON text; invalid UTF-8 is replaced by U+FFFD instead of throwing.
inline std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

struct SseOut {
  std::string event;
  std::string data;  // JSON text
};

// end_turn | max_tokens | stop_sequence | tool_use for a kFinish event.
const char* stop_reason(const GenerationEvent& finish);

// "call_<hex>" -> "toolu_<hex>" (any other id gets a fresh toolu_ id).
std::string tool_use_id(const std::string& call_id);

class MessageAssembler {
 public:
  MessageAssembler(std::string id, std::string model, int64_t input_tokens);

  // message_start (empty content, null stop_reason, input usage).
  SseOut message_start() const;
  // A content / reasoning / tool-call event: updates the blocks, appends the SSE events it implies.
  void apply(const GenerationEvent& ev, std::vector<SseOut>* out);
  // The kFinish event: closes the open block, appends message_delta and message_stop.
  void finish(const GenerationEvent& ev, std::vector<SseOut>* out);
  // The full Message object (meaningful after finish()).
  Json message() const;

 private:
  enum class Open { kNone, kText, kThinking };
  void open_block(Open kind, Json block, std::vector<SseOut>* out);
  void close_block(std::vector<SseOut>* out);
  void delta(Json delta, std::vector<SseOut>* out);
  Json usage() const;

  std::string id_, model_;
  int64_t input_tokens_ = 0;   // prompt tokens not read from the cache
  int64_t cached_tokens_ = 0;  // prompt tokens read from the prefix cache
  int64_t output_tokens_ = 0;
  Json content_ = Json::array();
  Open open_ = Open::kNone;
  std::string stop_reason_;
  Json stop_sequence_;  // string or null
};

}  // namespace bunsen::server::anthropic
