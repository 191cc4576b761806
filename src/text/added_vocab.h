// Added tokens of tokenizer.json ("added_tokens"): matched verbatim in the input before the model sees
// it, leftmost-longest, with HF's flags: lstrip/rstrip swallow adjacent whitespace, single_word requires
// non-word characters (or the text edge) on both sides, normalized selects whether the token is matched in
// the raw text (false) or in the normalized text (true). Not the model vocab.
// Invariant: split() returns segments that tile the text except for whitespace swallowed by lstrip/rstrip.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bunsen::text {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
  // What decode() shows: the normalized content for normalized tokens (HF 0.23 decodes "<L>" added with
  // normalized=true under a Lowercase normalizer as "<l>"), else the content. Set by build().
  std::string decoded;
};

class AddedVocabulary {
 public:
  struct Segment {
    size_t begin, end;  // byte range in the text
    int32_t id;         // added token id, or -1 for plain text
  };

  // Tokens with normalized=true are matched by their normalized content (as HF does).
  void build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  // normalized_pass == false: match tokens with normalized=false in raw text; true: the others.
  void split(std::string_view text, bool normalized_pass, std::vector<Segment>& out) const;
  bool has_normalized_tokens() const { return !tries_[1].nodes.empty(); }
  bool empty() const { return tokens_.empty(); }

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> by_content(std::string_view content) const;
  // HF's is_special_token: the string is the content of a special added token.
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes;  // nodes[0] = root when non-empty
    bool first_byte[256] = {};
    void insert(std::string_view key, int32_t token);
    // Longest token matching at text[pos]: (index into tokens_, length) or (-1, 0).
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> by_content_;
  Trie tries_[2];  // [0]: raw (normalized=false), [1]: normalized
};

}  // namespace bunsen::text
