// BPE model: vocab + ranked merges, as HF tokenizers' BPE: a piece is split into characters (with
// continuing_subword_prefix / end_of_word_suffix), unknown characters go to byte fallback (<0xNN>) or unk
// (fused when fuse_unk), then the lowest-rank adjacent pair (leftmost on ties) is merged until none
// applies. Short words merge by rescanning a rank array, long ones with a heap and lazy invalidation
// (both give HF's order). Not byte-level mapping: in raw-byte mode (model.h) the GPT-2 alphabet is folded
// into the vocabulary and pieces arrive as raw bytes. Invariants: results are cached per piece (pieces
// < kMaxCachedPiece bytes; the cache is cleared at kCacheCapacity entries) under a mutex, so tokenize() is
// thread-safe; merges and the cache are flat open-addressing tables (merge_table.h).
#include <climits>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/json_util.h"
#include "text/merge_table.h"
#include "text/model.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kCacheCapacity = 1 << 16;
constexpr size_t kScanMergeLimit = 64;  // words with more initial symbols merge with the heap

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel final : public Model {
 public:
  explicit BpeModel(const nlohmann::json& j);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override { return find(vocab_, token); }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  bool use_raw_bytes() override;

 private:
  static std::optional<int32_t> find(const VocabMap& m, std::string_view s) {
    auto it = m.find(s);
    return it == m.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  void load_merges(const nlohmann::json& merges);
  void initial_ids(std::string_view piece, std::vector<int32_t>& ids) const;
  // Merge the word ids[start, end) in place.
  void merge_scan(std::vector<int32_t>& ids, size_t start) const;
  void merge_heap(std::vector<int32_t>& ids, size_t start) const;
  int32_t unk_id() const;

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  std::string unk_token_, prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  bool raw_ = false;           // raw-byte mode
  VocabMap raw_vocab_;         // raw bytes -> id (raw mode; ignore_merges lookups)
  int32_t byte_id_[256] = {};  // raw mode: id of each byte's alphabet character, -1 if none
  mutable std::mutex cache_mu_;
  mutable PieceCache cache_{kCacheCapacity};
};

BpeModel::BpeModel(const nlohmann::json& j) {
  const auto& vocab = j.at("vocab");
  json_util::load_vocab(vocab, "BPE", vocab_, id_to_token_, has_id_);
  prefix_ = json_util::get_string(j, "continuing_subword_prefix");
  suffix_ = json_util::get_string(j, "end_of_word_suffix");
  fuse_unk_ = json_util::get_bool(j, "fuse_unk", false);
  byte_fallback_ = json_util::get_bool(j, "byte_fallback", false);
  ignore_merges_ = json_util::get_bool(j, "ignore_merges", false);
  auto dropout = j.find("dropout");
  check(dropout == j.end() || dropout->is_null() || dropout->get<double>() == 0.0, "tokenizer",
        "BPE dropout is not supported (it makes encoding random); set it to null");
  unk_token_ = json_util::get_string(j, "unk_token");
  if (!unk_token_.empty()) unk_id_ = token_to_id(unk_token_);  // HF only fails when unk is needed
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
    merges_.insert_or_assign(*ia, *ib, {rank++, *im});  // a repeated pair: the last wins, as in HF
  }
}

bool BpeModel::use_raw_bytes() {
  if (!prefix_.empty() || !suffix_.empty() || byte_fallback_) return false;
  raw_vocab_.reserve(vocab_.size());
  std::string raw;
  for (const auto& [tok, id] : vocab_) {
    raw.clear();
    if (byte_level::decode(tok, raw)) raw_vocab_.emplace(raw, id);
  }
  for (int b = 0; b < 256; ++b)
    byte_id_[b] = find(vocab_, byte_level::byte_to_unicode(static_cast<uint8_t>(b))).value_or(-1);
  raw_ = true;
  return true;
}

int32_t BpeModel::unk_id() const {
  if (!unk_id_) throw Error("tokenizer", "BPE unk_token '" + unk_token_ + "' is not in the vocabulary");
  return *unk_id_;
}

// HF's merge_word: a pending unk is emitted before the next known character; byte-fallback tokens do not
// flush it (so [unknown, byte-fallback] gives bytes first, as HF does).
void BpeModel::initial_ids(std::string_view piece, std::vector<int32_t>& ids) const {
  bool pending_unk = false;
  auto flush_unk = [&] {
    if (pending_unk) ids.push_back(unk_id());
    pending_unk = false;
  };
  auto unknown = [&] {
    if (unk_token_.empty()) return;  // HF drops what it cannot represent when there is no unk token
    unk_id();                        // throws when the unk token is not in the vocabulary
    if (!(pending_unk && fuse_unk_)) {
      flush_unk();
      pending_unk = true;
    }
  };
  std::string ch;
  for (size_t i = 0; i < piece.size();) {
    if (raw_) {
      int32_t id = byte_id_[static_cast<uint8_t>(piece[i++])];
      if (id >= 0) {
        flush_unk();
        ids.push_back(id);
      } else {
        unknown();
      }
      continue;
    }
    size_t n = utf8::valid_sequence_length(piece.substr(i));
    if (n == 0) n = 1;
    ch.assign(i > 0 ? prefix_ : std::string());
    ch.append(piece.substr(i, n));
    i += n;
    if (i >= piece.size()) ch += suffix_;
    if (auto id = token_to_id(ch)) {
      flush_unk();
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      size_t before = ids.size();
      char name[8];
      for (char c : ch) {
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        auto id = token_to_id(name);
        if (!id) break;
        ids.push_back(*id);
      }
      if (ids.size() == before + ch.size()) continue;
      ids.resize(before);
    }
    unknown();
  }
  flush_unk();
}

// ranks[i] is the merge rank of (w[i], w[i+1]); merge the lowest (leftmost on ties) until none.
void BpeModel::merge_scan(std::vector<int32_t>& ids, size_t start) const {
  size_t n = ids.size() - start;
  if (n < 2) return;
  int32_t ranks[kScanMergeLimit];
  int32_t news[kScanMergeLimit];
  int32_t* w = ids.data() + start;
  auto lookup = [&](size_t i) {
    const MergeInfo* m = merges_.find(w[i], w[i + 1]);
    ranks[i] = m ? m->rank : INT32_MAX;
    news[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) lookup(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    w[best] = news[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      w[i] = w[i + 1];
      if (i + 2 < n) {
        ranks[i] = ranks[i + 1];
        news[i] = news[i + 1];
      }
    }
    --n;
    if (best > 0) lookup(best - 1);
    if (best + 1 < n) lookup(best);
  }
  ids.resize(start + n);
}

void BpeModel::merge_heap(std::vector<int32_t>& ids, size_t start) const {
  struct Symbol {
    int32_t id, prev, next;  // prev/next: -1 at the ends; id -1 once merged away
  };
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const size_t n = ids.size() - start;
  std::vector<Symbol> syms(n);
  for (size_t k = 0; k < n; ++k)
    syms[k] = {ids[start + k], static_cast<int32_t>(k) - 1, k + 1 < n ? static_cast<int32_t>(k + 1) : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    if (const MergeInfo* m = merges_.find(syms[pos].id, syms[nx].id)) heap.push({m->rank, pos, m->new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(n); ++k) consider(k);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    // Stale entry: the pair at pos changed since it was queued (HF compares the merge's new id).
    const MergeInfo* m = merges_.find(left.id, syms[left.next].id);
    if (!m || m->new_id != c.new_id) continue;
    Symbol& right = syms[left.next];
    left.id = c.new_id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  ids.resize(start);
  for (const Symbol& s : syms)
    if (s.id >= 0) ids.push_back(s.id);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  bool cacheable = piece.size() < kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.find(piece, out)) return;
  }
  size_t start = out.size();
  std::optional<int32_t> whole = ignore_merges_ ? find(raw_ ? raw_vocab_ : vocab_, piece) : std::nullopt;
  if (whole) {
    out.push_back(*whole);
  } else {
    initial_ids(piece, out);
    if (out.size() - start <= kScanMergeLimit)
      merge_scan(out, start);
    else
      merge_heap(out, start);
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    cache_.insert(piece, out.data() + start, out.size() - start);
  }
}

}  // namespace

std::unique_ptr<Model> make_bpe_model(const nlohmann::json& j) {
  return std::make_unique<BpeModel>(j);
}

std::unique_ptr<Model> make_model(const nlohmann::json& j) {
  check(j.is_object(), "tokenizer", "'model' must be an object");
  std::string type = json_util::get_string(j, "type");
  if (type.empty() && j.contains("merges")) type = "BPE";  // very old files omit the type
  if (type.empty() && j.contains("max_input_chars_per_word")) type = "WordPiece";
  if (type.empty() && j.contains("vocab") && j.at("vocab").is_array()) type = "Unigram";
  if (type == "BPE") return make_bpe_model(j);
  if (type == "Unigram") return make_unigram_model(j);
  if (type == "WordPiece") return make_wordpiece_model(j);
  throw Error("tokenizer", "unsupported model type '" + type + "'");
}

}  // namespace bunsen::text
