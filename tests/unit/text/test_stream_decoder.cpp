// StreamDecoder on every decoder family (byte-level Qwen3/Llama 3, Gemma 3's Replace+ByteFallback+Fuse,
// HF-trained WordPiece and Unigram/Metaspace): for random id sequences (real tokens, byte-fallback runs,
// special tokens, seeded) the concatenated pieces equal decode() of all ids and every piece is valid
// UTF-8; plus the hand-checked cases that motivated the window design (a byte-fallback run completed late,
// Metaspace's first-token rule, a skipped special token between words).
#include <gtest/gtest.h>

#include <random>

#include "text/utf8.h"
#include "text_test_util.h"

namespace bunsen::text {
namespace {

using Ids = std::vector<int32_t>;

std::string stream(const Tokenizer& tok, const Ids& ids, bool skip, bool* all_valid = nullptr) {
  StreamDecoder sd(tok, skip);
  std::string out;
  bool valid = true;
  for (int32_t id : ids) {
    std::string piece = sd.push(id);
    valid = valid && utf8::is_valid(piece);
    out += piece;
  }
  std::string rest = sd.flush();
  valid = valid && utf8::is_valid(rest);
  if (all_valid) *all_valid = valid;
  return out + rest;
}

// Ids a model could plausibly emit: ids of corpus lines (real token sequences), single random ids, runs
// of byte-fallback tokens and special tokens, mixed.
Ids random_ids(const Tokenizer& tok, const std::vector<nlohmann::json>& lines, std::mt19937& rng) {
  Ids out;
  std::uniform_int_distribution<int> kind(0, 5), len(1, 12);
  std::uniform_int_distribution<int64_t> any(0, tok.vocab_size() - 1);
  const int parts = len(rng);
  for (int p = 0; p < parts; ++p) {
    switch (kind(rng)) {
      case 0:
      case 1: {  // a slice of a real encoding
        auto ids = lines[std::uniform_int_distribution<size_t>(0, lines.size() - 1)(rng)]["ids"].get<Ids>();
        if (ids.empty()) break;
        size_t b = std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng);
        size_t e = std::min(ids.size(), b + static_cast<size_t>(len(rng)));
        out.insert(out.end(), ids.begin() + static_cast<ptrdiff_t>(b),
                   ids.begin() + static_cast<ptrdiff_t>(e));
        break;
      }
      case 2:
        out.push_back(static_cast<int32_t>(any(rng)));
        break;
      case 3:  // a run of byte tokens (byte-fallback vocabularies) or of random ids
        for (int i = 0, n = len(rng); i < n; ++i) {
          char name[8];
          std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(rng() & 0xFF));
          auto id = tok.token_id(name);
          out.push_back(id ? *id : static_cast<int32_t>(any(rng)));
        }
        break;
      default: {  // a special token, if any
        for (int32_t id = 0; id < 300 && id < tok.vocab_size(); ++id)
          if (tok.is_special(id) && rng() % 8 == 0) {
            out.push_back(id);
            break;
          }
        for (int32_t id = static_cast<int32_t>(tok.vocab_size()) - 300; id < tok.vocab_size(); ++id)
          if (id >= 0 && tok.is_special(id) && rng() % 16 == 0) {
            out.push_back(id);
            break;
          }
      }
    }
  }
  return out;
}

class StreamDecoderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamDecoderTest, RandomIdSequencesStreamToTheFullDecode) {
  const Tokenizer* tok = testing::fixture_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  auto lines = testing::read_jsonl(testing::data_dir() + "/" + GetParam() + "_corpus.jsonl");
  ASSERT_FALSE(lines.empty());
  std::mt19937 rng(1234);
  int bad = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    Ids ids = random_ids(*tok, lines, rng);
    for (bool skip : {false, true}) {
      bool valid = false;
      std::string got = stream(*tok, ids, skip, &valid);
      std::string want = tok->decode(ids, skip);
      EXPECT_TRUE(valid) << "invalid UTF-8 emitted for " << testing::ids_str(ids);
      if (got != want && ++bad <= 10)
        ADD_FAILURE() << "skip=" << skip << " ids " << testing::ids_str(ids) << "\n  want "
                      << testing::escaped(want) << "\n  got  " << testing::escaped(got);
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Decoders, StreamDecoderTest,
                         ::testing::Values("qwen3", "llama3", "gemma3", "hf_wordpiece", "hf_unigram"));

TEST(StreamDecoder, ByteFallbackRunIsHeldUntilItEnds) {
  const Tokenizer* tok = testing::fixture_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  auto b = [&](const char* name) { return *tok->token_id(name); };
  StreamDecoder sd(*tok, true);
  // U+4F60 as three byte tokens: nothing is printable before the third, and a byte run can still turn
  // invalid (then HF prints one U+FFFD per byte), so the text waits for the next non-byte token.
  EXPECT_EQ(sd.push(b("<0xE4>")), "");
  EXPECT_EQ(sd.push(b("<0xBD>")), "");
  EXPECT_EQ(sd.push(b("<0xA0>")), "");
  std::string rest = sd.push(*tok->token_id("\xE2\x96\x81world"));
  EXPECT_EQ(rest, "\xE4\xBD\xA0 world");
  EXPECT_EQ(sd.flush(), "");
  // The run turns invalid: the streamed text still equals decode().
  Ids ids = {b("<0xE4>"), b("<0xBD>"), b("<0x41>"), *tok->token_id("x")};
  EXPECT_EQ(stream(*tok, ids, true), tok->decode(ids, true));
  EXPECT_EQ(tok->decode(ids, true), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx");
}

TEST(StreamDecoder, MetaspaceFirstTokenRuleAndSkippedSpecials) {
  const Tokenizer* tok = testing::fixture_tokenizer("hf_unigram");
  ASSERT_NE(tok, nullptr);
  Ids ids = tok->encode("hello world again", true);  // <s> ... </s>
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(stream(*tok, ids, true), "hello world again");
  // A special token between words: with skipping it vanishes and the space before "world" stays.
  Ids mid = tok->encode("hello", false);
  Ids world = tok->encode(" world", false);
  mid.push_back(*tok->token_id("</s>"));
  mid.insert(mid.end(), world.begin(), world.end());
  EXPECT_EQ(stream(*tok, mid, true), tok->decode(mid, true));
  EXPECT_EQ(stream(*tok, mid, false), tok->decode(mid, false));
}

TEST(StreamDecoder, LongByteLevelRunOfIncompleteCharacters) {
  const Tokenizer* tok = testing::fixture_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "\xF0\x9F\x98\x80";  // emoji, split across byte-level tokens
  Ids ids = tok->encode(text, false);
  bool valid = false;
  EXPECT_EQ(stream(*tok, ids, false, &valid), text);
  EXPECT_TRUE(valid);
}

}  // namespace
}  // namespace bunsen::text
