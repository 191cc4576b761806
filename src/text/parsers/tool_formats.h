// Tool-call body formats shared by the family specs: end finders (where a body stops, ignoring closing
// markup inside strings / values) and body parsers (payload -> name + JSON arguments).
// Not the streaming engine (markup_parser.h) and not Gemma 4's argument syntax (gemma4_args.h).
// Invariant: parsers are strict: anything outside the format makes them return nullopt (-> content).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "text/parsers/markup_parser.h"
#include "text/parsers/tool_schema.h"

namespace bunsen::text::parsers {

// Finds `close` outside regions that run from `region_open` to `region_close` (JSON strings: '"'..'"'
// with backslash escapes; XML values; CDATA; Gemma's <|"|> strings).
EndFinder close_outside_regions(std::string close, std::string region_open, std::string region_close,
                                bool backslash_escape);

// Mistral bodies have no closing marker: `[{...}, ...]` or `name[ARGS]{...}` ends with its JSON value.
EndFinder mistral_end();

// {"name": ..., "arguments"|"parameters": {...} or a JSON string of an object}, as an ordered object.
std::optional<ToolDraft> call_from_object(const OrderedJson& j);

// Hermes / Qwen3: <tool_call>{"name":..,"arguments":{..}}</tool_call>.
BodyParser hermes_json_body();

// Qwen3-Coder: <function=NAME><parameter=P>\nVALUE\n</parameter>...</function>, one or more functions.
// `prefix`/`suffix` are re-attached around the payload (for a bare <function=...</function> block).
BodyParser qwen_xml_body(std::shared_ptr<const ToolSchemas> schemas, std::string prefix, std::string suffix);

// MiniCPM: payload after `<function name="`: NAME"><param name="P">VALUE</param>... or NAME">{json}.
BodyParser minicpm_body(std::shared_ptr<const ToolSchemas> schemas);

// Mistral: [{"name":..,"arguments":{..}}, ...] or NAME[ARGS]{...} (optionally NAME[CALL_ID]ID[ARGS]{...}).
BodyParser mistral_body();

}  // namespace bunsen::text::parsers
