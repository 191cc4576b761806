// Black-box tests of `bunsen tokenize` / `bunsen detokenize` on the real binary: ids equal the reference
// corpora (made by @lenml/tokenizers and cross-checked with HF tokenizers), --special, --jsonl, the
// default "id<TAB>text" listing, detokenize with and without --skip-special, a directory that holds only
// tokenizer files, --bench JSON, and one-line errors with the right exit codes.
#include <gtest/gtest.h>

#include "cli_test_util.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace bunsen {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

using cli_test::Proc;

std::string scratch() { return cli_test::scratch_dir(); }
Proc run(const std::string& args, const std::string& stdin_text = {}) { return cli_test::run_bunsen(args, stdin_text); }
std::string model_dir(const std::string& name) { return cli_test::tokenizer_dir(name); }

// Single-quoted for the shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<json> corpus(const std::string& name, size_t n) {
  std::ifstream f(std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data/" + name + "_corpus.jsonl");
  std::vector<json> out;
  std::string line;
  while (out.size() < n && std::getline(f, line)) {
    json j = json::parse(line);
    if (!j.contains("bytes_hex")) out.push_back(std::move(j));
  }
  EXPECT_EQ(out.size(), n) << "corpus " << name;
  return out;
}

TEST(CliTokenize, IdsEqualTheReferenceCorpus) {
  // A few lines per tokenizer through argv (each run loads the tokenizer; JsonlMapsEachLine does bulk).
  for (auto [name, n] : {std::pair<std::string, size_t>{"qwen3", 8}, {"gemma3", 3}}) {
    for (const json& line : corpus(name, n)) {
      std::string text = line["text"];
      if (text.empty() || text.find('\0') != std::string::npos) continue;
      Proc r = run("tokenize --model " + model_dir(name) + " --ids -- " + shell_quote(text));
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(json::parse(r.out).get<Ids>(), line["ids"].get<Ids>()) << name << ": " << text;
    }
  }
}

TEST(CliTokenize, SpecialAddsTheTemplateTokens) {
  json line = corpus("gemma3", 1)[0];
  Proc r = run("tokenize --model " + model_dir("gemma3") + " --ids --special " + shell_quote(line["text"]));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get<Ids>(), line["ids_special"].get<Ids>());
}

TEST(CliTokenize, JsonlMapsEachLine) {
  std::vector<json> lines = corpus("llama3", 200);
  std::string in;
  for (const json& l : lines) in += l["text"].dump() + "\n";
  Proc r = run("tokenize --model " + model_dir("llama3") + " --jsonl", in);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream out(r.out);
  std::string got;
  size_t i = 0;
  for (; std::getline(out, got); ++i) {
    ASSERT_LT(i, lines.size());
    EXPECT_EQ(json::parse(got).get<Ids>(), lines[i]["ids"].get<Ids>()) << lines[i]["text"];
  }
  EXPECT_EQ(i, lines.size());
  Proc bad = run("tokenize --model " + model_dir("llama3") + " --jsonl", "\"ok\"\n{\"not\": \"a string\"}\n");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
}

TEST(CliTokenize, DefaultListsIdsWithTheirText) {
  Proc r = run("tokenize --model " + model_dir("qwen3") + " 'hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "14990\t\"hello\"\n1879\t\" world\"\n");
}

TEST(CliTokenize, DetokenizeEqualsTheReferenceText) {
  for (const json& line : corpus("qwen3", 8)) {
    Ids ids = line["ids"];
    if (ids.empty()) continue;
    std::string csv;
    for (int32_t id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
    Proc r = run("detokenize --model " + model_dir("qwen3") + " " + csv);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, line.contains("decoded") ? line["decoded"] : line["text"]);
  }
  // <|im_start|> is special: dropped with --skip-special.
  EXPECT_EQ(run("detokenize --model " + model_dir("qwen3") + " 151644,14990").out, "<|im_start|>hello");
  EXPECT_EQ(run("detokenize --model " + model_dir("qwen3") + " --skip-special 151644,14990").out, "hello");
}

TEST(CliTokenize, DirectoryWithOnlyTokenizerFiles) {
  fs::path dir = fs::path(scratch()) / "tok_only";
  fs::create_directories(dir);
  fs::copy_file(model_dir("llama3") + "/tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  Proc r = run("tokenize --model " + dir.string() + " --ids hello");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get<Ids>(), (Ids{15339}));
}

TEST(CliTokenize, BenchPrintsThroughputJson) {
  std::string file = scratch() + "/bench.txt";
  std::ofstream(file) << "first line of text\nsecond line, with 123 digits\n\nthird 你好\n";
  Proc r = run("tokenize --model " + model_dir("qwen3") + " --bench " + file + " --repeat 2");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["lines"]["strings"], 3);
  EXPECT_EQ(j["document"]["strings"], 1);
  EXPECT_GT(j["document"]["tokens"].get<int>(), 10);
  EXPECT_GT(j["lines"]["mb_per_s"].get<double>(), 0.0);
}

TEST(CliTokenize, ErrorsAreOneLineWithExitCodes) {
  Proc r = run("tokenize --ids hello");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = run("tokenize --model /nonexistent/dir hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/dir/tokenizer.json"), std::string::npos) << r.err;
  r = run("detokenize --model " + model_dir("qwen3") + " 1,x,3");
  EXPECT_EQ(r.code, 2);
  r = run("detokenize --model " + model_dir("qwen3") + " 99999999");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  for (const Proc& p : {run("tokenize --model /nonexistent/dir hello"), run("tokenize --ids hello")})
    EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
}

}  // namespace
}  // namespace bunsen
