// Character classes via utf8proc categories; the ASCII range is answered without a table lookup because
// it dominates real text. Not normalisation (normalizer.cpp). Invariant: every predicate is pure.
#include "text/unicode.h"

#include <utf8proc.h>

#include "text/utf8.h"

namespace bunsen::text::unicode {
namespace {

utf8proc_category_t category(char32_t c) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

}  // namespace

char32_t next(std::string_view text, size_t& i) {
  auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  size_t n = utf8::valid_sequence_length(text.substr(i));
  if (n == 0) {  // cannot happen on sanitised text; treat the byte as U+FFFD so callers still advance
    ++i;
    return 0xFFFD;
  }
  char32_t c = utf8::decode(text.data() + i, n);
  i += n;
  return c;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return is_ascii_punctuation(c) && c != '$' && c != '+' && c != '<' && c != '=' && c != '>' && c != '^' &&
           c != '`' && c != '|' && c != '~';
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_bert_punctuation(char32_t c) {
  return c < 0x80 ? is_ascii_punctuation(c) : is_punctuation(c);
}

// The unicode_categories tables HF uses list no unassigned code point (they come from UnicodeData.txt,
// which has none), so Cn never counts: HF keeps U+10FFFF through BERT's clean_text (seen in its output).
bool is_other(char32_t c) {
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_CC && cat <= UTF8PROC_CATEGORY_CO;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

bool is_mark_nonspacing(char32_t c) {
  return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_lowercase(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {  // İ: the one unconditional multi-character lowercase mapping (SpecialCasing.txt)
    out += "i\xCC\x87";
    return;
  }
  utf8::append(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), out);
}

}  // namespace bunsen::text::unicode
