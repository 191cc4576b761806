// Python `str` semantics over UTF-8 bytes, as jinja2 templates observe them: code-point indexing and
// length, Python's whitespace/line-break sets, strip/split/splitlines/replace/title/capitalize, repr()
// quoting, float repr (shortest round-trip, Python's fixed/exponent switch) and int/float parsing.
// Not a Unicode library: categories and case mappings come from utf8proc (simple mappings plus Python's
// special cases for ß/İ/ligatures that real text hits). Invariant: bytes that are not valid UTF-8 are read
// as U+FFFD one byte at a time and never crash; valid input round-trips unchanged.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text::jinja::py {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
size_t length(std::string_view s);  // code points

bool is_space(char32_t c);      // str.isspace()
bool is_linebreak(char32_t c);  // str.splitlines() boundaries
bool is_alnum(char32_t c);      // str.isalnum(); with '_' this is re's \w
bool is_printable(char32_t c);  // str.isprintable()

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // str.title()
std::string swapcase(std::string_view s);
bool is_lower(std::string_view s);  // str.islower()
bool is_upper(std::string_view s);  // str.isupper()

// strip family; chars == nullopt means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit): sep == nullopt splits on whitespace runs. Throws on an empty sep.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
int64_t find(std::string_view s, std::string_view sub, bool reverse);  // code-point index or -1

// Python code-point slicing s[start:stop:step] with Python's clamping (nullopt = omitted).
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);

std::string repr(std::string_view s);      // repr(str): quotes and escapes like CPython
std::string float_repr(double d);          // repr(float)
std::string html_escape(std::string_view s);  // markupsafe.escape

// int(s, base) / float(s) as Python parses strings; nullopt where Python raises ValueError.
std::optional<int64_t> parse_int(std::string_view s, int base);
std::optional<double> parse_float(std::string_view s);

}  // namespace bunsen::text::jinja::py
