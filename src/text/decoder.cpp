// ByteLevel decoder. Not the streaming detokenizer (stream_decoder.cpp).
// Invariant: a token with a character outside the byte-level alphabet contributes its own UTF-8 bytes
// (HF does the same, e.g. for added tokens written in plain text).
#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/json_util.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  std::string token_bytes(std::string_view token) const override {
    std::string out;
    if (!byte_level::decode(token, out)) out.assign(token);
    return out;
  }
  std::string decode(const std::vector<std::string_view>& tokens) const override {
    std::string bytes;
    for (std::string_view t : tokens)
      if (!byte_level::decode(t, bytes)) bytes.append(t);
    std::string out;
    out.reserve(bytes.size());
    utf8::append_lossy(bytes, out, true);
    return out;
  }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  throw Error("tokenizer", "unsupported decoder type '" + type + "'");
}

}  // namespace bunsen::text
