// Internal to the pre-tokenizers: HF's SplitDelimiterBehavior over a covering list of spans, the
// per-character "match" patterns of HF (each matching character is one match), and the factory of the
// character-class pre-tokenizers (char_pre_tokenizers.cpp). Not a public header.
// Invariant: spans from to_spans() tile the piece exactly, matches and gaps alternating as found.
#pragma once
#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace bunsen::text::split {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
Behavior parse_behavior(const std::string& s);

struct Span {
  size_t begin, end;
  bool is_match;
};
using Matches = std::vector<std::pair<size_t, size_t>>;

std::vector<Span> to_spans(const Matches& matches, size_t size, bool invert);
std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior b);

// Every character for which pred holds is one match (HF's Pattern for Fn(char) -> bool).
template <class Pred>
void char_matches(std::string_view text, Pred&& pred, Matches& out) {
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    if (pred(unicode::next(text, i))) out.emplace_back(start, i);
  }
}

// Replaces each piece by its kept spans; find(text, matches) appends one piece's matches.
template <class Find>
void split_pieces(std::vector<Piece>& pieces, Behavior behavior, bool invert, Find&& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  Matches matches;
  for (Piece& piece : pieces) {
    matches.clear();
    find(std::string_view(piece.text), matches);
    if (matches.empty() && !invert) {  // nothing to split: keep the piece as it is
      if (!piece.text.empty()) out.push_back(std::move(piece));
      continue;
    }
    for (const Span& s : apply_behavior(to_spans(matches, piece.text.size(), invert), behavior))
      if (s.end > s.begin)
        out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
  pieces = std::move(out);
}

// Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer; nullptr for other types.
std::unique_ptr<PreTokenizer> make_char_pre_tokenizer(const std::string& type, const nlohmann::json& j);

}  // namespace bunsen::text::split
