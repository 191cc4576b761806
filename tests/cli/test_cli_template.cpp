// Black-box tests of `bunsen template`: renders of the real Qwen3/Gemma 3 templates equal to the
// transformers goldens (tests/unit/text/data/templates/*.jsonl), flags (--tools, --enable-thinking,
// --no-generation-prompt, --kwargs), the --jsonl protocol (one JSON string or {"error"} per line), the
// built-in demo model's template, and one-line errors with exit codes 1 (bad input) and 2 (usage).
#include <gtest/gtest.h>

#include "cli_test_util.h"


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace bunsen {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

using cli_test::Proc;

std::string tmp_dir() { return cli_test::scratch_dir(); }
std::string write_tmp(const std::string& name, const std::string& text) { return cli_test::write_scratch(name, text); }
std::string model_dir(const std::string& name) { return cli_test::tokenizer_dir(name); }

Proc run(const std::string& args, const std::string& stdin_text = "") {
  return cli_test::run_bunsen(args, stdin_text, "BUNSEN_CACHE=" + tmp_dir() + "/cache");
}

// Golden rows (transformers' renders) of one model, header skipped.
std::vector<ojson> golden(const std::string& name) {
  std::vector<ojson> rows;
  std::ifstream f(std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data/templates/" + name + ".jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty() && line.rfind("{\"header\"", 0) != 0) rows.push_back(ojson::parse(line));
  EXPECT_FALSE(rows.empty()) << "missing golden for " << name;
  return rows;
}

// The first golden row matching `pred` that rendered (no error).
ojson find_row(const std::string& name, bool (*pred)(const ojson&)) {
  for (const auto& r : golden(name))
    if (r.contains("expected") && pred(r)) return r;
  ADD_FAILURE() << "no golden row of " << name << " fits";
  return ojson::object();
}

std::string args_for(const ojson& row, const std::string& model) {
  std::string a = "template --model " + model + " --messages " + write_tmp("messages.json", row["messages"].dump());
  if (!row["tools"].is_null()) a += " --tools " + write_tmp("tools.json", row["tools"].dump());
  if (!row["add_generation_prompt"].get<bool>()) a += " --no-generation-prompt";
  const ojson& kw = row["kwargs"];
  if (kw.contains("enable_thinking")) a += std::string(" --enable-thinking ") + (kw["enable_thinking"].get<bool>() ? "true" : "false");
  ojson rest = kw;
  rest.erase("enable_thinking");
  if (!rest.empty()) a += " --kwargs '" + rest.dump() + "'";
  return a;
}

TEST(CliTemplate, Qwen3WithToolsAndThinkingOffEqualsTransformers) {
  ojson row = find_row("qwen3", [](const ojson& r) {
    return !r["tools"].is_null() && !r["tools"].empty() && r["kwargs"].value("enable_thinking", true) == false &&
           r["add_generation_prompt"].get<bool>();
  });
  Proc p = run(args_for(row, model_dir("qwen3")));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, row["expected"].get<std::string>());
  EXPECT_NE(p.out.find("<tools>"), std::string::npos);
  EXPECT_EQ(p.out.substr(p.out.size() - 19), "<think>\n\n</think>\n\n");
}

TEST(CliTemplate, NoGenerationPromptAndKwargsEqualTransformers) {
  ojson row = find_row("qwen3", [](const ojson& r) { return !r["add_generation_prompt"].get<bool>(); });
  Proc p = run(args_for(row, model_dir("qwen3")));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, row["expected"].get<std::string>());
  ojson g = find_row("gemma3", [](const ojson& r) { return r["kwargs"].contains("custom_flag"); });
  p = run(args_for(g, model_dir("gemma3")));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, g["expected"].get<std::string>());
}

TEST(CliTemplate, DemoModelUsesTheQwen3Template) {
  ojson row = find_row("qwen3", [](const ojson& r) { return r["tools"].is_null() && r["kwargs"].empty(); });
  std::string a = args_for(row, "X");
  a.replace(a.find("--model X "), 10, "");
  Proc p = run(a);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, row["expected"].get<std::string>());
}

TEST(CliTemplate, JsonlWritesOneResultPerLine) {
  const auto rows = golden("gemma3");
  std::string input;
  std::vector<const ojson*> used;
  for (const auto& r : rows) {
    if (used.size() == 4) break;
    ojson req = {{"messages", r["messages"]}, {"add_generation_prompt", r["add_generation_prompt"]}, {"kwargs", r["kwargs"]}};
    input += req.dump() + "\n";
    used.push_back(&r);
  }
  input += "not json\n\n{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n";
  Proc p = run("template --jsonl --model " + model_dir("gemma3"), input);
  ASSERT_EQ(p.code, 0) << p.err;
  std::vector<ojson> out;
  std::istringstream ss(p.out);
  std::string line;
  while (std::getline(ss, line)) out.push_back(ojson::parse(line));
  ASSERT_EQ(out.size(), used.size() + 2);
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i]->contains("error")) EXPECT_TRUE(out[i].is_object() && out[i].contains("error")) << out[i].dump();
    else EXPECT_EQ(out[i], (*used[i])["expected"]);
  }
  EXPECT_TRUE(out[used.size()].contains("error"));
  // Gemma 3 requires user/assistant alternation: raise_exception's message comes back verbatim.
  EXPECT_EQ(out[used.size() + 1]["error"], "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(CliTemplate, ErrorsAreOneLineWithExitCodes) {
  Proc p = run("template --model " + model_dir("qwen3"));
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("--messages"), std::string::npos) << p.err;
  p = run("template --model " + tmp_dir() + "/nowhere --messages " + write_tmp("m.json", "[]"));
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("no chat template"), std::string::npos) << p.err;
  p = run("template --model " + model_dir("qwen3") + " --messages " + write_tmp("bad.json", "[{"));
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
  p = run("template --model " + model_dir("gemma3") + " --messages " +
          write_tmp("alt.json", R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"));
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("Conversation roles must alternate"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace bunsen
