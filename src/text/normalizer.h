// Normalizers of tokenizer.json ("normalizer"): Unicode forms (NFC, NFD, NFKC, NFKD via utf8proc),
// Lowercase, Replace (string or regex), Prepend, Strip, BertNormalizer and Sequence, each with Hugging Face
// tokenizers' semantics. Not pre-tokenization and not added-token handling. Precompiled (SentencePiece's
// charsmap, used by T5/ALBERT-era files) is rejected by name: none of the served families uses it.
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
