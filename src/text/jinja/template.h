// jinja::Template: the public face of bunsen's Jinja2 interpreter. Parses once (lexer -> parser ->
// checks), renders many times against a context of Values, with the semantics of Python jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]) plus
// HF's tojson / raise_exception / strftime_now, i.e. transformers' apply_chat_template environment.
// Not chat-specific (chat_template.h builds the HF context). Invariants: render() is const and
// thread-safe; any failure (syntax, runtime, limits) is Error("template", ...), never a crash or hang.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace bunsen::text::jinja {

class Template {
 public:
  explicit Template(std::string_view source);
  std::string render(const Dict& context, const Limits& limits = {}) const;
  // context: a JSON object whose keys become template variables (key order kept).
  std::string render_json(const nlohmann::ordered_json& context, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace bunsen::text::jinja
