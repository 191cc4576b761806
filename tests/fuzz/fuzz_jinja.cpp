// libFuzzer target for the Jinja engine (lexer, parser, evaluator, filters): the input is a template,
// optionally followed by a NUL byte and a JSON object used as the render context (otherwise a small chat
// context). Parsing and rendering must end in a string or bunsen::Error; limits are lowered so every
// input finishes quickly. Any other exception, crash, hang, leak or sanitizer report is a bug.
// Invariant checked: rendering the same template twice gives the same result.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "text/jinja/template.h"

namespace {

const nlohmann::ordered_json& default_context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <think>x</think> \u00e9\ud83d\ude00"},
      {"role": "assistant", "content": "", "reasoning_content": "r",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"ok\": 1}"},
      {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  return ctx;
}

std::string render_once(const bunsen::text::jinja::Template& t, const nlohmann::ordered_json& ctx,
                        const bunsen::text::jinja::Limits& limits) {
  try {
    return "OK:" + t.render_json(ctx, limits);
  } catch (const bunsen::Error& e) {
    return "ERR:" + e.message();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json ctx = default_context();
  if (nul != std::string::npos) {
    auto j = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) ctx = std::move(j);
  }
  bunsen::text::jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  try {
    bunsen::text::jinja::Template t(source);
    const std::string a = render_once(t, ctx, limits);
    if (source.find("strftime_now") == std::string::npos) {
      const std::string b = render_once(t, ctx, limits);
      if (a != b) {
        std::fprintf(stderr, "fuzz_jinja: two renders differ\n");
        std::abort();
      }
    }
  } catch (const bunsen::Error&) {
    // Syntax errors and rejected contexts are expected outcomes.
  }
  return 0;
}
