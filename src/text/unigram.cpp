// Unigram model (SentencePiece-style), as HF tokenizers' Unigram::encode_optimized: Viterbi over the
// byte trie of all pieces, each piece scoring its log-probability; a character no piece starts with
// costs min_score - 10 as unk; consecutive unk pieces are fused; a piece missing from the vocabulary
// becomes <0xNN> byte tokens (byte_fallback) or unk_id. Not the trainer and not sampling (no alpha/nbest).
// Invariants: ties keep the first candidate found (shorter pieces are visited first, as HF's trie does);
// scores add in HF's order, so equal inputs give bit-identical path scores.
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/status.h"
#include "text/json_util.h"
#include "text/model.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

constexpr double kUnkPenalty = 10.0;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class ByteTrie {
 public:
  ByteTrie() : nodes_(1) {}
  void insert(std::string_view key, int32_t id) {
    int32_t cur = 0;
    for (char ch : key) {
      auto c = static_cast<uint8_t>(ch);
      int32_t next = child(cur, c);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[cur].children.emplace_back(c, next);
        nodes_.emplace_back();
      }
      cur = next;
    }
    nodes_[cur].id = id;
  }
  void set_id(std::string_view key, int32_t id) {
    int32_t cur = 0;
    for (char ch : key) cur = child(cur, static_cast<uint8_t>(ch));
    nodes_[cur].id = id;
  }
  // Calls f(length, id) for every key that is a prefix of text, shortest first.
  template <class F>
  void prefixes(std::string_view text, F&& f) const {
    int32_t cur = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      cur = child(cur, static_cast<uint8_t>(text[i]));
      if (cur < 0) return;
      if (nodes_[cur].id >= 0) f(i + 1, nodes_[cur].id);
    }
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t id = -1;
  };
  int32_t child(int32_t node, uint8_t c) const {
    for (const auto& [k, v] : nodes_[node].children)
      if (k == c) return v;
    return -1;
  }
  std::vector<Node> nodes_;
};

class UnigramModel final : public Model {
 public:
  explicit UnigramModel(const nlohmann::json& j);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = token_to_id_.find(token);
    return it == token_to_id_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  const std::string* id_to_token(int32_t id) const override {
    return id >= 0 && id < static_cast<int32_t>(vocab_.size()) ? &vocab_[id].first : nullptr;
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }

 private:
  struct Span {
    size_t begin, end;
  };
  std::vector<Span> viterbi(std::string_view s) const;
  int32_t unk() const {
    check(unk_id_.has_value(), "tokenizer", "Unigram needs an unk token here but its unk_id is null");
    return *unk_id_;
  }

  std::vector<std::pair<std::string, double>> vocab_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  ByteTrie trie_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = std::numeric_limits<double>::infinity();
};

UnigramModel::UnigramModel(const nlohmann::json& j) {
  const auto& vocab = j.at("vocab");
  check(vocab.is_array() && !vocab.empty(), "tokenizer", "Unigram 'vocab' must be a non-empty array");
  vocab_.reserve(vocab.size());
  for (const auto& item : vocab) {
    check(item.is_array() && item.size() == 2, "tokenizer", "Unigram vocab entries must be [piece, score]");
    vocab_.emplace_back(item[0].get<std::string>(), item[1].get<double>());
  }
  for (size_t id = 0; id < vocab_.size(); ++id) {
    token_to_id_.insert_or_assign(vocab_[id].first, static_cast<int32_t>(id));  // duplicates: last wins
    trie_.insert(vocab_[id].first, 0);
    if (vocab_[id].second < min_score_) min_score_ = vocab_[id].second;
  }
  for (const auto& [tok, id] : token_to_id_) trie_.set_id(tok, id);
  const auto& unk = json_util::get_or_null(j, "unk_id");
  if (!unk.is_null()) {
    int64_t id = unk.get<int64_t>();
    check(id >= 0 && id < static_cast<int64_t>(vocab_.size()), "tokenizer",
          "Unigram unk_id is out of the vocab");
    unk_id_ = static_cast<int32_t>(id);
  }
  byte_fallback_ = json_util::get_bool(j, "byte_fallback", false);
}

std::vector<UnigramModel::Span> UnigramModel::viterbi(std::string_view s) const {
  struct Node {
    int32_t id = -1;
    double score = 0;
    size_t start = 0;
    bool set = false;
  };
  std::vector<Node> best(s.size() + 1);
  best[0].set = true;
  const double unk_score = min_score_ - kUnkPenalty;
  auto relax = [&](size_t end, size_t start, int32_t id, double score) {
    double cand = score + best[start].score;
    Node& n = best[end];
    if (!n.set || cand > n.score) n = {id, cand, start, true};
  };
  for (size_t at = 0; at < s.size();) {
    size_t mblen = utf8::valid_sequence_length(s.substr(at));
    if (mblen == 0) mblen = 1;
    bool has_single = false;
    trie_.prefixes(s.substr(at), [&](size_t len, int32_t id) {
      relax(at + len, at, id, vocab_[id].second);
      has_single = has_single || len == mblen;
    });
    if (!has_single) relax(at + mblen, at, unk(), unk_score);
    at += mblen;
  }
  // Backtrack; consecutive unk nodes fuse into one span (they are adjacent, so one range).
  std::vector<Span> spans;
  bool in_unk = false;
  for (size_t end = s.size(); end > 0;) {
    const Node& n = best[end];
    bool is_unk = unk_id_ && n.id == *unk_id_;
    if (is_unk && in_unk)
      spans.back().begin = n.start;
    else
      spans.push_back({n.start, end});
    in_unk = is_unk;
    end = n.start;
  }
  return {spans.rbegin(), spans.rend()};
}

void UnigramModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  for (const Span& sp : viterbi(piece)) {
    std::string_view str = piece.substr(sp.begin, sp.end - sp.begin);
    if (auto id = token_to_id(str)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      size_t before = out.size();
      char name[8];
      for (char c : str) {
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        auto id = token_to_id(name);
        if (!id) break;
        out.push_back(*id);
      }
      if (out.size() == before + str.size()) continue;
      out.resize(before);
    }
    out.push_back(unk());
  }
}

}  // namespace

std::unique_ptr<Model> make_unigram_model(const nlohmann::json& j) {
  return std::make_unique<UnigramModel>(j);
}

}  // namespace bunsen::text
