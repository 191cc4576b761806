// StreamDecoder: incremental detokenisation by window diffing (see tokenizer.h). Not a per-decoder
// special case: it relies only on decode() and holds_back(). Invariants: emitted text is always valid
// UTF-8 (a suffix of a valid decode taken at a character boundary); the window is cut only where the
// cut is transparent to decode(); skipped special ids never enter the window (decode would drop them).
#include <algorithm>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= utf8::kReplacement.size() &&
         s.compare(s.size() - utf8::kReplacement.size(), utf8::kReplacement.size(), utf8::kReplacement) == 0;
}

}  // namespace

std::string StreamDecoder::emit(const std::string& text) {
  size_t start = context_text_.size();
  if (text.compare(0, start, context_text_) != 0) {
    // The window's text no longer starts with what was emitted (possible only past the hold limits):
    // emit what is new, starting at a character boundary.
    start = std::min(start, text.size());
    while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  }
  std::string out = text.substr(start);
  // Keep the last kContext ids as context, extending it back until cutting there is transparent (the
  // tail decodes to a suffix of the window's text: no UTF-8 sequence or byte-fallback run is split).
  size_t cut = window_.size() > kContext ? window_.size() - kContext : 0;
  std::string tail = text;
  for (; cut > 0; --cut) {
    tail = tok_.decode(std::vector<int32_t>(window_.begin() + static_cast<ptrdiff_t>(cut), window_.end()),
                       false);
    if (text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0) break;
  }
  if (cut == 0) tail = text;
  window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(cut));
  context_text_ = std::move(tail);
  n_context_ = window_.size();
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  window_.push_back(id);
  size_t held = window_.size() - n_context_;
  if (held < kMaxHeld && tok_.holds_back(id)) return {};
  std::string text = tok_.decode(window_, false);
  // An incomplete UTF-8 sequence needs at most 3 more ids, hence the small extra allowance.
  if (held < kMaxHeld + 4 && ends_with_replacement(text)) return {};
  return emit(text);
}

std::string StreamDecoder::flush() {
  std::string out;
  if (window_.size() > n_context_) out = emit(tok_.decode(window_, false));
  window_.clear();
  n_context_ = 0;
  context_text_.clear();
  return out;
}

}  // namespace bunsen::text
