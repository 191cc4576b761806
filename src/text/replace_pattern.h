// ReplacePattern: tokenizer.json's Replace pattern ({"pattern": {"String" | "Regex": ...}, "content": ...}),
// shared by the Replace normalizer and the Replace decoder. Not a general regex utility (regex.h).
// Invariant: every non-overlapping match, leftmost first, becomes `content`; a regex pattern leaves text that
// is not valid UTF-8 unchanged (PCRE2 runs in UTF mode; decoders can see partial byte sequences).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "text/regex.h"

namespace bunsen::text {

class ReplacePattern {
 public:
  explicit ReplacePattern(const nlohmann::json& j);
  std::string apply(std::string text) const;

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_, content_;
};

}  // namespace bunsen::text
