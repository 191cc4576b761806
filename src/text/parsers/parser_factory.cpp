// make_parser: the per-family markup (which blocks, which markers, which body formats). Sources, read for
// facts only: Qwen3 chat template + vLLM hermes/qwen3 reasoning parsers; Qwen3-Coder chat template + vLLM
// qwen3coder parser; Mistral tokenizer v3 / v11+ formats (vLLM mistral parser; [THINK] from Magistral);
// Gemma 4: vLLM gemma4 parser/reasoning parser (ported from transformers utils_gemma4); MiniCPM5 chat
// template as quoted by llama.cpp / SGLang / OpenVINO minicpm5 parsers. Not the engine (markup_parser).
// Invariant: every family's markers are literal strings; ordering of blocks does not matter.
#include "core/status.h"
#include "text/parsers/gemma4_args.h"
#include "text/parsers/llama3_parser.h"
#include "text/parsers/markup_parser.h"
#include "text/parsers/tool_formats.h"

namespace bunsen::text {
namespace {

using parsers::BlockKind;
using parsers::BlockSpec;

BlockSpec reasoning(std::string open, std::string close, std::string label = {}) {
  BlockSpec b;
  b.kind = BlockKind::kReasoning;
  b.open = std::move(open);
  b.close = std::move(close);
  b.label = std::move(label);
  return b;
}

BlockSpec tool(std::string open, parsers::EndFinder end, parsers::BodyParser parse) {
  BlockSpec b;
  b.kind = BlockKind::kToolCall;
  b.open = std::move(open);
  b.find_end = std::move(end);
  b.parse = std::move(parse);
  return b;
}

BlockSpec drop(std::string marker) {
  BlockSpec b;
  b.kind = BlockKind::kDrop;
  b.open = std::move(marker);
  return b;
}

// Reasoning and tool blocks of one family; parse_reasoning / parse_tool_calls filter them in make_parser.
std::vector<BlockSpec> family_blocks(std::string_view family, const ParserOptions& o) {
  auto schemas = std::make_shared<const parsers::ToolSchemas>(o.tools);
  using namespace parsers;
  if (family == "qwen3" || family == "hermes") {
    // <think>\n...\n</think>\n\n then content; <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>
    return {reasoning("<think>", "</think>"),
            tool("<tool_call>", close_outside_regions("</tool_call>", "\"", "\"", true), hermes_json_body())};
  }
  if (family == "qwen3_coder") {
    // <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>; models
    // sometimes drop the <tool_call> wrapper, so a bare <function=...</function> is accepted too.
    return {reasoning("<think>", "</think>"),
            tool("<tool_call>", close_outside_regions("</tool_call>", "<parameter=", "</parameter>", false),
                 qwen_xml_body(schemas, "", "")),
            tool("<function=", close_outside_regions("</function>", "<parameter=", "</parameter>", false),
                 qwen_xml_body(schemas, "<function=", "</function>"))};
  }
  if (family == "mistral") {
    // [TOOL_CALLS][{"name":..,"arguments":{..}}, ...] (v3) or [TOOL_CALLS]NAME[ARGS]{..} (v11+), one
    // [TOOL_CALLS] per call; Magistral reasons in [THINK]...[/THINK].
    return {reasoning("[THINK]", "[/THINK]"), tool("[TOOL_CALLS]", mistral_end(), mistral_body())};
  }
  if (family == "gemma4") {
    // <|channel>thought\n...<channel|> reasoning; <|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|>;
    // a tool call may end the thought channel implicitly. The turn-end / tool-response sentinels the
    // model emits around calls (<turn|>, <eos>, <|tool_response>) and a stray <channel|> are dropped.
    BlockSpec call = tool("<|tool_call>", close_outside_regions("<tool_call|>", std::string(kGemmaQuote),
                                                                std::string(kGemmaQuote), false),
                          gemma4_body());
    call.ends_reasoning = true;
    return {reasoning("<|channel>", "<channel|>", "thought"), std::move(call), drop("<turn|>"), drop("<eos>"),
            drop("<|tool_response>"), drop("<channel|>")};
  }
  if (family == "minicpm") {
    // MiniCPM5: <function name="NAME"><param name="P">VALUE</param>...</function>, values CDATA-wrapped
    // when they contain <, & or newlines; a JSON object body is accepted too. Reasoning in <think>.
    // <tool_sep> (the template's placeholder for where calls sit in content) is dropped.
    return {reasoning("<think>", "</think>"),
            tool("<function name=\"", close_outside_regions("</function>", "<![CDATA[", "]]>", false),
                 minicpm_body(schemas)),
            drop("<tool_sep>")};
  }
  if (family == "none") return {};
  std::string known;
  for (const std::string& f : parser_families()) known += (known.empty() ? "" : ", ") + f;
  throw Error("parser", strfmt("unknown parser family '%.*s' (known: %s)", static_cast<int>(family.size()),
                               family.data(), known.c_str()));
}

}  // namespace

std::vector<std::string> parser_families() {
  return {"qwen3", "hermes", "qwen3_coder", "llama3", "mistral", "gemma4", "minicpm", "none"};
}

std::unique_ptr<OutputParser> make_parser(std::string_view family, const ParserOptions& options) {
  if (family == "llama3") return std::make_unique<parsers::Llama3Parser>(options);
  parsers::MarkupSpec spec;
  for (BlockSpec& b : family_blocks(family, options)) {
    if (b.kind == BlockKind::kReasoning && !options.parse_reasoning) continue;
    if (b.kind == BlockKind::kToolCall && !options.parse_tool_calls) continue;
    spec.blocks.push_back(std::move(b));
  }
  return std::make_unique<parsers::MarkupParser>(std::move(spec), options);
}

}  // namespace bunsen::text
