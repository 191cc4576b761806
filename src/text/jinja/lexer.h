// Jinja2 lexer with the settings Hugging Face uses (trim_blocks, lstrip_blocks, default delimiters, no
// line statements, keep_trailing_newline=False): template text becomes data/tag tokens exactly as jinja2's
// tokeniter() splits it, including `-`/`+` whitespace control, raw blocks, newline normalisation and
// string-literal escapes (backslashreplace + unicode-escape, like jinja2). Not the parser.
// Invariant: work is linear in the source size; malformed input throws Error("template", ...).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text::jinja {

enum class Tok : uint8_t { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // data, name, operator or decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace bunsen::text::jinja
