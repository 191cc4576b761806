// WordPiece model, as HF tokenizers' WordPiece: greedy longest match from the left, continuation pieces
// carry continuing_subword_prefix ("##"); a word longer than max_input_chars_per_word characters, or with
// any part that matches nothing, becomes the single unk token. Not the BERT pre-tokenizer/normalizer.
// Invariant: the output of a word is either all its matched pieces or exactly [unk].
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/status.h"
#include "text/json_util.h"
#include "text/model.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class WordPieceModel final : public Model {
 public:
  explicit WordPieceModel(const nlohmann::json& j) {
    const auto& vocab = j.at("vocab");
    json_util::load_vocab(vocab, "WordPiece", vocab_, id_to_token_, has_id_);
    unk_token_ = json_util::get_string(j, "unk_token", "[UNK]");
    prefix_ = json_util::get_string(j, "continuing_subword_prefix", "##");
    auto max_chars = json_util::get_or_null(j, "max_input_chars_per_word");
    max_chars_ = max_chars.is_null() ? 100 : max_chars.get<int64_t>();
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (word.empty()) return;
    int64_t n_chars = 0;
    for (size_t i = 0; i < word.size(); ++i) n_chars += (static_cast<uint8_t>(word[i]) & 0xC0) != 0x80;
    if (n_chars > max_chars_) {
      out.push_back(unk());
      return;
    }
    size_t before = out.size();
    std::string candidate;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      int32_t found = -1;
      while (end > start) {
        candidate.assign(start > 0 ? prefix_ : std::string());
        candidate.append(word.substr(start, end - start));
        if (auto it = vocab_.find(candidate); it != vocab_.end()) {
          found = it->second;
          break;
        }
        do --end;  // back off one character
        while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(before);
        out.push_back(unk());
        return;
      }
      out.push_back(found);
      start = end;
    }
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  int32_t unk() const {
    auto it = vocab_.find(unk_token_);
    check(it != vocab_.end(), "tokenizer",
          "WordPiece unk_token '" + unk_token_ + "' is not in the vocabulary");
    return it->second;
  }
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::string unk_token_, prefix_;
  int64_t max_chars_ = 100;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece_model(const nlohmann::json& j) {
  return std::make_unique<WordPieceModel>(j);
}

}  // namespace bunsen::text
