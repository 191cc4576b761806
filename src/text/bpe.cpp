// BPE model: vocab + ranked merges; a piece is split into characters (with continuing_subword_prefix /
// end_of_word_suffix), unknown characters go to byte fallback or unk, then the lowest-rank adjacent pair
// (leftmost on ties) is merged until none applies, as HF tokenizers' Word::merge_all does (heap + lazy
// invalidation). Not byte-level mapping (the pre-tokenizer does it). Invariants: results are cached per
// piece (pieces < kMaxCachedPiece bytes; the cache is cleared when it reaches kCacheCapacity); the cache is
// guarded by a mutex so tokenize() is thread-safe.
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/status.h"
#include "text/json_util.h"
#include "text/model.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kCacheCapacity = 1 << 16;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct MergeInfo {
  int32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Symbol {
  int32_t id;
  int32_t prev, next;  // -1 at the ends
  bool alive;
};

struct Candidate {
  int32_t rank, pos, left_id, right_id, new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

class BpeModel final : public Model {
 public:
  explicit BpeModel(const nlohmann::json& j);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  void load_merges(const nlohmann::json& merges);
  void initial_symbols(std::string_view piece, std::vector<Symbol>& syms) const;
  void merge_all(std::vector<Symbol>& syms) const;
  void push_unk(std::vector<Symbol>& syms) const;

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::optional<int32_t> unk_id_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

BpeModel::BpeModel(const nlohmann::json& j) {
  const auto& vocab = j.at("vocab");
  check(vocab.is_object(), "tokenizer", "BPE 'vocab' must be an object");
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    check(id >= 0, "tokenizer", "negative id in BPE vocab for '" + it.key() + "'");
    vocab_.emplace(it.key(), id);
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(static_cast<size_t>(id) + 1);
      has_id_.resize(static_cast<size_t>(id) + 1, false);
    }
    id_to_token_[id] = it.key();
    has_id_[id] = true;
  }
  prefix_ = json_util::get_string(j, "continuing_subword_prefix");
  suffix_ = json_util::get_string(j, "end_of_word_suffix");
  fuse_unk_ = json_util::get_bool(j, "fuse_unk", false);
  byte_fallback_ = json_util::get_bool(j, "byte_fallback", false);
  ignore_merges_ = json_util::get_bool(j, "ignore_merges", false);
  auto dropout = j.find("dropout");
  check(dropout == j.end() || dropout->is_null() || dropout->get<double>() == 0.0, "tokenizer",
        "BPE dropout is not supported");
  std::string unk = json_util::get_string(j, "unk_token");
  if (!unk.empty()) {
    unk_id_ = token_to_id(unk);
    check(unk_id_.has_value(), "tokenizer", "BPE unk_token '" + unk + "' is not in the vocab");
  }
  load_merges(j.at("merges"));
}

void BpeModel::load_merges(const nlohmann::json& merges) {
  check(merges.is_array(), "tokenizer", "BPE 'merges' must be an array");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {  // legacy "a b"
      const std::string& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      check(sp != std::string::npos, "tokenizer", "BPE merge '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {  // tokenizers >= 0.20: ["a", "b"]
      check(m.is_array() && m.size() == 2, "tokenizer", "BPE merge must be \"a b\" or [a, b]");
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    auto ia = token_to_id(a), ib = token_to_id(b);
    std::string merged = a + (b.compare(0, prefix_.size(), prefix_) == 0 ? b.substr(prefix_.size()) : b);
    auto im = token_to_id(merged);
    check(ia && ib && im, "tokenizer",
          "BPE merge '" + a + " " + b + "' uses a token that is not in the vocab");
    merges_.insert_or_assign(pair_key(*ia, *ib),
                             MergeInfo{rank++, *im});  // a repeated pair: the last wins, as in HF
  }
}

void BpeModel::push_unk(std::vector<Symbol>& syms) const {
  if (!unk_id_) return;  // HF drops characters it cannot represent when there is no unk token
  if (fuse_unk_ && !syms.empty() && syms.back().id == *unk_id_) return;
  syms.push_back({*unk_id_, -1, -1, true});
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<Symbol>& syms) const {
  std::string ch;
  for (size_t i = 0; i < piece.size();) {
    size_t n = utf8::valid_sequence_length(piece.substr(i));
    if (n == 0) n = 1;
    ch.assign(i > 0 ? prefix_ : std::string());
    ch.append(piece.substr(i, n));
    i += n;
    if (i >= piece.size()) ch += suffix_;
    if (auto id = token_to_id(ch)) {
      syms.push_back({*id, -1, -1, true});
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      char name[8];
      for (char c : piece.substr(i - n, n)) {
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        if (auto id = token_to_id(name)) bytes.push_back(*id);
      }
      if (bytes.size() == n) {
        for (int32_t id : bytes) syms.push_back({id, -1, -1, true});
        continue;
      }
    }
    push_unk(syms);
  }
  for (size_t k = 0; k < syms.size(); ++k) {
    syms[k].prev = static_cast<int32_t>(k) - 1;
    syms[k].next = k + 1 < syms.size() ? static_cast<int32_t>(k) + 1 : -1;
  }
}

void BpeModel::merge_all(std::vector<Symbol>& syms) const {
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) heap.push({it->second.rank, pos, syms[pos].id, syms[nx].id, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) consider(k);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    // Stale entries: the left symbol was merged away or changed, or its right neighbour changed.
    if (!left.alive || left.id != c.left_id || left.next < 0 || syms[left.next].id != c.right_id) continue;
    Symbol& right = syms[left.next];
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      return;
    }
  }
  bool cacheable = piece.size() < kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  initial_symbols(piece, syms);
  merge_all(syms);
  size_t start = out.size();
  for (const Symbol& s : syms)
    if (s.alive) out.push_back(s.id);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(piece),
                   std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
  }
}

}  // namespace

std::unique_ptr<Model> make_bpe_model(const nlohmann::json& j) {
  return std::make_unique<BpeModel>(j);
}

std::unique_ptr<Model> make_model(const nlohmann::json& j) {
  std::string type = json_util::get_string(j, "type");
  if (type.empty() && j.contains("merges")) type = "BPE";  // very old files omit the type
  if (type == "BPE") return make_bpe_model(j);
  throw Error("tokenizer",
              "unsupported model type '" + type + "' (Unigram and WordPiece are not implemented yet)");
}

}  // namespace bunsen::text
