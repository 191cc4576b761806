// Pre-tokenizers, normalizers and the regex layer on hand-built inputs. Expected splits follow the HF
// tokenizers documentation of SplitDelimiterBehavior ("the-final--countdown") and Oniguruma's \s
// (Unicode White_Space: U+0085 yes, U+180E and U+FEFF no), where the JS reference differs from HF.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"

namespace bunsen::text {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

Pieces run(const json& cfg, const std::string& text, bool at_start = true) {
  auto pt = make_pre_tokenizer(cfg);
  std::vector<Piece> pieces = {{text, at_start}};
  pt->pre_tokenize(pieces);
  Pieces out;
  for (const Piece& p : pieces) out.push_back(p.text);
  return out;
}

json split(const std::string& pattern_kind, const std::string& pattern, const std::string& behavior,
           bool invert = false) {
  return {
      {"type", "Split"}, {"pattern", {{pattern_kind, pattern}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(SplitPreTokenizer, DelimiterBehaviorsMatchHfDocs) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(run(split("String", "-", "Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(run(split("String", "-", "Isolated"), text),
            (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(split("String", "-", "MergedWithPrevious"), text),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(split("String", "-", "MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(split("String", "-", "Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(run(split("Regex", "-+", "Isolated"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(SplitPreTokenizer, InvertKeepsTheMatchesAsContent) {
  // invert: matches become the "content" and the gaps the delimiters.
  EXPECT_EQ(run(split("Regex", "[a-z]+", "Removed", true), "ab 12cd"), (Pieces{"ab", "cd"}));
  EXPECT_EQ(run(split("Regex", "[a-z]+", "Removed", false), "ab 12cd"), (Pieces{" 12"}));
  EXPECT_EQ(run(split("Regex", "[0-9]+", "Removed", true), "ab 12cd"), (Pieces{"12"}));
  EXPECT_EQ(run(split("Regex", "[a-z]+", "Isolated", true), "ab 12cd"), (Pieces{"ab", " 12", "cd"}));
}

TEST(SplitPreTokenizer, WhitespaceIsOnigurumasWhiteSpace) {
  // U+0085 and U+3000 are White_Space; U+180E (PCRE2 10.42 says space) and U+FEFF (JS says space) are not.
  EXPECT_EQ(run(split("Regex", "\\s+", "Removed"),
                "a\xC2\x85"
                "b\xE1\xA0\x8E"
                "c\xEF\xBB\xBF"
                "d\xE3\x80\x80"
                "e"),
            (Pieces{"a",
                    "b\xE1\xA0\x8E"
                    "c\xEF\xBB\xBF"
                    "d",
                    "e"}));
  EXPECT_EQ(run(split("Regex", "\\S+", "Removed"), "x\xE1\xA0\x8Ey z"), (Pieces{" "}));  // U+180E is \S
  EXPECT_EQ(run(split("Regex", "[^\\s]+", "Isolated"), "x\xC2\x85y"), (Pieces{"x", "\xC2\x85", "y"}));
}

TEST(SplitPreTokenizer, Qwen3PatternOnHandExamples) {
  const std::string qwen =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto cfg = split("Regex", qwen, "Isolated");
  EXPECT_EQ(run(cfg, "Hello   world"), (Pieces{"Hello", "  ", " world"}));
  EXPECT_EQ(run(cfg, "I'M here"), (Pieces{"I", "'M", " here"}));
  EXPECT_EQ(run(cfg, "x=123;\n\n"), (Pieces{"x", "=", "1", "2", "3", ";\n\n"}));
  EXPECT_EQ(run(cfg, "a \n b"), (Pieces{"a", " \n", " b"}));
}

TEST(Regex, TranslationOnlyTouchesWhitespaceClasses) {
  EXPECT_EQ(oniguruma_to_pcre2("a\\p{L}+\\d"), "a\\p{L}+\\d");
  std::string t = oniguruma_to_pcre2("[^\\s\\p{L}]\\s");
  EXPECT_EQ(t.find("\\s"), std::string::npos) << t;
  EXPECT_NE(t.find("[^\\t-\\r"), std::string::npos) << t;
  EXPECT_EQ(oniguruma_to_pcre2("[]\\s]"), "[]" + oniguruma_to_pcre2("\\s").substr(1));
  EXPECT_THROW(Regex("(unclosed"), Error);
}

TEST(Regex, LongWhitespaceRunsDoNotOverflow) {
  Regex re("\\s+(?!\\S)|\\s+");
  std::string text(300000, ' ');
  text += "x";
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, m);
  // The lookahead alternative leaves the last space for the second alternative.
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{0, 299999}));
  EXPECT_EQ(m[1], (std::pair<size_t, size_t>{299999, 300000}));
}

TEST(ByteLevelPreTokenizer, MapsBytesAndSplitsWithGpt2Regex) {
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(run(bl, "I'm here\n"), (Pieces{"I", "'m", "\xC4\xA0here", "\xC4\x8A"}));
  EXPECT_EQ(run(bl, "caf\xC3\xA9 42"), (Pieces{"caf\xC3\x83\xC2\xA9",
                                               "\xC4\xA0"
                                               "42"}));
  json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(run(no_regex, "hi there"), (Pieces{"\xC4\xA0hi\xC4\xA0there"}));
  EXPECT_EQ(run(no_regex, " hi"), (Pieces{"\xC4\xA0hi"}));  // no second prefix space
}

TEST(PreTokenizerFactory, SequenceAndErrors) {
  json seq = {{"type", "Sequence"},
              {"pretokenizers",
               {split("String", " ", "Removed"),
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(run(seq, "a b\n"), (Pieces{"a", "b\xC4\x8A"}));
  EXPECT_EQ(make_pre_tokenizer(json()), nullptr);
  try {
    make_pre_tokenizer({{"type", "UnicodeScripts"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("UnicodeScripts"), std::string::npos);
  }
  EXPECT_THROW(make_pre_tokenizer(split("String", "-", "Sideways")), Error);
}

TEST(Normalizer, UnicodeForms) {
  auto nfc = make_normalizer({{"type", "NFC"}});
  std::string s = "e\xCC\x81 \xE1\x84\x80\xE1\x85\xA1";  // e + combining acute; Hangul jamo G + A
  nfc->normalize(s);
  EXPECT_EQ(s, "\xC3\xA9 \xEA\xB0\x80");  // é, 가
  auto nfd = make_normalizer({{"type", "NFD"}});
  s = "\xC3\xA9";
  nfd->normalize(s);
  EXPECT_EQ(s, "e\xCC\x81");
  auto nfkc = make_normalizer({{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}});
  s = "\xEF\xAC\x81 \xE2\x91\xA0";  // ﬁ ligature, circled 1
  nfkc->normalize(s);
  EXPECT_EQ(s, "fi 1");
  EXPECT_EQ(make_normalizer(json()), nullptr);
  EXPECT_THROW(make_normalizer({{"type", "Precompiled"}}), Error);
}

}  // namespace
}  // namespace bunsen::text
