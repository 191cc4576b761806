// libFuzzer target for the tokenizer.json loader and the whole tokenizer pipeline: any input must either
// load or throw bunsen::Error; a loaded tokenizer must encode and decode a few fixed texts (including
// invalid UTF-8) and stream-decode what it encoded, or throw bunsen::Error. Invariants checked: decode and
// every streamed piece are valid UTF-8, streaming ends with the full decode (short inputs never reach the
// StreamDecoder's hold limits), ids are inside the vocabulary. Any other exception, crash or hang is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/status.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: invariant violated: %s\n", what);
    std::abort();
  }
}

constexpr std::string_view kTexts[] = {
    "",
    "hello world",
    "  a  b\n\n\tc ",
    "caf\xC3\xA9 e\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
    "<s>x</s> [CLS] <|im_start|>",
    "123 4567 \xD9\xA3",
    "\xFF\xFE bad \xE4\xBD",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};

void exercise(const bunsen::text::Tokenizer& tok, std::string_view text) {
  using bunsen::text::utf8::is_valid;
  std::vector<int32_t> ids = tok.encode(text, false);
  tok.encode(text, true);
  for (int32_t id : ids) require(id >= 0 && id < tok.vocab_size(), "ids inside the vocabulary");
  for (bool skip : {false, true}) {
    std::string full = tok.decode(ids, skip);
    require(is_valid(full), "decode is valid UTF-8");
    bunsen::text::StreamDecoder sd(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = sd.push(id);
      require(is_valid(piece), "streamed piece is valid UTF-8");
      streamed += piece;
    }
    streamed += sd.flush();
    require(streamed == full, "streamed text equals decode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<bunsen::text::Tokenizer> tok;
  try {
    tok = bunsen::text::load_tokenizer_from_memory(input, "", "fuzz-input");
  } catch (const bunsen::Error&) {
    return 0;  // rejected file: the expected outcome for most mutations
  }
  for (std::string_view text : kTexts) {
    try {
      exercise(*tok, text);
    } catch (const bunsen::Error&) {
      // e.g. the model needs an unk token its vocabulary lacks: HF fails there too
    }
  }
  // Arbitrary ids (some outside the vocabulary) must decode to valid UTF-8 too.
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size && ids.size() < 32; i += 7)
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)));
  try {
    require(bunsen::text::utf8::is_valid(tok->decode(ids, false)), "decode of arbitrary ids is valid UTF-8");
  } catch (const bunsen::Error&) {
  }
  return 0;
}
