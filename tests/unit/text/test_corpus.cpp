// Exactness against the reference corpora: Qwen3/Llama 3/Gemma 3 from scripts/text/make_token_corpus.mjs
// (@lenml/tokenizers; cross-checked against HF tokenizers 0.23.2 by scripts/text/make_hf_tokenizers.py,
// which found no difference and added HF's skip-special decodes), WordPiece/Unigram made by HF itself. Every
// line must encode to exactly the recorded ids (with and without special tokens; lines with bytes_hex encode
// those raw, invalid UTF-8 bytes), decode back to the recorded text (and the recorded skip-special decode
// where present), and stream-decode one id at a time to the same text.
#include <cstdlib>

#include "text/utf8.h"
#include "text_test_util.h"

namespace bunsen::text {
namespace {

using testing::escaped;
using testing::ids_str;

constexpr int kMaxReported = 10;

class CorpusTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tok_ = testing::fixture_tokenizer(GetParam());
    ASSERT_NE(tok_, nullptr);
    // BUNSEN_TOKEN_CORPUS_DIR points at a stress corpus (make_token_corpus.mjs --stress N --out DIR).
    const char* dir = std::getenv("BUNSEN_TOKEN_CORPUS_DIR");
    std::string data = dir ? dir : std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data";
    lines_ = testing::read_jsonl(data + "/" + GetParam() + "_corpus.jsonl");
    ASSERT_GE(lines_.size(), 2000u)
        << "corpus too small: regenerate with node scripts/text/make_token_corpus.mjs";
  }
  const Tokenizer* tok_ = nullptr;
  std::vector<nlohmann::json> lines_;
};

std::string expected_text(const nlohmann::json& line) {
  return line.contains("decoded") ? line["decoded"].get<std::string>() : line["text"].get<std::string>();
}

// What the line's input was: raw bytes where recorded (invalid UTF-8), else the text.
std::string input_of(const nlohmann::json& line) {
  return line.contains("bytes_hex") ? testing::from_hex(line["bytes_hex"]) : line["text"].get<std::string>();
}

TEST_P(CorpusTest, EncodesExactly) {
  int bad = 0;
  for (const auto& line : lines_) {
    std::string text = input_of(line);
    auto want = line["ids"].get<std::vector<int32_t>>();
    auto got = tok_->encode(text, false);
    if (got != want && ++bad <= kMaxReported)
      ADD_FAILURE() << "text " << escaped(text) << "\n  want " << ids_str(want) << "\n  got  "
                    << ids_str(got);
  }
  EXPECT_EQ(bad, 0) << bad << " of " << lines_.size() << " lines differ";
}

TEST_P(CorpusTest, EncodesExactlyWithSpecialTokens) {
  int bad = 0;
  for (const auto& line : lines_) {
    std::string text = input_of(line);
    auto want = line["ids_special"].get<std::vector<int32_t>>();
    auto got = tok_->encode(text, true);
    if (got != want && ++bad <= kMaxReported)
      ADD_FAILURE() << "text " << escaped(text) << "\n  want " << ids_str(want) << "\n  got  "
                    << ids_str(got);
  }
  EXPECT_EQ(bad, 0) << bad << " of " << lines_.size() << " lines differ";
}

TEST_P(CorpusTest, DecodesBackToText) {
  int bad = 0;
  for (const auto& line : lines_) {
    auto ids = line["ids"].get<std::vector<int32_t>>();
    std::string want = expected_text(line);
    std::string got = tok_->decode(ids, false);
    if (got != want && ++bad <= kMaxReported)
      ADD_FAILURE() << "ids " << ids_str(ids) << "\n  want " << escaped(want) << "\n  got  " << escaped(got);
  }
  EXPECT_EQ(bad, 0);
}

// "decoded_skip" (HF's decode(ids_special, skip_special_tokens=True)) is recorded where it differs from the
// line's plain decode.
TEST_P(CorpusTest, DecodesWithSkipSpecialAsRecorded) {
  int bad = 0;
  for (const auto& line : lines_) {
    auto ids = line["ids_special"].get<std::vector<int32_t>>();
    std::string want =
        line.contains("decoded_skip") ? line["decoded_skip"].get<std::string>() : expected_text(line);
    std::string got = tok_->decode(ids, true);
    if (got != want && ++bad <= kMaxReported)
      ADD_FAILURE() << "ids " << ids_str(ids) << "\n  want " << escaped(want) << "\n  got  " << escaped(got);
  }
  EXPECT_EQ(bad, 0) << bad << " of " << lines_.size() << " lines differ";
}

TEST_P(CorpusTest, SkipSpecialDropsExactlyTheSpecialTokens) {
  int with_special = 0;
  for (const auto& line : lines_) {
    auto ids = line["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> kept;
    for (int32_t id : ids)
      if (!tok_->is_special(id)) kept.push_back(id);
    with_special += kept.size() != ids.size();
    EXPECT_EQ(tok_->decode(ids, true), tok_->decode(kept, false)) << escaped(line["text"]);
  }
  EXPECT_GT(with_special, 20) << "corpus should contain special tokens inside text";
}

TEST_P(CorpusTest, StreamDecoderMatchesDecode) {
  for (bool skip : {false, true}) {
    int bad = 0;
    for (const auto& line : lines_) {
      auto ids = line["ids"].get<std::vector<int32_t>>();
      StreamDecoder sd(*tok_, skip);
      std::string streamed;
      for (int32_t id : ids) {
        std::string piece = sd.push(id);
        EXPECT_TRUE(utf8::is_valid(piece)) << "partial UTF-8 emitted for " << escaped(line["text"]);
        streamed += piece;
      }
      streamed += sd.flush();
      std::string want = tok_->decode(ids, skip);
      if (streamed != want && ++bad <= kMaxReported)
        ADD_FAILURE() << "skip=" << skip << " ids " << ids_str(ids) << "\n  want " << escaped(want)
                      << "\n  got  " << escaped(streamed);
    }
    EXPECT_EQ(bad, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, CorpusTest,
                         ::testing::Values("qwen3", "llama3", "gemma3", "hf_wordpiece", "hf_unigram"));

}  // namespace
}  // namespace bunsen::text
