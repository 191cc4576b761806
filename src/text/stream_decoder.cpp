// StreamDecoder: incremental detokenisation that never emits a partial UTF-8 sequence.
// Not a general prefix-diff detokenizer: it relies on Tokenizer::token_bytes composing (true for
// byte-level BPE and the byte tokenizer; SentencePiece-style decoders will need the prefix-diff variant).
// Invariant: concatenated push() outputs + flush() == tokenizer.decode(ids, skip_special), because both
// apply the same maximal-subpart U+FFFD rule to the same byte stream.
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace bunsen::text {

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  std::string out;
  size_t used = utf8::append_lossy(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace bunsen::text
