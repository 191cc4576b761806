// The streaming engine behind the family parsers: a family is a list of blocks (reasoning, tool call,
// dropped sentinel), each opened by a literal marker; the engine finds markers across chunk boundaries,
// streams reasoning, holds tool-call bodies until their family's end finder says they are complete and
// hands them to the family's body parser. Not family-specific: formats live in tool_formats/gemma4_args.
// Invariant: every decision depends only on bytes already seen, never on where chunks were split.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/parsers/output_parser.h"

namespace bunsen::text::parsers {

// Where a tool-call body ends: [0, inner) is the payload, [0, total) includes the closing markup.
struct BodyEnd {
  size_t inner = 0;
  size_t total = 0;
};

// Resumable scanner state, so a long body is scanned once across many pushes.
struct ScanState {
  size_t pos = 0;
  int mode = 0;
  int depth = 0;
  bool in_string = false;
  bool escape = false;
};

// Returns the end of the body, or nullopt while more text is needed. May keep state in `st`.
using EndFinder = std::function<std::optional<BodyEnd>(std::string_view body, ScanState& st)>;

struct ToolDraft {
  std::string name;
  std::string arguments;  // JSON object text
};
// Parses a complete payload into one or more calls; nullopt (or none) = malformed, the markup falls back
// to content verbatim.
using BodyParser = std::function<std::optional<std::vector<ToolDraft>>(std::string_view inner)>;

enum class BlockKind { kReasoning, kToolCall, kDrop };

struct BlockSpec {
  BlockKind kind = BlockKind::kToolCall;
  std::string open;
  std::string close;            // kReasoning: the closing marker
  std::string label;            // kReasoning: a channel label dropped at the start ("thought" in Gemma 4)
  EndFinder find_end;           // kToolCall
  BodyParser parse;             // kToolCall
  bool ends_reasoning = false;  // kToolCall: its opener also closes an open reasoning block
};

struct MarkupSpec {
  std::vector<BlockSpec> blocks;
};

// "call_" + 16 hex digits: a hash of (seed, index), so ids are reproducible and distinct per call.
std::string make_tool_call_id(uint64_t seed, uint64_t index);

class MarkupParser : public OutputParser {
 public:
  MarkupParser(MarkupSpec spec, const ParserOptions& options);
  std::vector<ParsedEvent> push(std::string_view text) override;
  std::vector<ParsedEvent> finish() override;

 private:
  enum class State { kContent, kReasoning, kTool };
  bool step();
  bool step_content();
  bool step_reasoning();
  bool step_tool();
  bool decide_label();
  void enter(size_t block);
  void emit_content(std::string_view s);
  void emit_reasoning(std::string_view s, bool final);
  size_t held_suffix(const std::vector<const std::string*>& markers) const;

  MarkupSpec spec_;
  bool trim_;
  uint64_t id_seed_;
  uint64_t n_calls_ = 0;
  State state_ = State::kContent;
  size_t block_ = 0;                 // the open block in kReasoning / kTool
  std::string buf_;                  // unprocessed text of the current state
  ScanState scan_;                   // kTool
  bool skip_ws_ = false;             // kContent: drop leading whitespace (after a closed block)
  bool reasoning_started_ = false;   // kReasoning: leading whitespace already trimmed
  bool label_pending_ = false;       // kReasoning: the channel label is not decided yet
  bool reopen_pending_ = false;      // kReasoning opened by the prompt: output may repeat the opener
  std::string pending_ws_;           // kReasoning: trailing whitespace, dropped if the block closes
  std::vector<const std::string*> content_markers_;
  std::vector<ParsedEvent> out_;
};

}  // namespace bunsen::text::parsers
