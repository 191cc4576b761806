// Split / ByteLevel / Sequence pre-tokenizers, following HF tokenizers' semantics for how delimiter
// matches are kept, merged or removed. Not the regex engine (regex.cpp). Invariant: concatenating the
// output pieces of Split with behaviour != Removed gives back the input piece.
#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/json_util.h"
#include "text/regex.h"

namespace bunsen::text {
namespace {

constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& s) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  throw Error("tokenizer", "unknown Split behavior '" + s + "'");
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// HF's SplitDelimiterBehavior applied to a covering list of spans; returns the spans to keep.
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

// Matches of the pattern turned into spans covering the whole piece.
std::vector<Span> to_spans(const std::vector<std::pair<size_t, size_t>>& matches, size_t size, bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size) spans.push_back({prev, size, invert});
  return spans;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const nlohmann::json& pattern, Behavior behavior, bool invert)
      : behavior_(behavior), invert_(invert) {
    if (pattern.contains("Regex"))
      regex_ = std::make_unique<Regex>(pattern.at("Regex").get<std::string>());
    else if (pattern.contains("String"))
      literal_ = pattern.at("String").get<std::string>();
    else
      throw Error("tokenizer", "Split pattern must have a 'Regex' or 'String' key");
  }

  void pre_tokenize(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const std::string& piece : pieces) {
      matches.clear();
      find(piece, matches);
      for (const Span& s : apply_behavior(to_spans(matches, piece.size(), invert_), behavior_))
        if (s.end > s.begin) out.emplace_back(piece, s.begin, s.end - s.begin);
    }
    pieces = std::move(out);
  }

 private:
  void find(const std::string& piece, std::vector<std::pair<size_t, size_t>>& matches) const {
    if (regex_) {
      regex_->find_all(piece, matches);
      return;
    }
    if (literal_.empty()) return;
    for (size_t pos = piece.find(literal_); pos != std::string::npos;
         pos = piece.find(literal_, pos + literal_.size()))
      matches.emplace_back(pos, pos + literal_.size());
  }

  std::unique_ptr<Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }

  void pre_tokenize(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> matches;
    std::string text;
    for (const std::string& piece : pieces) {
      text.clear();
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) text += ' ';
      text += piece;
      if (!regex_) {
        emit(text, out);
        continue;
      }
      matches.clear();
      regex_->find_all(text, matches);
      for (const Span& s : to_spans(matches, text.size(), false))
        if (s.end > s.begin) emit(std::string_view(text).substr(s.begin, s.end - s.begin), out);
    }
    pieces = std::move(out);
  }

 private:
  static void emit(std::string_view raw, std::vector<std::string>& out) {
    if (raw.empty()) return;
    std::string mapped;
    mapped.reserve(raw.size() * 2);
    byte_level::encode(raw, mapped);
    out.push_back(std::move(mapped));
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<std::string>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(j.at("pattern"),
                                               parse_behavior(j.at("behavior").get<std::string>()),
                                               json_util::get_bool(j, "invert", false));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(json_util::get_bool(j, "add_prefix_space", true),
                                                   json_util::get_bool(j, "use_regex", true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers")) {
      auto part = make_pre_tokenizer(p);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  throw Error("tokenizer", "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace bunsen::text
