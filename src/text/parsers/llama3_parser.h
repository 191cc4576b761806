// Llama 3.x JSON tool calls: the whole message is `{"name": ..., "parameters": {...}}` (several joined by
// ';'), optionally after <|python_tag|>; format from Meta's Llama 3.1/3.2 chat templates ("respond with
// a JSON for a function call ... {"name": function name, "parameters": dictionary}").
// Not a markup parser: there is no closing marker, so a message that starts like a call (`{"name"`,
// `{"type"` or <|python_tag|>) is held to the end; any other message streams as content at once.
// Invariant: a held message that does not parse completely is released verbatim as content.
#pragma once
#include "text/parsers/output_parser.h"

namespace bunsen::text::parsers {

class Llama3Parser : public OutputParser {
 public:
  explicit Llama3Parser(const ParserOptions& options);
  std::vector<ParsedEvent> push(std::string_view text) override;
  std::vector<ParsedEvent> finish() override;

 private:
  enum class Mode { kUndecided, kContent, kHolding };
  Mode classify() const;

  bool parse_tools_;
  uint64_t id_seed_;
  Mode mode_ = Mode::kUndecided;
  std::string buf_;
};

}  // namespace bunsen::text::parsers
