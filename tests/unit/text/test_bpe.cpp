// The BPE model, added-token flags and post-processing on tiny hand-built tokenizer.json files whose
// expected ids follow from HF's rules by hand (merge ranks, leftmost on ties, lstrip/rstrip/single_word,
// normalized added tokens, TemplateProcessing, add_bos_token/add_eos_token).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/tokenizer.h"

namespace bunsen::text {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

json base_vocab() {
  return {{"a", 0}, {"b", 1}, {"c", 2},  {"\xC4\xA0", 3}, {"<", 4},    {">", 5},
          {"s", 6}, {"w", 7}, {"ab", 8}, {"bc", 9},       {"abc", 10}, {"aa", 11}};
}

json bpe(json merges, json vocab = base_vocab()) {
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
}

json byte_level_tokenizer(json model) {
  return {{"model", model},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

std::unique_ptr<Tokenizer> load(const json& tok, const json& cfg = json()) {
  return load_tokenizer_from_memory(tok.dump(), cfg.is_null() ? "" : cfg.dump(), "memory");
}

TEST(Bpe, LowestRankMergesFirst) {
  auto t1 = load(byte_level_tokenizer(bpe({"b c", "a b"})));
  EXPECT_EQ(t1->encode("abc"), (Ids{0, 9}));  // bc (rank 0) wins over ab (rank 1)
  auto t2 = load(byte_level_tokenizer(bpe({"a b", "b c"})));
  EXPECT_EQ(t2->encode("abc"), (Ids{8, 2}));
  auto t3 = load(byte_level_tokenizer(bpe({"b c", "a b", "a bc"})));
  EXPECT_EQ(t3->encode("abc"), (Ids{10}));  // merges continue on merged symbols
  EXPECT_EQ(t3->decode({10}), "abc");
}

TEST(Bpe, TiesGoToTheLeftmostPair) {
  auto t = load(byte_level_tokenizer(bpe({"a a"})));
  EXPECT_EQ(t->encode("aaa"), (Ids{11, 0}));
  EXPECT_EQ(t->encode("aaaa"), (Ids{11, 11}));
}

TEST(Bpe, MergeFormatsAreEquivalent) {
  auto legacy = load(byte_level_tokenizer(bpe({"b c", "a b", "a bc"})));
  auto pairs = load(byte_level_tokenizer(
      bpe(json::array({json::array({"b", "c"}), json::array({"a", "b"}), json::array({"a", "bc"})}))));
  for (std::string s : {"abc", "cab", "bcabca", "aabbcc"})
    EXPECT_EQ(legacy->encode(s), pairs->encode(s)) << s;
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json m = bpe({"a b"});
  EXPECT_EQ(load(byte_level_tokenizer(m))->encode("abc"), (Ids{8, 2}));
  m["ignore_merges"] = true;
  EXPECT_EQ(load(byte_level_tokenizer(m))->encode("abc"), (Ids{10}));
}

TEST(Bpe, UnknownCharactersUnkFuseAndByteFallback) {
  json vocab = base_vocab();
  vocab["<unk>"] = 12;
  vocab["<0xC3>"] = 13;
  vocab["<0xA9>"] = 14;
  json m = bpe(json::array(), vocab);
  json tok = {{"model", m}};
  EXPECT_EQ(load(tok)->encode("azzb"), (Ids{0, 1}));  // no unk token: dropped, as HF does
  tok["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load(tok)->encode("azzb"), (Ids{0, 12, 12, 1}));
  tok["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(tok)->encode("azzb"), (Ids{0, 12, 1}));
  tok["model"]["byte_fallback"] = true;
  EXPECT_EQ(load(tok)->encode("a\xC3\xA9z"), (Ids{0, 13, 14, 12}));  // é has byte tokens, z does not
}

TEST(Bpe, ContinuingSubwordPrefix) {
  json vocab = {{"a", 0}, {"##b", 1}, {"##c", 2}, {"ab", 3}, {"abc", 4}, {"b", 5}};
  json m = bpe({"a ##b", "ab ##c"}, vocab);
  m["continuing_subword_prefix"] = "##";
  auto t = load({{"model", m}});
  EXPECT_EQ(t->encode("abc"), (Ids{4}));
  EXPECT_EQ(t->encode("ba"), (Ids{5}));  // '##a' is unknown and there is no unk: dropped
}

TEST(Bpe, BadFilesAreRejected) {
  EXPECT_THROW(load({{"model", bpe({"a q"})}}), Error);  // merge uses a token not in the vocab
  EXPECT_THROW(load({{"model", bpe({"ab"})}}), Error);   // no separator
  json m = bpe(json::array());
  m["unk_token"] = "<nope>";  // HF loads this and fails only when an unknown character needs the unk
  auto t = load({{"model", m}});
  EXPECT_EQ(t->encode("ab"), (Ids{0, 1}));
  EXPECT_THROW(t->encode("az"), Error);
  m["dropout"] = 0.1;
  EXPECT_THROW(load({{"model", m}}), Error);
}

// Added tokens take the next free ids after the 12-entry vocab, in file order: HF ignores the ids written
// in added_tokens and assigns them this way (the file's ids must agree for HF and bunsen to match).
json with_added_tokens() {
  json tok = byte_level_tokenizer(bpe({"a b"}));
  tok["normalizer"] = {{"type", "NFC"}};
  auto added = [](int id, const char* content, json flags) {
    json t = {{"id", id},        {"content", content},   {"special", false},   {"lstrip", false},
              {"rstrip", false}, {"single_word", false}, {"normalized", false}};
    t.update(flags);
    return t;
  };
  tok["added_tokens"] = {added(12, "<s>", {{"special", true}}), added(13, "<L>", {{"lstrip", true}}),
                         added(14, "<R>", {{"rstrip", true}}),  added(15, "<sw>", {{"single_word", true}}),
                         added(16, "<s><s>", json::object()),   added(17, "\xC3\xA9", {{"normalized", true}}),
                         added(18, "</s>", {{"special", true}})};
  return tok;
}

TEST(AddedTokens, LongestMatchFirstAndVerbatim) {
  auto t = load(with_added_tokens());
  EXPECT_EQ(t->encode("a<s>b"), (Ids{0, 12, 1}));
  EXPECT_EQ(t->encode("ab<s><s>ab"), (Ids{8, 16, 8}));
  EXPECT_EQ(t->encode("<s<s>>"), (Ids{4, 6, 12, 5}));
  EXPECT_EQ(t->token_id("<s><s>"), 16);
  EXPECT_TRUE(t->is_special(12));
  EXPECT_FALSE(t->is_special(16));
  EXPECT_EQ(t->vocab_size(), 19);
}

TEST(AddedTokens, StripFlagsSwallowWhitespace) {
  auto t = load(with_added_tokens());
  EXPECT_EQ(t->encode("a <L>b"), (Ids{0, 13, 1}));
  EXPECT_EQ(t->encode("a \t <L> b"), (Ids{0, 13, 3, 1}));  // only the left side is stripped
  EXPECT_EQ(t->encode("a<R>  b"), (Ids{0, 14, 1}));
  EXPECT_EQ(t->encode("a <R> b"), (Ids{0, 3, 14, 1}));
}

TEST(AddedTokens, SingleWordNeedsNonWordNeighbours) {
  auto t = load(with_added_tokens());
  EXPECT_EQ(t->encode("a <sw> b"), (Ids{0, 3, 15, 3, 1}));
  EXPECT_EQ(t->encode("<sw>"), (Ids{15}));
  EXPECT_EQ(t->encode("a<sw>b"), (Ids{0, 4, 6, 7, 5, 1}));  // inside a word: plain text
}

TEST(AddedTokens, NormalizedTokensMatchAfterNormalization) {
  auto t = load(with_added_tokens());
  EXPECT_EQ(t->encode("e\xCC\x81"), (Ids{17}));  // e + U+0301 -> NFC é -> added token
  EXPECT_EQ(t->encode("a\xC3\xA9"
                      "b"),
            (Ids{0, 17, 1}));
}

TEST(AddedTokens, DecodeAndSkipSpecial) {
  auto t = load(with_added_tokens());
  EXPECT_EQ(t->decode({12, 0, 13, 1, 18}), "<s>a<L>b</s>");
  EXPECT_EQ(t->decode({12, 0, 13, 1, 18}, true), "a<L>b");
  EXPECT_EQ(t->decode({0, 999, 1}), "ab");  // ids nobody knows decode to nothing
  EXPECT_EQ(t->token_bytes(3), " ");
  EXPECT_EQ(t->token_bytes(17), "\xC3\xA9");
  // HF tokenizers (since 0.19.1 reverted #1513) passes added tokens through the decoder too: é is the
  // byte-level character of byte 0xE9, which alone is invalid UTF-8 and decodes to U+FFFD.
  EXPECT_EQ(t->decode({0, 17, 1}),
            "a\xEF\xBF\xBD"
            "b");
}

json template_processor() {
  return {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {12}}, {"tokens", {"<s>"}}}}}}};
}

TEST(PostProcessing, TemplateAddsBosOnlyWithAddSpecial) {
  json tok = with_added_tokens();
  tok["post_processor"] = {{"type", "Sequence"},
                           {"processors", {{{"type", "ByteLevel"}}, template_processor()}}};
  auto t = load(tok);
  EXPECT_EQ(t->encode("ab", true), (Ids{12, 8}));
  EXPECT_EQ(t->encode("ab", false), (Ids{8}));
  EXPECT_EQ(t->encode("", true), (Ids{12}));
}

TEST(PostProcessing, ConfigAddBosAndEos) {
  json tok = with_added_tokens();
  json cfg = {{"bos_token", "<s>"},
              {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
              {"add_bos_token", true},
              {"add_eos_token", true}};
  auto t = load(tok, cfg);
  EXPECT_EQ(t->bos_id(), 12);
  EXPECT_EQ(t->eos_ids(), (Ids{18}));
  EXPECT_EQ(t->encode("ab", true), (Ids{12, 8, 18}));
  EXPECT_EQ(t->encode("ab", false), (Ids{8}));
  tok["post_processor"] = template_processor();  // the template already adds <s>: not twice
  EXPECT_EQ(load(tok, cfg)->encode("ab", true), (Ids{12, 8, 18}));
  cfg["add_bos_token"] = nullptr;  // null means unset
  cfg["add_eos_token"] = false;
  EXPECT_EQ(load(with_added_tokens(), cfg)->encode("ab", true), (Ids{8}));
}

}  // namespace
}  // namespace bunsen::text
