// Decoders of tokenizer.json ("decoder"): turn token strings back into text. This issue implements
// ByteLevel (byte-level alphabet -> raw bytes, then lossy UTF-8). Metaspace, ByteFallback, WordPiece,
// Sequence etc. arrive with the full tokenizer. Not id -> token lookup (the Tokenizer does it).
// Invariant: for ByteLevel, decode(tokens) == utf8 lossy(concat(token_bytes(t))), which is what makes the
// StreamDecoder's output equal decode().
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::string decode(const std::vector<std::string_view>& tokens) const = 0;
  // The raw bytes one token contributes (may be a partial UTF-8 sequence).
  virtual std::string token_bytes(std::string_view token) const = 0;
};

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

}  // namespace bunsen::text
