// MarkupParser: the three-state (content / reasoning / tool body) streaming engine.
// Not a format parser. Invariants: buf_ holds only what cannot be decided yet (a possible marker prefix,
// an incomplete UTF-8 sequence, an undecided channel label, or an unfinished tool body).
#include "text/parsers/markup_parser.h"

#include <algorithm>
#include <cstdio>

#include "text/stop_matcher.h"

namespace bunsen::text::parsers {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::string make_tool_call_id(uint64_t seed, uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "call_%016llx",
                static_cast<unsigned long long>(splitmix64(splitmix64(seed) ^ index)));
  return buf;
}

MarkupParser::MarkupParser(MarkupSpec spec, const ParserOptions& options)
    : spec_(std::move(spec)), trim_(options.trim_whitespace), id_seed_(options.id_seed) {
  for (const BlockSpec& b : spec_.blocks) content_markers_.push_back(&b.open);
  if (options.reasoning_open_in_prompt) {
    for (size_t i = 0; i < spec_.blocks.size(); ++i) {
      if (spec_.blocks[i].kind != BlockKind::kReasoning) continue;
      enter(i);
      reopen_pending_ = true;  // a model that repeats the opener anyway: drop it
      break;
    }
  }
}

std::vector<ParsedEvent> MarkupParser::push(std::string_view text) {
  buf_.append(text);
  while (step()) {
  }
  std::vector<ParsedEvent> out = merge_events(out_);
  out_.clear();
  return out;
}

std::vector<ParsedEvent> MarkupParser::finish() {
  while (step()) {
  }
  const BlockSpec* b = state_ == State::kContent ? nullptr : &spec_.blocks[block_];
  if (state_ == State::kContent) {
    emit_content(buf_);
  } else if (state_ == State::kReasoning) {
    if (label_pending_ && !reopen_pending_ && buf_ == b->label) buf_.clear();
    label_pending_ = reopen_pending_ = false;
    emit_reasoning(buf_, /*final=*/true);
  } else {
    emit_content(b->open + buf_);  // unterminated tool markup: verbatim
  }
  buf_.clear();
  state_ = State::kContent;
  std::vector<ParsedEvent> out = merge_events(out_);
  out_.clear();
  return out;
}

bool MarkupParser::step() {
  switch (state_) {
    case State::kContent: return step_content();
    case State::kReasoning: return step_reasoning();
    case State::kTool: return step_tool();
  }
  return false;
}

// Length of the longest suffix of buf_ that is a proper prefix of one of the markers.
size_t MarkupParser::held_suffix(const std::vector<const std::string*>& markers) const {
  size_t max_len = 0;
  for (const std::string* m : markers) max_len = std::max(max_len, m->size());
  std::string_view b(buf_);
  for (size_t k = std::min(b.size(), max_len == 0 ? 0 : max_len - 1); k > 0; --k) {
    std::string_view tail = b.substr(b.size() - k);
    for (const std::string* m : markers)
      if (m->size() > k && starts_with(*m, tail)) return k;
  }
  return 0;
}

bool MarkupParser::step_content() {
  size_t best = std::string::npos, which = 0;
  for (size_t i = 0; i < spec_.blocks.size(); ++i) {
    size_t p = buf_.find(spec_.blocks[i].open);
    if (p < best || (p == best && p != std::string::npos &&
                     spec_.blocks[i].open.size() > spec_.blocks[which].open.size())) {
      best = p;
      which = i;
    }
  }
  if (best != std::string::npos) {
    emit_content(std::string_view(buf_).substr(0, best));
    buf_.erase(0, best + spec_.blocks[which].open.size());
    enter(which);
    return true;
  }
  size_t cut = buf_.size() - held_suffix(content_markers_);
  cut = utf8_complete_prefix(std::string_view(buf_).substr(0, cut));
  emit_content(std::string_view(buf_).substr(0, cut));
  buf_.erase(0, cut);
  return false;
}

void MarkupParser::enter(size_t block) {
  const BlockSpec& b = spec_.blocks[block];
  switch (b.kind) {
    case BlockKind::kDrop: return;  // the sentinel vanishes, content goes on
    case BlockKind::kReasoning:
      state_ = State::kReasoning;
      reasoning_started_ = false;
      pending_ws_.clear();
      label_pending_ = !b.label.empty();
      break;
    case BlockKind::kToolCall:
      state_ = State::kTool;
      scan_ = ScanState{};
      break;
  }
  block_ = block;
}

// Gemma-style channel header: the label ("thought") directly followed by whitespace or '<' is dropped,
// with the newline that ends the header line. Returns false while buf_ is still a prefix of the label.
bool MarkupParser::decide_label() {
  const std::string& label = spec_.blocks[block_].label;
  if (buf_.size() <= label.size() && starts_with(label, buf_)) return false;
  if (starts_with(buf_, label) && (is_ws(buf_[label.size()]) || buf_[label.size()] == '<'))
    buf_.erase(0, label.size() + (buf_[label.size()] == '\n' ? 1 : 0));
  label_pending_ = false;
  return true;
}

bool MarkupParser::step_reasoning() {
  if (reopen_pending_) {
    const std::string& open = spec_.blocks[block_].open;
    if (buf_.size() < open.size() && starts_with(open, buf_)) return false;
    if (starts_with(buf_, open)) buf_.erase(0, open.size());
    reopen_pending_ = false;
  }
  if (label_pending_ && !decide_label()) return false;
  const BlockSpec& r = spec_.blocks[block_];
  std::vector<const std::string*> ends = {&r.close};
  std::vector<size_t> ends_block = {block_};
  for (size_t i = 0; i < spec_.blocks.size(); ++i) {
    if (spec_.blocks[i].kind == BlockKind::kToolCall && spec_.blocks[i].ends_reasoning) {
      ends.push_back(&spec_.blocks[i].open);
      ends_block.push_back(i);
    }
  }
  size_t best = std::string::npos, which = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    size_t p = buf_.find(*ends[i]);
    if (p < best) best = p, which = i;
  }
  if (best == std::string::npos) {
    size_t cut = buf_.size() - held_suffix(ends);
    cut = utf8_complete_prefix(std::string_view(buf_).substr(0, cut));
    emit_reasoning(std::string_view(buf_).substr(0, cut), /*final=*/false);
    buf_.erase(0, cut);
    return false;
  }
  emit_reasoning(std::string_view(buf_).substr(0, best), /*final=*/true);
  buf_.erase(0, best + ends[which]->size());
  state_ = State::kContent;
  skip_ws_ = trim_;
  if (which > 0) enter(ends_block[which]);
  return true;
}

bool MarkupParser::step_tool() {
  const BlockSpec& b = spec_.blocks[block_];
  std::optional<BodyEnd> end = b.find_end(buf_, scan_);
  if (!end) return false;
  std::optional<std::vector<ToolDraft>> calls = b.parse(std::string_view(buf_).substr(0, end->inner));
  if (calls && !calls->empty()) {
    for (ToolDraft& d : *calls) {
      out_.push_back(ParsedEvent::tool(
          ToolCall{make_tool_call_id(id_seed_, n_calls_++), std::move(d.name), std::move(d.arguments)}));
    }
    skip_ws_ = trim_;
  } else {
    emit_content(b.open + buf_.substr(0, end->total));  // malformed: verbatim
  }
  buf_.erase(0, end->total);
  state_ = State::kContent;
  return true;
}

void MarkupParser::emit_content(std::string_view s) {
  if (skip_ws_) {
    size_t i = 0;
    while (i < s.size() && is_ws(s[i])) ++i;
    s.remove_prefix(i);
    if (!s.empty()) skip_ws_ = false;
  }
  if (!s.empty()) out_.push_back(ParsedEvent::content(std::string(s)));
}

// Reasoning text; with trimming, leading whitespace of the block is dropped and trailing whitespace is
// held back until more reasoning follows (dropped when the block ends: final).
void MarkupParser::emit_reasoning(std::string_view s, bool final) {
  if (!trim_) {
    if (!s.empty()) out_.push_back(ParsedEvent::reasoning(std::string(s)));
    return;
  }
  if (!reasoning_started_) {
    size_t i = 0;
    while (i < s.size() && is_ws(s[i])) ++i;
    s.remove_prefix(i);
    if (s.empty()) return;
    reasoning_started_ = true;
  }
  size_t e = s.size();
  while (e > 0 && is_ws(s[e - 1])) --e;
  if (e == 0) {
    if (!final) pending_ws_.append(s);
    else pending_ws_.clear();
    return;
  }
  std::string text = pending_ws_;
  text.append(s.substr(0, e));
  pending_ws_ = final ? std::string() : std::string(s.substr(e));
  out_.push_back(ParsedEvent::reasoning(std::move(text)));
}

}  // namespace bunsen::text::parsers

namespace bunsen::text {

std::vector<ParsedEvent> merge_events(const std::vector<ParsedEvent>& events) {
  std::vector<ParsedEvent> out;
  for (const ParsedEvent& e : events) {
    if (e.kind != ParsedEvent::Kind::kToolCall && !out.empty() && out.back().kind == e.kind) {
      out.back().text += e.text;
    } else if (e.kind == ParsedEvent::Kind::kToolCall || !e.text.empty()) {
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace bunsen::text
