// text::ChatTemplate: a model's chat template rendered exactly as Hugging Face transformers'
// apply_chat_template(tokenize=False) renders it. The template comes from DIR/chat_template.jinja when
// present (it wins, as in HF), else tokenizer_config.json's `chat_template` (a string, or a list of
// {name, template}: "tool_use" when tools are given and it exists, else "default"). The render context is
// HF's: the special tokens of tokenizer_config (bos_token, eos_token, ..., extra_special_tokens and
// additional_special_tokens; each a string or {content}),
// overridden by the caller's kwargs (enable_thinking, any chat_template_kwargs), then messages, tools
// (None when absent), documents (None) and add_generation_prompt.
// Not tokenization. Invariants: render() is const and thread-safe; failures are Error("template", ...)
// (raise_exception's message verbatim), loading failures name the file.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/template.h"

namespace bunsen::text {

class ChatTemplate {
 public:
  // Throws Error("template", ...) when the directory has no chat template.
  static ChatTemplate load(const std::string& dir);
  // True when DIR has chat_template.jinja or a tokenizer_config.json with a chat_template.
  static bool available(const std::string& dir);
  // From file contents: tokenizer_config.json text (may be empty) and chat_template.jinja text (if any).
  static ChatTemplate from_files(std::string_view tokenizer_config_json, const std::optional<std::string>& jinja_file,
                                 const std::string& origin);
  // One template source with explicit special tokens ({"bos_token": "<s>", ...}).
  ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens);

  // messages: JSON array of message objects; tools: JSON array or null; kwargs: JSON object or null.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& kwargs = nullptr,
                     const jinja::Limits& limits = {}) const;

  const std::string& source() const;  // the template used without tools
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate() = default;
  struct Named {
    std::string name;
    std::string source;
    std::shared_ptr<const jinja::Template> tpl;
  };
  const Named& pick(bool has_tools) const;

  std::vector<Named> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace bunsen::text
