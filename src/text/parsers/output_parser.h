// Streaming parsers that split a model's generated text into content, reasoning and tool calls, one
// per model family (make_parser). Not the API dialects: the server maps ParsedEvents onto its
// GenerationEvents. Invariants: push() emits content up to the first byte that may begin markup at once;
// markup is held until it closes; a tool call is emitted whole when its markup closes; at finish() held
// or unparseable markup falls back to content verbatim; no emitted text ends inside a UTF-8 sequence;
// the merged events do not depend on how the text was chunked.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

struct ToolCall {
  std::string id;         // "call_<16 hex>" from the parser's seeded counter; the server may replace it
  std::string name;
  std::string arguments;  // a JSON object, serialised compactly, keys in the model's order
  bool operator==(const ToolCall& o) const { return id == o.id && name == o.name && arguments == o.arguments; }
};

struct ParsedEvent {
  enum class Kind { kContent, kReasoning, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;    // kContent / kReasoning: the delta
  ToolCall tool_call;  // kToolCall only

  static ParsedEvent content(std::string t) { return {Kind::kContent, std::move(t), {}}; }
  static ParsedEvent reasoning(std::string t) { return {Kind::kReasoning, std::move(t), {}}; }
  static ParsedEvent tool(ToolCall c) { return {Kind::kToolCall, {}, std::move(c)}; }
  bool operator==(const ParsedEvent& o) const {
    return kind == o.kind && text == o.text && tool_call == o.tool_call;
  }
};

class OutputParser {
 public:
  virtual ~OutputParser() = default;
  // Feeds the next piece of generated text (any split, even inside a UTF-8 sequence).
  virtual std::vector<ParsedEvent> push(std::string_view text) = 0;
  // End of generation: releases everything still held.
  virtual std::vector<ParsedEvent> finish() = 0;
};

struct ParserOptions {
  // The prompt already ends inside a reasoning block (e.g. the template emitted "<think>\n"), so the
  // output starts as reasoning.
  bool reasoning_open_in_prompt = false;
  bool parse_reasoning = true;   // false: reasoning markup is ordinary content
  bool parse_tool_calls = true;  // false: tool-call markup is ordinary content (a request without tools)
  // Drop whitespace at both ends of a reasoning block and leading whitespace of the content after a
  // reasoning block or a tool call (the blank lines templates put around markup).
  bool trim_whitespace = true;
  // OpenAI-style tool list ([{"type":"function","function":{"name","parameters"}}] or the bare function
  // objects). Used where arguments arrive as strings (qwen3_coder, minicpm) to convert each value to
  // the JSON type its schema declares.
  nlohmann::json tools;
  uint64_t id_seed = 0;  // tool-call ids are a pure function of (seed, index of the call)
};

// family: "qwen3" (alias "hermes"), "qwen3_coder", "llama3", "mistral", "gemma4", "minicpm", "none"
// (content only). Throws Error("parser", ...) for an unknown family.
std::unique_ptr<OutputParser> make_parser(std::string_view family, const ParserOptions& options = {});

// The families make_parser knows, for error messages and CLI help.
std::vector<std::string> parser_families();

// Merges adjacent content/reasoning events of the same kind (what a client sees once deltas are joined).
std::vector<ParsedEvent> merge_events(const std::vector<ParsedEvent>& events);

}  // namespace bunsen::text
