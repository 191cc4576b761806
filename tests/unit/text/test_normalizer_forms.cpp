// The Unicode-form normalizers' fast path (only the stretches around characters a form may change go
// through utf8proc) against the plain reference, utf8proc_map on the whole text, on random strings built
// from the characters that make normalization hard: combining marks in every order, Hangul L/V/T jamo and
// syllables, composition exclusions and singletons, compatibility characters, supplementary planes.
// Also the limits that keep hostile tokenizer.json files bounded (nesting depth, growth, sparse ids).
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "core/status.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace bunsen::text {
namespace {

using nlohmann::json;

std::string reference(const std::string& s, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  EXPECT_GE(n, 0);
  std::string r(reinterpret_cast<const char*>(out), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string random_text(std::mt19937& rng) {
  static const std::vector<std::pair<char32_t, char32_t>> kRanges = {
      {'a', 'z'},         {' ', '~'},         {0xC0, 0xFF},       {0x300, 0x36F},       {0x1100, 0x1112},
      {0x1161, 0x1175},   {0x11A8, 0x11C2},   {0xAC00, 0xAC40},   {0x0915, 0x0939},     {0x093C, 0x094D},
      {0x0958, 0x095F},   {0x0386, 0x038F},   {0x037E, 0x037E},   {0x0387, 0x0387},     {0x2000, 0x2001},
      {0x212B, 0x212B},   {0x2126, 0x2126},   {0xFB00, 0xFB06},   {0xFF21, 0xFF3A},     {0x2460, 0x2473},
      {0x3099, 0x309A},   {0x304B, 0x3053},   {0x4E00, 0x4E20},   {0x1E00, 0x1E20},     {0x0F73, 0x0F81},
      {0x1D15E, 0x1D164}, {0x1F600, 0x1F610}, {0x1F3FB, 0x1F3FF}, {0x10FFFF, 0x10FFFF}, {0xFDFA, 0xFDFA}};
  std::uniform_int_distribution<size_t> pick(0, kRanges.size() - 1);
  std::uniform_int_distribution<int> len(0, 24);
  std::string s;
  for (int i = 0, n = len(rng); i < n; ++i) {
    auto [lo, hi] = kRanges[pick(rng)];
    utf8::append(static_cast<char32_t>(std::uniform_int_distribution<uint32_t>(lo, hi)(rng)), s);
  }
  return s;
}

TEST(NormalizerForms, FastPathEqualsWholeTextUtf8proc) {
  const std::pair<const char*, int> kForms[] = {
      {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
      {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
      {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
      {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
  std::mt19937 rng(99);
  for (auto [name, options] : kForms) {
    auto n = make_normalizer({{"type", name}});
    int bad = 0;
    for (int i = 0; i < 4000; ++i) {
      std::string s = random_text(rng), got = s;
      n->normalize(got);
      std::string want = reference(s, options);
      if (got != want && ++bad <= 5)
        ADD_FAILURE() << name << " of " << testing::escaped(s) << "\n  want " << testing::escaped(want)
                      << "\n  got  " << testing::escaped(got);
    }
    EXPECT_EQ(bad, 0) << name;
  }
}

json minimal_with(const char* key, json component) {
  json tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", json::array()}}}};
  tok[key] = std::move(component);
  return tok;
}

TEST(TokenizerLimits, DeepNestingIsRejected) {
  json n = {{"type", "Lowercase"}};
  for (int i = 0; i < 40; ++i) n = {{"type", "Sequence"}, {"normalizers", {n}}};
  EXPECT_THROW(load_tokenizer_from_memory(minimal_with("normalizer", n).dump(), "", "mem"), Error);
  json shallow = {{"type", "Lowercase"}};
  for (int i = 0; i < 8; ++i) shallow = {{"type", "Sequence"}, {"normalizers", {shallow}}};
  EXPECT_NO_THROW(load_tokenizer_from_memory(minimal_with("normalizer", shallow).dump(), "", "mem"));
}

TEST(TokenizerLimits, ExplosiveReplaceChainsStop) {
  json step = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aaaa"}};
  json chain = {{"type", "Sequence"}, {"normalizers", json::array()}};
  for (int i = 0; i < 20; ++i) chain["normalizers"].push_back(step);  // 4^20-fold
  auto tok = load_tokenizer_from_memory(minimal_with("normalizer", chain).dump(), "", "mem");
  EXPECT_THROW(tok->encode("aaaa"), Error);
}

TEST(TokenizerLimits, SparseIdsAndBadReplacementAreRejected) {
  json tok = minimal_with("normalizer", nullptr);
  tok["model"]["vocab"]["c"] = 2000000000;
  EXPECT_THROW(load_tokenizer_from_memory(tok.dump(), "", "mem"), Error);
  json meta = {{"type", "Metaspace"}, {"replacement", "ab"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_THROW(load_tokenizer_from_memory(minimal_with("pre_tokenizer", meta).dump(), "", "mem"), Error);
  EXPECT_THROW(load_tokenizer_from_memory(minimal_with("decoder", meta).dump(), "", "mem"), Error);
}

}  // namespace
}  // namespace bunsen::text
