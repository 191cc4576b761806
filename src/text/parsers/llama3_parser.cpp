// Llama3Parser: decide early whether the message can be a JSON tool call, hold it if so, parse at finish.
// Not streaming-incremental JSON. Invariant: the decision only looks at a prefix and never flips back.
#include "text/parsers/llama3_parser.h"

#include "text/parsers/markup_parser.h"
#include "text/parsers/tool_formats.h"
#include "text/stop_matcher.h"

namespace bunsen::text::parsers {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view skip_ws(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return s.substr(i);
}

// End (exclusive) of the JSON object or array starting at s[0], or npos if it never closes.
size_t json_value_end(std::string_view s) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// `{...}; {...}` after the optional python tag -> calls; nullopt unless the whole text is calls.
std::optional<std::vector<ToolDraft>> parse_calls(std::string_view s) {
  s = skip_ws(s);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s = skip_ws(s.substr(kPythonTag.size()));
  std::vector<ToolDraft> calls;
  while (!s.empty()) {
    if (s.front() != '{') return std::nullopt;
    size_t end = json_value_end(s);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view obj = s.substr(0, end);
    std::optional<ToolDraft> d =
        call_from_object(OrderedJson::parse(obj.data(), obj.data() + obj.size(), nullptr, false));
    if (!d) return std::nullopt;
    calls.push_back(std::move(*d));
    s = skip_ws(s.substr(end));
    if (!s.empty() && s.front() == ';') s = skip_ws(s.substr(1));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

Llama3Parser::Llama3Parser(const ParserOptions& options)
    : parse_tools_(options.parse_tool_calls), id_seed_(options.id_seed) {
  if (!parse_tools_) mode_ = Mode::kContent;
}

// kHolding once the text is <|python_tag|>... or starts with `{"name"` / `{"type"`; kContent as soon as
// it cannot; kUndecided while the prefix is still compatible with a call.
Llama3Parser::Mode Llama3Parser::classify() const {
  std::string_view s = skip_ws(buf_);
  if (s.empty()) return Mode::kUndecided;
  if (s.size() < kPythonTag.size() && kPythonTag.substr(0, s.size()) == s) return Mode::kUndecided;
  if (s.substr(0, kPythonTag.size()) == kPythonTag) return Mode::kHolding;
  if (s.front() != '{') return Mode::kContent;
  s = skip_ws(s.substr(1));
  if (s.empty()) return Mode::kUndecided;
  if (s.front() != '"') return Mode::kContent;
  s.remove_prefix(1);
  for (std::string_view key : {"name\"", "type\""}) {
    size_t n = std::min(s.size(), key.size());
    if (s.substr(0, n) == key.substr(0, n)) return n == key.size() ? Mode::kHolding : Mode::kUndecided;
  }
  return Mode::kContent;
}

std::vector<ParsedEvent> Llama3Parser::push(std::string_view text) {
  buf_.append(text);
  if (mode_ == Mode::kUndecided) mode_ = classify();
  std::vector<ParsedEvent> out;
  if (mode_ == Mode::kContent) {
    size_t cut = utf8_complete_prefix(buf_);
    if (cut > 0) out.push_back(ParsedEvent::content(buf_.substr(0, cut)));
    buf_.erase(0, cut);
  }
  return out;
}

std::vector<ParsedEvent> Llama3Parser::finish() {
  std::vector<ParsedEvent> out;
  if (mode_ == Mode::kHolding) {
    if (std::optional<std::vector<ToolDraft>> calls = parse_calls(buf_)) {
      uint64_t n = 0;
      for (ToolDraft& d : *calls)
        out.push_back(ParsedEvent::tool({make_tool_call_id(id_seed_, n++), std::move(d.name), std::move(d.arguments)}));
      buf_.clear();
    }
  }
  if (!buf_.empty()) out.push_back(ParsedEvent::content(std::move(buf_)));
  buf_.clear();
  mode_ = parse_tools_ ? Mode::kUndecided : Mode::kContent;
  return out;
}

}  // namespace bunsen::text::parsers
