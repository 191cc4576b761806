// Normalizers of tokenizer.json ("normalizer"): Unicode forms (NFC, NFD, NFKC, NFKD via utf8proc) and
// Sequence. Not pre-tokenization and not added-token handling. Replace/Prepend/Lowercase/BERT/Precompiled
// (SentencePiece) arrive with the full tokenizer and are rejected by name until then.
// Invariant: input and output are valid UTF-8.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace bunsen::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

}  // namespace bunsen::text
