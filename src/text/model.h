// Tokenizer models of tokenizer.json ("model"): the vocabulary and the algorithm that turns one
// pre-tokenized piece into ids: BPE (bpe.cpp), Unigram (unigram.cpp), WordPiece (wordpiece.cpp), each
// exactly as Hugging Face tokenizers does it. Not normalisation, pre-tokenisation or added tokens.
// Invariants: tokenize() is const and thread-safe; ids are in [0, vocab_size()).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one piece. Throws Error("tokenizer", ...) only where HF fails too (a model that
  // needs its unk token but has none in its vocabulary).
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // nullptr when the model has no token with this id.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // 1 + the largest id in the vocabulary.
  virtual int64_t vocab_size() const = 0;
  // Raw-byte mode for byte-level pipelines: when it returns true, tokenize() takes raw bytes instead of
  // GPT-2 alphabet characters (the mapping is folded into the vocabulary once, at load). Only a BPE
  // without subword prefix/suffix or byte fallback accepts.
  virtual bool use_raw_bytes() { return false; }
};

// Throws Error("tokenizer", ...) for unknown model types and malformed vocab/merges.
std::unique_ptr<Model> make_model(const nlohmann::json& j);
std::unique_ptr<Model> make_bpe_model(const nlohmann::json& j);
std::unique_ptr<Model> make_unigram_model(const nlohmann::json& j);
std::unique_ptr<Model> make_wordpiece_model(const nlohmann::json& j);

}  // namespace bunsen::text
