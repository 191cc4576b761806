// Normalizers: Unicode forms through utf8proc, Lowercase (per character, as Rust's char::to_lowercase),
// Replace, Prepend, Strip, BertNormalizer (clean_text, CJK spacing, accent stripping, lowercase) and
// Sequence. Not the Precompiled charsmap (rejected). Invariant: the Unicode forms skip utf8proc only
// for text made of characters the form provably leaves alone (InertTable), e.g. ASCII or plain CJK.
#include "text/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/status.h"
#include "text/json_util.h"
#include "text/regex.h"
#include "text/replace_pattern.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

constexpr int kNfd = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
constexpr char32_t kEmojiBegin = 0x1F000, kEmojiEnd = 0x1FB00;

// Characters a Unicode form leaves alone whatever surrounds them: canonical combining class 0, the form
// maps them to themselves, and (for the composing forms) they cannot be the second character of a
// composition (marks and Hangul V/T jamo can). A text made only of such characters is already in that
// form, so the utf8proc pass can be skipped. Computed once per form from utf8proc itself, for the BMP
// and the emoji blocks (other code points take the full path).
class InertTable {
 public:
  explicit InertTable(int options) : bmp_(0x10000), emoji_(kEmojiEnd - kEmojiBegin) {
    bool composes = options & UTF8PROC_COMPOSE;
    for (char32_t c = 0; c < 0x10000; ++c) bmp_[c] = inert(c, options, composes);
    for (char32_t c = kEmojiBegin; c < kEmojiEnd; ++c) emoji_[c - kEmojiBegin] = inert(c, options, composes);
  }
  bool is_inert(char32_t c) const {
    return c < 0x10000 ? bmp_[c] : (c >= kEmojiBegin && c < kEmojiEnd && emoji_[c - kEmojiBegin]);
  }

  // Applies the form only to the stretches around non-inert characters: each stretch starts at the
  // starter before it (which may compose with it) and ends before the next inert character, a
  // normalization boundary, so form(text) == concatenation of form(stretches) and copied inert text.
  template <class Form>
  void normalize(std::string& s, Form&& form) const {
    std::string out;
    size_t copied = 0, i = 0, prev = std::string::npos;
    while (i < s.size()) {
      size_t start = i;
      if (static_cast<unsigned char>(s[i]) < 0x80 || is_inert(unicode::next(s, i))) {
        i = std::max(i, start + 1);
        prev = start;
        continue;
      }
      size_t begin = prev != std::string::npos && prev >= copied ? prev : start;
      size_t end = i;
      while (end < s.size()) {
        size_t j = end;
        if (static_cast<unsigned char>(s[j]) < 0x80 || is_inert(unicode::next(s, j))) break;
        end = j;
      }
      std::string stretch = s.substr(begin, end - begin);
      form(stretch);
      out.append(s, copied, begin - copied).append(stretch);
      copied = i = end;
      prev = std::string::npos;
    }
    if (copied == 0) return;  // everything was inert
    out.append(s, copied, std::string::npos);
    s = std::move(out);
  }

 private:
  static bool inert(char32_t c, int options, bool composes) {
    if (c >= 0xD800 && c < 0xE000) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
    if (p->combining_class != 0) return false;
    if (composes &&
        (p->category == UTF8PROC_CATEGORY_MN || p->category == UTF8PROC_CATEGORY_MC ||
         p->category == UTF8PROC_CATEGORY_ME || (c >= 0x1161 && c <= 0x1175) || (c >= 0x11A8 && c <= 0x11C2)))
      return false;
    std::string one;
    utf8::append(c, one);
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                                      static_cast<utf8proc_ssize_t>(one.size()), &out,
                                      static_cast<utf8proc_option_t>(options));
    bool same =
        n == static_cast<utf8proc_ssize_t>(one.size()) && std::memcmp(out, one.data(), one.size()) == 0;
    std::free(out);
    return same;
  }
  std::vector<bool> bmp_, emoji_;
};

void unicode_form(std::string& text, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw Error("tokenizer", std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
}

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    inert_table().normalize(text, [this](std::string& stretch) { unicode_form(stretch, options_); });
  }

 private:
  // One table per form, shared by every tokenizer of the process (built on first use).
  const InertTable& inert_table() const {
    static const InertTable nfc(UTF8PROC_STABLE | UTF8PROC_COMPOSE), nfd(kNfd);
    static const InertTable nfkc(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    static const InertTable nfkd(kNfd | UTF8PROC_COMPAT);
    if (options_ & UTF8PROC_COMPOSE) return options_ & UTF8PROC_COMPAT ? nfkc : nfc;
    return options_ & UTF8PROC_COMPAT ? nfkd : nfd;
  }
  int options_;
};

void lowercase(std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) unicode::append_lowercase(unicode::next(text, i), out);
  text = std::move(out);
}

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { lowercase(text); }
};

// Replace: every non-overlapping match (leftmost first) of a literal or a regex becomes `content`.
class Replace final : public Normalizer {
 public:
  explicit Replace(const nlohmann::json& j) : pattern_(j) {}
  void normalize(std::string& text) const override { text = pattern_.apply(std::move(text)); }

 private:
  ReplacePattern pattern_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      for (size_t i = 0; i < end;) {
        size_t j = i;
        if (!unicode::is_white_space(unicode::next(text, j))) break;
        begin = i = j;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t j = start;
        if (!unicode::is_white_space(unicode::next(text, j))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class BertNormalizer final : public Normalizer {
 public:
  explicit BertNormalizer(const nlohmann::json& j)
      : clean_text_(json_util::get_bool(j, "clean_text", true)),
        chinese_chars_(json_util::get_bool(j, "handle_chinese_chars", true)),
        lowercase_(json_util::get_bool(j, "lowercase", true)) {
    strip_accents_ = json_util::get_bool(j, "strip_accents", lowercase_);  // null follows lowercase
  }
  void normalize(std::string& text) const override {
    if (clean_text_ || chinese_chars_) {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        char32_t c = unicode::next(text, i);
        if (clean_text_) {
          bool control = c != '\t' && c != '\n' && c != '\r' && unicode::is_other(c);
          if (c == 0 || c == 0xFFFD || control) continue;
          if (unicode::is_white_space(c)) c = ' ';
        }
        bool cjk = chinese_chars_ && unicode::is_chinese_char(c);
        if (cjk) out += ' ';
        utf8::append(c, out);
        if (cjk) out += ' ';
      }
      text = std::move(out);
    }
    if (strip_accents_) {
      unicode_form(text, kNfd);
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        size_t start = i;
        if (!unicode::is_mark_nonspacing(unicode::next(text, i))) out.append(text, start, i - start);
      }
      text = std::move(out);
    }
    if (lowercase_) lowercase(text);
  }

 private:
  bool clean_text_, chinese_chars_, lowercase_, strip_accents_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    const size_t input = text.size();
    for (const auto& p : parts_) {
      p->normalize(text);
      json_util::check_growth(input, text.size());
    }
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  json_util::NestingGuard nesting;
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(kNfd);
  if (type == "NFKC")
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(kNfd | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace") return std::make_unique<Replace>(j);
  if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").get<std::string>());
  if (type == "Strip")
    return std::make_unique<Strip>(json_util::get_bool(j, "strip_left", true),
                                   json_util::get_bool(j, "strip_right", true));
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(j);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers")) {
      auto p = make_normalizer(n);
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  throw Error("tokenizer", "unsupported normalizer type '" + type + "'");
}

}  // namespace bunsen::text
