// Character classes and case mapping the tokenizer components need, with the definitions Hugging Face
// tokenizers uses (Rust's char methods and the unicode_categories crate): White_Space, punctuation (P*),
// "other" (C*), numeric (N*), nonspacing marks, BERT's CJK ranges, per-character lowercase. Not a Unicode
// database of our own: categories and simple case mappings come from utf8proc.
// Invariant: functions taking text require valid UTF-8 (the tokenizer sanitises its input first).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace bunsen::text::unicode {

// Decodes the code point at text[i] and advances i past it (text must be valid UTF-8 at i).
char32_t next(std::string_view text, size_t& i);

bool is_white_space(char32_t c);       // Unicode White_Space (Rust char::is_whitespace)
bool is_punctuation(char32_t c);       // general category P*
bool is_bert_punctuation(char32_t c);  // ASCII punctuation or P* (BERT pre-tokenizer / Punctuation)
bool is_other(char32_t c);             // Cc, Cf, Cs, Co (not Cn: see unicode.cpp)
bool is_numeric(char32_t c);           // N* (Rust char::is_numeric)
bool is_mark_nonspacing(char32_t c);   // Mn
bool is_chinese_char(char32_t c);      // BERT's CJK ideograph ranges
// Appends the lowercase of c as Rust's char::to_lowercase gives it (U+0130 maps to two characters).
void append_lowercase(char32_t c, std::string& out);

}  // namespace bunsen::text::unicode
