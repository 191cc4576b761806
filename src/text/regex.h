// Regex: a compiled PCRE2 pattern (UTF + UCP, JIT when available) used by the Split and ByteLevel
// pre-tokenizers. Patterns in tokenizer.json are Oniguruma syntax; PCRE2 accepts the ones real tokenizers
// use (lookahead, \p{L}, (?i:...)). One semantic fix-up is applied: `\s` is rewritten to Oniguruma's set
// (Unicode White_Space) because PCRE2 10.42 also counts U+180E. Not a general Oniguruma emulator.
// Invariants: input must be valid UTF-8 (callers sanitise first); matching is thread-safe.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bunsen::text {

class Regex {
 public:
  // Throws Error("tokenizer", ...) quoting the pattern and PCRE2's message when it does not compile.
  explicit Regex(std::string_view oniguruma_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [begin, end) byte offsets of successive non-overlapping matches, left to right. An empty match
  // advances the scan by one character (and is reported, as Oniguruma's find_iter does).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;   // as given (before translation)
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites Oniguruma-only spellings into PCRE2 (exposed for tests).
std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace bunsen::text
