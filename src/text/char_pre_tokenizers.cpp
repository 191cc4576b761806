// The character-class pre-tokenizers: Metaspace, Digits, Whitespace (\w+|[^\w\s]+ with Oniguruma's
// Unicode \w), WhitespaceSplit, CharDelimiterSplit, Punctuation and BertPreTokenizer. Not Split/ByteLevel
// (pre_tokenizer.cpp). Invariant: classes follow HF tokenizers (Rust char methods, unicode_categories), see
// unicode.h.
#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/json_util.h"
#include "text/split_util.h"
#include "text/utf8.h"

namespace bunsen::text::split {
namespace {

// Oniguruma's \w for Unicode: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  // Other_Alphabetic characters outside the letter/mark categories (circled and squared Latin letters).
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NL) || cat == UTF8PROC_CATEGORY_PC;
}

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  explicit Metaspace(const nlohmann::json& j)
      : replacement_(json_util::get_string(j, "replacement", "\xE2\x96\x81")) {
    check(!replacement_.empty() && utf8::valid_sequence_length(replacement_) == replacement_.size(),
          "tokenizer", "Metaspace 'replacement' must be one character");
    std::string scheme = json_util::get_string(j, "prepend_scheme");
    if (scheme.empty()) scheme = json_util::get_bool(j, "add_prefix_space", true) ? "always" : "never";
    if (scheme == "always")
      prepend_ = Prepend::kAlways;
    else if (scheme == "first")
      prepend_ = Prepend::kFirst;
    else if (scheme == "never")
      prepend_ = Prepend::kNever;
    else
      throw Error("tokenizer", "unknown Metaspace prepend_scheme '" + scheme + "'");
    split_ = json_util::get_bool(j, "split", true);
  }

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });  // HF prepends nothing to ""
    for (Piece& p : pieces) {
      std::string out;
      out.reserve(p.text.size() + replacement_.size());
      bool starts =
          p.text.compare(0, replacement_.size(), replacement_) == 0 || (!p.text.empty() && p.text[0] == ' ');
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start)))
        out += replacement_;
      for (char c : p.text) {
        if (c == ' ')
          out += replacement_;
        else
          out += c;
      }
      p.text.swap(out);
    }
    if (!split_) return;
    split_pieces(pieces, Behavior::kMergedWithNext, false, [this](std::string_view text, Matches& m) {
      for (size_t pos = text.find(replacement_); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size()))
        m.emplace_back(pos, pos + replacement_.size());
    });
  }

 private:
  std::string replacement_;
  Prepend prepend_ = Prepend::kAlways;
  bool split_ = true;
};

// Splits on characters that satisfy Pred with a fixed behaviour.
template <class Pred>
class CharSplit final : public PreTokenizer {
 public:
  CharSplit(Pred pred, Behavior behavior) : pred_(pred), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_, false,
                 [this](std::string_view text, Matches& m) { char_matches(text, pred_, m); });
  }

 private:
  Pred pred_;
  Behavior behavior_;
};

template <class Pred>
std::unique_ptr<PreTokenizer> char_split(Pred pred, Behavior behavior) {
  return std::make_unique<CharSplit<Pred>>(pred, behavior);
}

// \w+|[^\w\s]+ : maximal runs of word characters and of other non-space characters; spaces dropped.
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, Behavior::kRemoved, true, [](std::string_view text, Matches& m) {
      int run_kind = 0;  // 0: none, 1: word, 2: other
      for (size_t i = 0; i < text.size();) {
        size_t start = i;
        char32_t c = unicode::next(text, i);
        int kind = unicode::is_white_space(c) ? 0 : is_word_char(c) ? 1 : 2;
        if (kind != 0 && kind == run_kind)
          m.back().second = i;
        else if (kind != 0)
          m.emplace_back(start, i);
        run_kind = kind;
      }
    });
  }
};

class Sequence2 final : public PreTokenizer {
 public:
  Sequence2(std::unique_ptr<PreTokenizer> a, std::unique_ptr<PreTokenizer> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    a_->pre_tokenize(pieces);
    b_->pre_tokenize(pieces);
  }

 private:
  std::unique_ptr<PreTokenizer> a_, b_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_char_pre_tokenizer(const std::string& type, const nlohmann::json& j) {
  if (type == "Metaspace") return std::make_unique<Metaspace>(j);
  if (type == "Digits")
    return char_split(unicode::is_numeric, json_util::get_bool(j, "individual_digits", false)
                                               ? Behavior::kIsolated
                                               : Behavior::kContiguous);
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "CharDelimiterSplit") {
    std::string d = j.at("delimiter").get<std::string>();
    size_t i = 0;
    char32_t delim = d.empty() ? 0 : unicode::next(d, i);
    check(!d.empty() && i == d.size(), "tokenizer", "CharDelimiterSplit 'delimiter' must be one character");
    return char_split([delim](char32_t c) { return c == delim; }, Behavior::kRemoved);
  }
  if (type == "WhitespaceSplit") return char_split(unicode::is_white_space, Behavior::kRemoved);
  if (type == "Punctuation")
    return char_split(unicode::is_bert_punctuation,
                      parse_behavior(json_util::get_string(j, "behavior", "Isolated")));
  if (type == "BertPreTokenizer")
    return std::make_unique<Sequence2>(char_split(unicode::is_white_space, Behavior::kRemoved),
                                       char_split(unicode::is_bert_punctuation, Behavior::kIsolated));
  return nullptr;
}

}  // namespace bunsen::text::split
