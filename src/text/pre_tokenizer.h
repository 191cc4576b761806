// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or string pattern, all five delimiter
// behaviours, invert), ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern, byte -> unicode
// mapping) and Sequence. Not the model. Metaspace, Whitespace, Digits, BERT etc. arrive with the full
// tokenizer and are rejected by name until then.
// Invariants: pieces are processed independently and in order; empty pieces are dropped (as HF does).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bunsen::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces.
  virtual void pre_tokenize(std::vector<std::string>& pieces) const = 0;
};

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

}  // namespace bunsen::text
