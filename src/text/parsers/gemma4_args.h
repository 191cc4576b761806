// Gemma 4 tool-call payloads: `call:NAME{key:value,...}` between <|tool_call> and <tool_call|>.
// Values: <|"|>text<|"|> (strings, no escapes), {..} objects with bare (or <|"|>-quoted) keys, [..]
// arrays, and bare tokens true / false / null / JSON numbers (any other bare token is kept as a string).
// Source of the format: vLLM's gemma4_tool_parser.py and gemma4_utils.py (ported from transformers'
// models/gemma4/utils_gemma4.py), read for facts only. Not a streaming parser.
// Invariant: nesting is bounded (kMaxDepth); anything off-grammar returns nullopt.
#pragma once
#include <optional>
#include <string_view>

#include "text/parsers/markup_parser.h"
#include "text/parsers/tool_schema.h"

namespace bunsen::text::parsers {

inline constexpr std::string_view kGemmaQuote = "<|\"|>";

// One Gemma 4 value (the whole string, surrounding whitespace allowed) as JSON.
std::optional<OrderedJson> parse_gemma4_value(std::string_view s);

// `call:NAME{...}` -> name + JSON arguments.
std::optional<ToolDraft> parse_gemma4_call(std::string_view payload);

BodyParser gemma4_body();

}  // namespace bunsen::text::parsers
