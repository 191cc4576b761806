// Split / ByteLevel / Sequence pre-tokenizers and the factory, following HF tokenizers' semantics for how
// delimiter matches are kept, merged or removed. Not the regex engine (regex.cpp) and not the
// character-class pre-tokenizers (char_pre_tokenizers.cpp). Invariant: concatenating the output pieces of
// Split with behaviour != Removed gives back the input piece.
#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/json_util.h"
#include "text/regex.h"
#include "text/split_util.h"

namespace bunsen::text {
namespace split {

Behavior parse_behavior(const std::string& s) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  throw Error("tokenizer", "unknown Split behavior '" + s + "'");
}

std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior b) {
  std::vector<Span> out;
  bool prev_match = false;
  switch (b) {
    case Behavior::kIsolated:
      return spans;
    case Behavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      return out;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        prev_match = s.is_match;
      }
      return out;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        prev_match = s.is_match;
      }
      return out;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !out.empty())
          out.back().begin = it->begin;
        else
          out.push_back(*it);
        prev_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

std::vector<Span> to_spans(const Matches& matches, size_t size, bool invert) {
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size) spans.push_back({prev, size, invert});
  return spans;
}

}  // namespace split

namespace {

constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const nlohmann::json& pattern, split::Behavior behavior, bool invert)
      : behavior_(behavior), invert_(invert) {
    if (pattern.contains("Regex"))
      regex_ = std::make_unique<Regex>(pattern.at("Regex").get<std::string>());
    else if (pattern.contains("String"))
      literal_ = pattern.at("String").get<std::string>();
    else
      throw Error("tokenizer", "Split pattern must have a 'Regex' or 'String' key");
  }

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split::split_pieces(pieces, behavior_, invert_,
                        [this](std::string_view text, split::Matches& m) { find(text, m); });
  }

  void for_each_piece(std::string_view text, bool at_start, PieceSink sink) const override {
    split::Matches m;
    find(text, m);
    for (const split::Span& s : split::apply_behavior(split::to_spans(m, text.size(), invert_), behavior_))
      if (s.end > s.begin) sink(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
  }

 private:
  void find(std::string_view text, split::Matches& m) const {
    if (regex_) {
      regex_->find_all(text, m);
      return;
    }
    if (literal_.empty()) return;
    for (size_t pos = text.find(literal_); pos != std::string::npos;
         pos = text.find(literal_, pos + literal_.size()))
      m.emplace_back(pos, pos + literal_.size());
  }

  std::unique_ptr<Regex> regex_;
  std::string literal_;
  split::Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, bool map_bytes)
      : add_prefix_space_(add_prefix_space), map_bytes_(map_bytes) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (regex_)
      split::split_pieces(pieces, split::Behavior::kIsolated, false,
                          [this](std::string_view text, split::Matches& m) { regex_->find_all(text, m); });
    if (!map_bytes_) return;
    std::string mapped;
    for (Piece& p : pieces) {
      mapped.clear();
      byte_level::encode(p.text, mapped);
      p.text.swap(mapped);
    }
  }

  void for_each_piece(std::string_view text, bool at_start, PieceSink sink) const override {
    if (map_bytes_ || add_prefix_space_) {
      PreTokenizer::for_each_piece(text, at_start, sink);
      return;
    }
    if (!regex_) {
      if (!text.empty()) sink(text, at_start);
      return;
    }
    split::Matches m;
    regex_->find_all(text, m);
    for (const split::Span& s : split::to_spans(m, text.size(), false))
      if (s.end > s.begin) sink(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
  }

 private:
  bool add_prefix_space_, map_bytes_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }
  void for_each_piece(std::string_view text, bool at_start, PieceSink sink) const override {
    stream_from(0, text, at_start, sink);
  }

 private:
  void stream_from(size_t k, std::string_view text, bool at_start, PieceSink sink) const {
    if (k == parts_.size()) {
      sink(text, at_start);
      return;
    }
    parts_[k]->for_each_piece(text, at_start,
                              [&](std::string_view p, bool s) { stream_from(k + 1, p, s, sink); });
  }
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

bool ends_with_byte_level(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  const std::string type = json_util::get_string(j, "type");
  if (type == "ByteLevel") return true;
  if (type != "Sequence") return false;
  const auto& parts = json_util::get_or_null(j, "pretokenizers");
  return parts.is_array() && !parts.empty() && ends_with_byte_level(parts.back());
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const PreTokenizerOptions& opt) {
  json_util::NestingGuard nesting;
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(j.at("pattern"),
                                               split::parse_behavior(j.at("behavior").get<std::string>()),
                                               json_util::get_bool(j, "invert", false));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(json_util::get_bool(j, "add_prefix_space", true),
                                                   json_util::get_bool(j, "use_regex", true),
                                                   !opt.skip_final_byte_mapping);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const auto& list = j.at("pretokenizers");
    check(list.is_array(), "tokenizer", "Sequence 'pretokenizers' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      PreTokenizerOptions part_opt;  // only the last step may skip the byte mapping
      part_opt.skip_final_byte_mapping = opt.skip_final_byte_mapping && i + 1 == list.size();
      auto part = make_pre_tokenizer(list[i], part_opt);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (auto p = split::make_char_pre_tokenizer(type, j)) return p;
  throw Error("tokenizer", "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace bunsen::text
