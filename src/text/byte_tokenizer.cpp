// The fallback tokenizer for model directories without tokenizer files: ids 0..255 are the raw bytes;
// ids 256..vocab_size-1 exist (the model may emit them) and decode to a visible "<|id|>" so no generated
// token vanishes from the output (synthetic benchmark models emit them all the time). Not a BPE.
// Invariants: same input policy as every tokenizer (invalid UTF-8 -> U+FFFD first), so
// decode(encode(s)) == s for valid s; no special tokens, no bos/eos.
#include <string>

#include "core/status.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

constexpr int64_t kByteVocab = 256;

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::string sanitized = utf8::is_valid(text) ? std::string(text) : utf8::sanitize(text);
    std::vector<int32_t> ids;
    ids.reserve(sanitized.size());
    for (char c : sanitized) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string bytes;
    for (int32_t id : ids) bytes += token_bytes(id);
    return utf8::sanitize(bytes);
  }
  std::string token_bytes(int32_t id) const override {
    if (id >= kByteVocab && id < vocab_size_) return "<|" + std::to_string(id) + "|>";
    if (id < 0 || id >= kByteVocab) return {};
    return std::string(1, static_cast<char>(id));
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (token.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(token[0]);
  }
  bool is_special(int32_t) const override { return false; }
  std::vector<int32_t> eos_ids() const override { return {}; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }

 private:
  int64_t vocab_size_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(int64_t vocab_size) {
  check(vocab_size >= kByteVocab, "tokenizer",
        strfmt("byte tokenizer needs vocab_size >= 256, got %lld", static_cast<long long>(vocab_size)));
  return std::make_unique<ByteTokenizer>(vocab_size);
}

}  // namespace bunsen::text
