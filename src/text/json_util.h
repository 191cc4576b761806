// Small nlohmann::json accessors for tokenizer files, where optional fields are often present as null,
// and the limits that keep a hostile tokenizer.json from exhausting the stack or memory. Not a schema
// validator. Invariant: a null or missing field yields the default, a wrong type throws nlohmann's
// type_error (the loader turns it into Error("tokenizer", "<file>: ...")).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace bunsen::text::json_util {

inline bool get_bool(const nlohmann::json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<bool>();
}

inline std::string get_string(const nlohmann::json& j, const char* key, const std::string& def = {}) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? def : it->get<std::string>();
}

inline const nlohmann::json& get_or_null(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Components nest (Sequence of Sequence ...) at most this deep.
inline constexpr int kMaxNesting = 32;
// Vocabulary ids may leave at most this many unused ids above the number of entries (real files are dense;
// a sparse id would otherwise size the id -> token table).
inline constexpr int64_t kMaxIdSlack = int64_t{1} << 20;

// Reads a {"token": id} vocabulary into `by_token` and the dense id -> token table (`has_id` marks the ids
// in use). Ids must lie below entries + kMaxIdSlack; `model` names the model in errors ("BPE", "WordPiece").
template <typename Map>
void load_vocab(const nlohmann::json& vocab, const char* model, Map& by_token, std::vector<std::string>& id_to_token,
                std::vector<bool>& has_id) {
  check(vocab.is_object(), "tokenizer", std::string(model) + " 'vocab' must be an object");
  by_token.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    if (id < 0 || id >= static_cast<int64_t>(vocab.size()) + kMaxIdSlack)
      throw Error("tokenizer", "id " + std::to_string(id) + " of '" + it.key() + "' is out of range for a " + model +
                                   " vocab of " + std::to_string(vocab.size()) + " entries");
    by_token.emplace(it.key(), id);
    if (static_cast<size_t>(id) >= id_to_token.size()) {
      id_to_token.resize(static_cast<size_t>(id) + 1);
      has_id.resize(static_cast<size_t>(id) + 1, false);
    }
    id_to_token[static_cast<size_t>(id)] = it.key();
    has_id[static_cast<size_t>(id)] = true;
  }
}

// Counts the component factories on the stack of this thread; throws past kMaxNesting.
class NestingGuard {
 public:
  NestingGuard() {
    if (++depth() > kMaxNesting) {
      --depth();
      throw Error("tokenizer", "components are nested more than 32 deep");
    }
  }
  ~NestingGuard() { --depth(); }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};

// Normalizers and decoders may grow a text at most to this size (HF has no limit; real ones grow it a few
// times at most, while a chain of Replace steps can grow it exponentially).
inline void check_growth(size_t input_bytes, size_t output_bytes) {
  if (output_bytes > 64 * input_bytes + (size_t{1} << 20))
    throw Error("tokenizer", "a normalizer or decoder grew the text more than 64-fold");
}

}  // namespace bunsen::text::json_util
