// Loading real and broken tokenizer files: error messages name the file; facts read from the fixture
// JSON files (special ids, bos/eos, vocab sizes); Llama 3 with the TemplateProcessing post-processor of
// the current meta-llama files adds <|begin_of_text|>; the invalid-UTF-8 input policy; thread safety.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../../support/scratch_dir.h"
#include "core/status.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace bunsen::text {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

using test_support::ScratchDir;

void write_file(const ScratchDir& d, const std::string& name, const std::string& content) {
  std::ofstream(d.file(name), std::ios::binary) << content;
}

std::string load_error(const std::string& dir) {
  try {
    load_tokenizer(dir);
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "tokenizer");
    return e.what();
  }
  ADD_FAILURE() << "no error loading " << dir;
  return {};
}

const std::string kMinimal = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";

TEST(TokenizerLoad, MissingFileNamesIt) {
  ScratchDir d("bunsen_tok");
  std::string msg = load_error(d.path());
  EXPECT_NE(msg.find(d.file("tokenizer.json")), std::string::npos) << msg;
}

TEST(TokenizerLoad, CorruptJsonNamesTheFile) {
  ScratchDir d("bunsen_tok");
  write_file(d, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  std::string msg = load_error(d.path());
  EXPECT_NE(msg.find(d.file("tokenizer.json")), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
}

TEST(TokenizerLoad, UnsupportedPiecesNameFileAndType) {
  ScratchDir d("bunsen_tok");
  write_file(d, "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  std::string msg = load_error(d.path());
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Unigram"), std::string::npos) << msg;
  write_file(d, "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  msg = load_error(d.path());
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
}

TEST(TokenizerLoad, BadConfigNamesTokenizerConfig) {
  ScratchDir d("bunsen_tok");
  write_file(d, "tokenizer.json", kMinimal);
  EXPECT_NO_THROW(load_tokenizer(d.path()));  // tokenizer_config.json is optional
  write_file(d, "tokenizer_config.json", "{oops");
  std::string msg = load_error(d.path());
  EXPECT_NE(msg.find(d.file("tokenizer_config.json")), std::string::npos) << msg;
  write_file(d, "tokenizer_config.json", R"({"eos_token": "</s>"})");
  msg = load_error(d.path());
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("</s>"), std::string::npos) << msg;
}

TEST(TokenizerLoad, Qwen3Facts) {
  const Tokenizer* t = testing::fixture_tokenizer("qwen3");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 151669);
  EXPECT_EQ(t->eos_ids(), (Ids{151645}));  // tokenizer_config: eos_token "<|im_end|>"
  EXPECT_FALSE(t->bos_id().has_value());   // bos_token null
  EXPECT_EQ(t->token_id("<|im_start|>"), 151644);
  EXPECT_TRUE(t->is_special(151644));
  EXPECT_FALSE(t->is_special(151657));  // <tool_call> is an added, non-special token
  EXPECT_FALSE(t->is_special(220));
  EXPECT_EQ(t->token_bytes(220), " ");   // "Ġ"
  EXPECT_EQ(t->token_bytes(198), "\n");  // "Ċ"
  EXPECT_EQ(t->token_bytes(151644), "<|im_start|>");
  EXPECT_EQ(t->encode("hello"), (Ids{14990}));
  EXPECT_EQ(t->encode(" the"), (Ids{279}));
}

TEST(TokenizerLoad, Llama3Facts) {
  const Tokenizer* t = testing::fixture_tokenizer("llama3");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 128256);
  EXPECT_EQ(t->bos_id(), 128000);
  EXPECT_EQ(t->eos_ids(), (Ids{128001}));
  EXPECT_TRUE(t->is_special(128009));  // <|eot_id|>
  EXPECT_EQ(t->encode("hello"), (Ids{15339}));
  // This package's tokenizer.json has a plain ByteLevel post-processor and no add_bos_token, so HF (and
  // the reference corpus) add nothing; see the next test for the current meta-llama files.
  EXPECT_EQ(t->encode("hello", true), (Ids{15339}));
}

TEST(TokenizerLoad, Gemma3Facts) {
  const Tokenizer* t = testing::fixture_tokenizer("gemma3");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 262145);  // 262144 model tokens + <image_soft_token>, added at 262144
  EXPECT_EQ(t->token_id("<image_soft_token>"), 262144);
  EXPECT_EQ(t->bos_id(), 2);            // <bos>
  EXPECT_EQ(t->eos_ids(), (Ids{106}));  // tokenizer_config: eos_token "<end_of_turn>"
  EXPECT_TRUE(t->is_special(105));      // <start_of_turn>
  EXPECT_FALSE(t->is_special(168));     // <table>: added, not special
  EXPECT_EQ(t->encode("hello"), (Ids{23391}));
  EXPECT_EQ(t->encode(" hello"), (Ids{29104}));  // "\u2581hello"
  // The template and add_bos_token both ask for <bos>: it is added once.
  EXPECT_EQ(t->encode("hello", true), (Ids{2, 23391}));
  EXPECT_EQ(t->token_bytes(303), "A");  // <0x41> byte-fallback token
  EXPECT_TRUE(t->holds_back(303));
  EXPECT_FALSE(t->holds_back(23391));
}

TEST(TokenizerLoad, Llama3WithTemplateAddsBeginOfText) {
  std::string dir = testing::lenml_model_dir("llama3");
  ASSERT_TRUE(fs::exists(dir + "/tokenizer.json")) << "run `npm ci` in " << BUNSEN_SOURCE_DIR;
  std::ifstream f(dir + "/tokenizer.json");
  nlohmann::json tok = nlohmann::json::parse(f);
  tok["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}]})");
  auto t = load_tokenizer_from_memory(tok.dump(), "", dir);
  auto lines =
      testing::read_jsonl(std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data/llama3_corpus.jsonl");
  ASSERT_FALSE(lines.empty());
  for (size_t i = 0; i < lines.size(); i += 7) {
    Ids want = {128000};
    for (int32_t id : lines[i]["ids"].get<Ids>()) want.push_back(id);
    EXPECT_EQ(t->encode(lines[i]["text"].get<std::string>(), true), want)
        << testing::escaped(lines[i]["text"]);
  }
}

TEST(TokenizerLoad, InvalidUtf8InputIsReplacedBeforeTokenization) {
  const Tokenizer* t = testing::fixture_tokenizer("qwen3");
  ASSERT_NE(t, nullptr);
  const std::string bad = "caf\xC3 ok \xF0\x9F\x98 end\xFF";
  const std::string clean = utf8::sanitize(bad);
  EXPECT_EQ(clean, "caf\xEF\xBF\xBD ok \xEF\xBF\xBD end\xEF\xBF\xBD");
  EXPECT_EQ(t->encode(bad), t->encode(clean));
  EXPECT_EQ(t->decode(t->encode(bad)), clean);
}

TEST(TokenizerLoad, ConcurrentEncodingGivesTheSameIds) {
  const Tokenizer* t = testing::fixture_tokenizer("qwen3");
  ASSERT_NE(t, nullptr);
  auto lines =
      testing::read_jsonl(std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data/qwen3_corpus.jsonl");
  std::vector<int> mismatches(3, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k)
    threads.emplace_back([&, k] {
      for (size_t i = k; i < lines.size() + k; ++i) {
        const auto& line = lines[i % lines.size()];
        mismatches[k] += t->encode(line["text"].get<std::string>()) != line["ids"].get<Ids>();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0}));
}

TEST(TokenizerLoad, VeryLongWhitespaceAndWords) {
  const Tokenizer* t = testing::fixture_tokenizer("llama3");
  ASSERT_NE(t, nullptr);
  std::string s = std::string(100000, ' ') + "x" + std::string(5000, 'a') + "\n";
  auto ids = t->encode(s);
  EXPECT_GT(ids.size(), 10u);
  EXPECT_EQ(t->decode(ids), s);
}

}  // namespace
}  // namespace bunsen::text
