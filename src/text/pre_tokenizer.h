// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or string, every delimiter behaviour,
// invert), ByteLevel, Metaspace (prepend_scheme always/first/never, split), Digits, Whitespace,
// WhitespaceSplit, Punctuation, BertPreTokenizer and Sequence, with Hugging Face tokenizers' semantics.
// Not the model. Invariants: pieces are processed independently and in order; empty pieces are dropped
// (as HF does); a sub-piece is at_start only if its parent was and it begins at the parent's byte 0.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace bunsen::text {

struct Piece {
  std::string text;
  // Begins at offset 0 of the original input (HF's offsets_original().0 == 0, which Metaspace's
  // prepend_scheme "first" tests).
  bool at_start = false;
};

// A non-owning reference to a callable void(std::string_view piece, bool at_start), valid during the call
// it is passed to (no allocation per piece, unlike std::function).
class PieceSink {
 public:
  template <class F>
  PieceSink(F&& f)  // NOLINT(google-explicit-constructor): used like a function parameter
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, std::string_view p, bool s) {
          (*static_cast<std::remove_reference_t<F>*>(o))(p, s);
        }) {}
  void operator()(std::string_view piece, bool at_start) const { call_(obj_, piece, at_start); }

 private:
  void* obj_;
  void (*call_)(void*, std::string_view, bool);
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
  // The same split of one piece, streamed in order to `sink`; pre-tokenizers that only cut (Split,
  // unmapped ByteLevel, Sequence of those) override it to hand out views instead of allocating pieces.
  virtual void for_each_piece(std::string_view text, bool at_start, PieceSink sink) const {
    std::vector<Piece> pieces;
    pieces.push_back({std::string(text), at_start});
    pre_tokenize(pieces);
    for (const Piece& p : pieces) sink(p.text, p.at_start);
  }
};

struct PreTokenizerOptions {
  // The last step is a ByteLevel pre-tokenizer whose alphabet mapping the model has folded into its
  // vocabulary (BPE raw-byte mode): split as usual but leave the bytes unmapped.
  bool skip_final_byte_mapping = false;
};

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j,
                                                 const PreTokenizerOptions& opt = {});
// True when j is ByteLevel, or a Sequence whose last step is (recursively) ByteLevel.
bool ends_with_byte_level(const nlohmann::json& j);

}  // namespace bunsen::text
