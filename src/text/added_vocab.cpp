// AddedVocabulary: a byte trie per pass and HF's find_matches rules (single_word, lstrip, rstrip).
// Not normalisation itself. Invariants: after a match the scan continues at the match end even when the
// match is discarded by single_word (HF's non-overlapping find_iter); whitespace is Unicode White_Space.
#include "text/added_vocab.h"

#include <utf8proc.h>

#include <algorithm>

#include "text/normalizer.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Code point ending at byte `end` (text is valid UTF-8), and its start.
char32_t char_before(std::string_view text, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::decode(text.data() + start, end - start);
}

char32_t char_at(std::string_view text, size_t pos, size_t& len) {
  len = utf8::valid_sequence_length(text.substr(pos));
  if (len == 0) len = 1;
  return utf8::decode(text.data() + pos, len);
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  if (key.empty()) return;
  if (nodes.empty()) nodes.emplace_back();
  int32_t cur = 0;
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    auto& kids = nodes[cur].children;
    auto it = std::find_if(kids.begin(), kids.end(), [c](const auto& p) { return p.first == c; });
    if (it != kids.end()) {
      cur = it->second;
    } else {
      int32_t next = static_cast<int32_t>(nodes.size());
      nodes[cur].children.emplace_back(c, next);
      nodes.emplace_back();
      cur = next;
    }
  }
  nodes[cur].token = token;
  first_byte[static_cast<unsigned char>(key[0])] = true;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  if (nodes.empty() || !first_byte[static_cast<unsigned char>(text[pos])]) return best;
  int32_t cur = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    const auto& kids = nodes[cur].children;
    auto it = std::find_if(kids.begin(), kids.end(), [c](const auto& p) { return p.first == c; });
    if (it == kids.end()) break;
    cur = it->second;
    if (nodes[cur].token >= 0) best = {nodes[cur].token, i + 1 - pos};
  }
  return best;
}

void AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  by_id_.clear();
  by_content_.clear();
  tries_[0] = Trie();
  tries_[1] = Trie();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    t.decoded = t.content;
    by_id_[t.id] = i;
    by_content_[t.content] = i;
    if (!t.normalized) {
      tries_[0].insert(t.content, static_cast<int32_t>(i));
    } else {
      std::string key = t.content;
      if (normalizer) normalizer->normalize(key);
      tries_[1].insert(key, static_cast<int32_t>(i));
      t.decoded = key;
    }
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_pass, std::vector<Segment>& out) const {
  const Trie& trie = tries_[normalized_pass ? 1 : 0];
  size_t start_offset = 0, pos = 0;
  while (pos < text.size() && !trie.nodes.empty()) {
    auto [tok, len] = trie.longest_at(text, pos);
    if (tok < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<size_t>(tok)];
    size_t start = pos, stop = pos + len;
    pos = stop;
    if (t.single_word) {
      size_t s = 0, l = 0;
      bool left_ok = start == 0 || !is_word_char(char_before(text, start, s));
      bool right_ok = stop == text.size() || !is_word_char(char_at(text, stop, l));
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t prev = 0;
        if (!is_white_space(char_before(text, s, prev))) break;
        s = prev;
      }
      start = s;
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t l = 0;
        if (!is_white_space(char_at(text, stop, l))) break;
        stop += l;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::by_content(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? std::nullopt : std::optional<int32_t>(tokens_[it->second].id);
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  if (tokens_.empty()) return false;
  auto it = by_content_.find(content);
  return it != by_content_.end() && tokens_[it->second].special;
}

}  // namespace bunsen::text
