// UTF-8 helpers for the text module: the one lossy-decoding rule used everywhere (decode, streaming
// decode and sanitising input): every maximal invalid subpart (Unicode 3.9, "substitution of maximal
// subparts", as Rust's from_utf8_lossy and the WHATWG decoder) becomes one U+FFFD. Not a Unicode database:
// character properties come from PCRE2/utf8proc. Invariant: append_lossy(s, final=true) of valid s == s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bunsen::text::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[0] (1..4), or 0 if s does not start with one.
size_t valid_sequence_length(std::string_view s);
bool is_valid(std::string_view s);

// Appends `in` to `out` replacing each maximal invalid subpart with U+FFFD. When `final` is false, an
// incomplete but so-far valid sequence at the very end is not consumed. Returns the bytes consumed.
size_t append_lossy(std::string_view in, std::string& out, bool final);

// `s` with invalid subparts replaced (a copy only when needed is up to the caller: check is_valid first).
std::string sanitize(std::string_view s);

// Decodes the code point of a well-formed sequence of length `len` at p.
char32_t decode(const char* p, size_t len);
void append(char32_t cp, std::string& out);

}  // namespace bunsen::text::utf8
