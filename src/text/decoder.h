// Decoders of tokenizer.json ("decoder"): turn token strings back into text as Hugging Face tokenizers'
// decode_chain does: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, WordPiece and Sequence,
// each mapping the list of token strings to a new list, the result being their concatenation. Not
// id -> token lookup (the Tokenizer does it) and not streaming (stream_decoder.cpp).
// Invariant: decode() of any token list is valid UTF-8.
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
  // One step of HF's decode chain: rewrites the token list in place.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // The raw bytes one token stands for on its own (may be a partial UTF-8 sequence).
  virtual std::string token_bytes(std::string_view token) const { return std::string(token); }
  // True when tokens after this one can still change how it decodes (ByteFallback's <0xNN>: a run of
  // byte tokens decodes as a whole). The StreamDecoder holds text back while the last token is such.
  virtual bool holds_back(std::string_view token) const { return false; }
};

// Concatenation of the decode chain's output, made valid UTF-8 (lossy) where a step left raw bytes.
std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens);

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

}  // namespace bunsen::text
