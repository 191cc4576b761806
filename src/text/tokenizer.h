// text::Tokenizer: the interface the engine and CLI use to turn text into token ids and back, and its
// loaders. load_tokenizer() reads Hugging Face tokenizer.json (+ tokenizer_config.json): BPE (byte-level
// and SentencePiece-style byte fallback), Unigram and WordPiece pipelines, component by component
// (normalizer.h, pre_tokenizer.h, model.h, post_processor.h, decoder.h, added_vocab.h), equal to HF
// tokenizers' encode/decode. Not chat templates.
// Invalid UTF-8 policy (input): before tokenization every maximal invalid subpart of the input is replaced
// by one U+FFFD (the rule decode() and Rust's from_utf8_lossy use), so encode(s) == encode(sanitize(s)).
// Invariant: decode(encode(s)) == s for valid UTF-8 s that the normalizer leaves unchanged.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: prepend/append what the tokenizer config asks (bos/eos).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = false) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
  // Raw bytes of one token (byte-level tokens mapped back to bytes; may be a partial UTF-8 sequence).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // True when tokens after this one can still change how it decodes (a <0xNN> byte-fallback token: a
  // run of them decodes as a whole). StreamDecoder holds text back after such a token.
  virtual bool holds_back(int32_t id) const { return false; }
};

// Loads DIR/tokenizer.json (+ DIR/tokenizer_config.json if present). Error("tokenizer", ...) naming the file
// on failure. add_special applies tokenizer.json's post_processor, then tokenizer_config's add_bos_token /
// add_eos_token (a bos/eos the post-processor already put there is not added twice).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);
// Same from the files' contents (config_json may be empty); errors name origin + "/tokenizer.json" etc.
std::unique_ptr<Tokenizer> load_tokenizer_from_memory(std::string_view tokenizer_json,
                                                      std::string_view config_json,
                                                      const std::string& origin);
// Fallback used when a model directory has no tokenizer: ids 0..255 are the raw bytes.
std::unique_ptr<Tokenizer> make_byte_tokenizer(int64_t vocab_size);

// Streaming detokenizer: feed token ids, get text that is safe to print (never a partial UTF-8 sequence);
// flush() returns the rest. Works for every decoder the way HF's DecodeStream does: it decodes a short
// window (a few already-emitted context ids + the new ones) and emits what the window's text adds to the
// context's text, holding back while that text ends in U+FFFD (an incomplete sequence) or the last id
// holds_back(). Concatenated output == decode(all ids, skip_special) (for pathological inputs that hold
// back more than kMaxHeld ids in a row, text is emitted anyway and may then differ).
class StreamDecoder {
 public:
  static constexpr size_t kContext = 4;   // emitted ids kept as context for the next window
  static constexpr size_t kMaxHeld = 64;  // ids held back at most before emitting regardless

  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  std::string emit(const std::string& text);

  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  // context ids, then ids whose text is not yet emitted
  size_t n_context_ = 0;         // how many of window_ are context
  std::string context_text_;     // decode(window_[0, n_context_)): what was already emitted of the window
};

}  // namespace bunsen::text
