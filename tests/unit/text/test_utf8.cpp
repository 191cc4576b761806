// UTF-8 rules shared by decode, the StreamDecoder and the input policy: maximal-subpart U+FFFD
// replacement (expected outputs follow Unicode 3.9 / the WHATWG decoder by hand), and the byte tokenizer.
#include <gtest/gtest.h>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

std::string repeat_fffd(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += kFFFD;
  return s;
}

TEST(Utf8, ValidTextIsUnchanged) {
  for (std::string s : std::vector<std::string>{"", "abc", "h\xC3\xA9llo", "\xE6\x97\xA5", "\xF0\x9F\x98\x80",
                                                std::string("a\0b", 3)}) {
    EXPECT_TRUE(utf8::is_valid(s));
    EXPECT_EQ(utf8::sanitize(s), s);
  }
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacementEach) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"\xFF", repeat_fffd(1)},
      {"a\x80z", "a" + kFFFD + "z"},
      {"\xC0\xAF", repeat_fffd(2)},  // overlong lead bytes are never valid
      {"\xE4\xB8"
       "A",
       kFFFD + "A"},                         // truncated 3-byte sequence: one U+FFFD
      {"\xF0\x9F\x98", kFFFD},               // truncated at end of input
      {"\xED\xA0\x80", repeat_fffd(3)},      // surrogate: ED only allows 80..9F next
      {"\xF4\x90\x80\x80", repeat_fffd(4)},  // above U+10FFFF
      {"\xE0\x80\x80", repeat_fffd(3)},      // overlong 3-byte
      {"\xF0\x9F\x98\x80\xF0\x9F", "\xF0\x9F\x98\x80" + kFFFD},
      {"\xE2\x82\xE2\x82\xAC", kFFFD + "\xE2\x82\xAC"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(utf8::is_valid(c.in));
    EXPECT_EQ(utf8::sanitize(c.in), c.out) << "input bytes " << ::testing::PrintToString(c.in);
  }
}

TEST(Utf8, NonFinalKeepsIncompleteTail) {
  std::string out;
  EXPECT_EQ(utf8::append_lossy("ab\xE6\x97", out, false), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("ab\xE6\x41", out, false), 4u);  // not a prefix of anything valid
  EXPECT_EQ(out, "ab" + kFFFD + "A");
}

TEST(ByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_level::byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_level::byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level::byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_level::byte_to_unicode(0xAD), "\xC5\x83");  // soft hyphen is remapped (U+0143)
  EXPECT_EQ(byte_level::byte_to_unicode(0xE9), "\xC3\xA9");  // printable Latin-1 maps to itself
  for (int b = 0; b < 256; ++b) {
    std::string back;
    ASSERT_TRUE(byte_level::decode(byte_level::byte_to_unicode(static_cast<uint8_t>(b)), back));
    ASSERT_EQ(back, std::string(1, static_cast<char>(b)));
  }
  std::string out;
  EXPECT_FALSE(byte_level::decode("\xE2\x82\xAC", out));  // U+20AC is not in the alphabet
}

TEST(ByteTokenizer, RoundTripsAndFollowsInputPolicy) {
  auto tok = make_byte_tokenizer(300);
  EXPECT_EQ(tok->vocab_size(), 300);
  std::string s = "h\xC3\xA9llo \xF0\x9F\x98\x80";
  auto ids = tok->encode(s);
  ASSERT_EQ(ids.size(), s.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(tok->decode(ids), s);
  // Invalid input: the same ids as the sanitised text.
  EXPECT_EQ(tok->encode("a\xFF"
                        "b"),
            tok->encode("a" + kFFFD + "b"));
  EXPECT_EQ(tok->decode({0x61, 299, 0x62}), "a<|299|>b");  // ids past 255 stay visible
  EXPECT_EQ(tok->decode({0x61, 0xE4, 0x62}), "a" + kFFFD + "b");
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_TRUE(tok->eos_ids().empty());
  EXPECT_EQ(tok->token_id("A"), 65);
  EXPECT_THROW(make_byte_tokenizer(100), Error);
}

TEST(StreamDecoder, EmitsOnlyCompleteCharactersAndMatchesDecode) {
  auto tok = make_byte_tokenizer(256);
  std::string s = "a\xE6\x97\xA5\xF0\x9F\x98\x80z";
  StreamDecoder sd(*tok);
  std::vector<std::string> pieces;
  for (char c : s) pieces.push_back(sd.push(static_cast<unsigned char>(c)));
  EXPECT_EQ(pieces[0], "a");
  EXPECT_EQ(pieces[1], "");
  EXPECT_EQ(pieces[2], "");
  EXPECT_EQ(pieces[3], "\xE6\x97\xA5");
  EXPECT_EQ(pieces[7], "\xF0\x9F\x98\x80");
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, InvalidSequencesMatchDecode) {
  auto tok = make_byte_tokenizer(256);
  const std::string inputs[] = {
      "\xE4\xB8"
      "A",
      "x\xF0\x9F\x98", "\xED\xA0\x80q", "\xC0\xAF\xFF", "\xE2\x82\xE2\x82\xAC"};
  for (const std::string& s : inputs) {
    std::vector<int32_t> ids;
    for (char c : s) ids.push_back(static_cast<unsigned char>(c));
    StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = sd.push(id);
      EXPECT_TRUE(utf8::is_valid(piece));
      streamed += piece;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, tok->decode(ids)) << ::testing::PrintToString(s);
    EXPECT_EQ(streamed, utf8::sanitize(s));
  }
}

}  // namespace
}  // namespace bunsen::text
