// Every tokenizer component against Hugging Face tokenizers' own output on tricky inputs: the cases in
// data/hf_component_cases.jsonl were recorded by scripts/text/make_hf_tokenizers.py with HF tokenizers
// (normalize_str, pre_tokenize_str, decoder.decode, and small whole tokenizers: BPE unk/fuse_unk/byte
// fallback/prefix/suffix/ignore_merges, WordPiece, Unigram, added-token flags, post-processors). Cases
// where HF itself refused the configuration are skipped; "encode_error" cases must throw here too.
#include <gtest/gtest.h>

#include "core/status.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace bunsen::text {
namespace {

using nlohmann::json;
using testing::escaped;
using Ids = std::vector<int32_t>;

constexpr int kMaxReported = 15;

const std::vector<json>& cases() {
  static const std::vector<json> all = testing::read_jsonl(testing::data_dir() + "/hf_component_cases.jsonl");
  return all;
}

// Runs check(case) on every case of `kind` without "error"; returns the number checked.
template <class Check>
int for_kind(const std::string& kind, Check&& check) {
  int n = 0;
  for (const json& c : cases()) {
    if (c.at("kind") != kind || c.contains("error")) continue;
    ++n;
    try {
      check(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << kind << " " << c.dump() << "\n  threw " << e.what();
    }
  }
  return n;
}

TEST(HfComponents, Normalizers) {
  int bad = 0;
  int n = for_kind("normalizer", [&](const json& c) {
    std::string s = c.at("input");
    make_normalizer(c.at("config"))->normalize(s);
    if (s != c.at("output").get<std::string>() && ++bad <= kMaxReported)
      ADD_FAILURE() << c.at("config").dump() << "\n  input " << escaped(c.at("input")) << "\n  want  "
                    << escaped(c.at("output")) << "\n  got   " << escaped(s);
  });
  EXPECT_GT(n, 300);
  EXPECT_EQ(bad, 0) << bad << " of " << n;
}

TEST(HfComponents, PreTokenizers) {
  int bad = 0;
  int n = for_kind("pre_tokenizer", [&](const json& c) {
    std::vector<Piece> pieces = {{c.at("input").get<std::string>(), true}};
    make_pre_tokenizer(c.at("config"))->pre_tokenize(pieces);
    std::vector<std::string> got;
    for (const Piece& p : pieces) got.push_back(p.text);
    auto want = c.at("output").get<std::vector<std::string>>();
    if (got != want && ++bad <= kMaxReported)
      ADD_FAILURE() << c.at("config").dump() << "\n  input " << escaped(c.at("input")) << "\n  want  "
                    << json(want).dump() << "\n  got   " << json(got).dump();
  });
  EXPECT_GT(n, 500);
  EXPECT_EQ(bad, 0) << bad << " of " << n;
}

TEST(HfComponents, Decoders) {
  int bad = 0;
  int n = for_kind("decoder", [&](const json& c) {
    std::string got =
        decode_tokens(*make_decoder(c.at("config")), c.at("input").get<std::vector<std::string>>());
    if (got != c.at("output").get<std::string>() && ++bad <= kMaxReported)
      ADD_FAILURE() << c.at("config").dump() << "\n  tokens " << c.at("input").dump() << "\n  want  "
                    << escaped(c.at("output")) << "\n  got   " << escaped(got);
  });
  EXPECT_GT(n, 20);
  EXPECT_EQ(bad, 0) << bad << " of " << n;
}

std::string streamed(const Tokenizer& tok, const Ids& ids, bool skip) {
  StreamDecoder sd(tok, skip);
  std::string out;
  for (int32_t id : ids) out += sd.push(id);
  return out + sd.flush();
}

TEST(HfComponents, WholeTokenizers) {
  int bad = 0;
  int n = for_kind("tokenizer", [&](const json& c) {
    auto tok = load_tokenizer_from_memory(c.at("config").dump(), "", c.at("name"));
    std::string in = c.at("input");
    std::string where = std::string(c.at("name")) + " input " + escaped(in);
    if (c.contains("encode_error")) {
      EXPECT_THROW(tok->encode(in, false), Error) << where << " (HF: " << c.at("encode_error") << ")";
      return;
    }
    Ids ids = c.at("ids"), ids_special = c.at("ids_special");
    std::string decoded = c.contains("decoded") ? c.at("decoded").get<std::string>() : in;
    std::string skipped = c.at("decoded_skip");
    Ids got = tok->encode(in, false), got_special = tok->encode(in, true);
    std::string got_decoded = tok->decode(ids, false), got_skipped = tok->decode(ids_special, true);
    bool ok = got == ids && got_special == ids_special && got_decoded == decoded && got_skipped == skipped &&
              streamed(*tok, ids, false) == got_decoded && streamed(*tok, ids_special, true) == got_skipped;
    if (!ok && ++bad <= kMaxReported)
      ADD_FAILURE() << where << "\n  ids     want " << json(ids).dump() << " got " << json(got).dump()
                    << "\n  special want " << json(ids_special).dump() << " got " << json(got_special).dump()
                    << "\n  decode  want " << escaped(decoded) << " got " << escaped(got_decoded)
                    << "\n  skip    want " << escaped(skipped) << " got " << escaped(got_skipped);
  });
  EXPECT_GT(n, 80);
  EXPECT_EQ(bad, 0) << bad << " of " << n;
}

}  // namespace
}  // namespace bunsen::text
