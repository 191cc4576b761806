// HfTokenizer: the Tokenizer behind load_tokenizer(): tokenizer.json's pipeline (added tokens ->
// normalizer -> added tokens on normalized text -> pre-tokenizer -> model -> post-processor) plus
// tokenizer_config.json (bos/eos, add_bos_token/add_eos_token). Not chat templates. Byte-level BPE runs in
// raw-byte mode (model.h) and pieces stream from the pre-tokenizer as views, without copies.
// Invariants: input is sanitised to valid UTF-8 first (policy in tokenizer.h); every load error names the
// file it came from; encode/decode are const and thread-safe; added-token ids are assigned as HF assigns
// them; decode passes every kept token (added ones too) through the decoder, as HF tokenizers >= 0.19.1.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/status.h"
#include "text/added_vocab.h"
#include "text/decoder.h"
#include "text/json_util.h"
#include "text/model.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

using nlohmann::json;

// tokenizer_config.json: special tokens may be strings, {"content": ...} objects or null.
std::optional<std::string> token_field(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  throw Error("tokenizer", std::string("'") + key + "' must be a string or an object with 'content'");
}

// HF ignores the ids written in "added_tokens": a token whose content the model knows gets the model's id,
// any other the next free id (the model's vocab size, then one past the largest added id), in file order;
// a repeated content keeps its first id. Well-formed files agree with this; hand-written ones may not.
void assign_added_ids(std::vector<AddedToken>& tokens, const Model& model) {
  std::unordered_map<std::string, int32_t> seen;
  std::optional<int32_t> max_added;
  const auto vocab = static_cast<int32_t>(model.vocab_size());
  std::vector<AddedToken> out;
  for (AddedToken& t : tokens) {
    if (seen.count(t.content)) continue;
    if (auto id = model.token_to_id(t.content))
      t.id = *id;
    else
      t.id = !max_added ? vocab : (*max_added >= vocab || vocab == 0 ? *max_added + 1 : vocab);
    max_added = std::max(max_added.value_or(t.id), t.id);
    seen.emplace(t.content, t.id);
    out.push_back(std::move(t));
  }
  tokens = std::move(out);
}

std::vector<AddedToken> parse_added_tokens(const json& j) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  for (const auto& t : j) {
    AddedToken a;
    a.id = t.at("id").get<int32_t>();
    a.content = t.at("content").get<std::string>();
    a.special = json_util::get_bool(t, "special", false);
    a.lstrip = json_util::get_bool(t, "lstrip", false);
    a.rstrip = json_util::get_bool(t, "rstrip", false);
    a.single_word = json_util::get_bool(t, "single_word", false);
    a.normalized = json_util::get_bool(t, "normalized", !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const json& tok);
  void apply_config(const json& cfg);
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  std::string token_bytes(int32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (auto id = added_.by_content(token)) return id;
    return model_->token_to_id(token);
  }
  bool is_special(int32_t id) const override {
    const AddedToken* t = added_.by_id(id);
    return t && t->special;
  }
  std::vector<int32_t> eos_ids() const override {
    return eos_ ? std::vector<int32_t>{*eos_} : std::vector<int32_t>{};
  }
  std::optional<int32_t> bos_id() const override { return bos_; }
  bool holds_back(int32_t id) const override {
    if (!decoder_ || added_.by_id(id)) return false;
    const std::string* tok = model_->id_to_token(id);
    return tok && decoder_->holds_back(*tok);
  }

 private:
  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
  void encode_pieces(std::string text, bool at_start, std::vector<int32_t>& ids) const;
  std::optional<int32_t> config_token(const json& cfg, const char* key) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  std::optional<int32_t> bos_, eos_;
  bool add_bos_ = false, add_eos_ = false;
  int64_t vocab_size_ = 0;
};

std::optional<int32_t> HfTokenizer::config_token(const json& cfg, const char* key) const {
  auto name = token_field(cfg, key);
  if (!name) return std::nullopt;
  auto id = token_id(*name);
  check(id.has_value(), "tokenizer", std::string(key) + " '" + *name + "' is not in the vocabulary");
  return id;
}

HfTokenizer::HfTokenizer(const json& tok) {
  check(tok.is_object(), "tokenizer", "top level must be a JSON object");
  check(tok.contains("model"), "tokenizer", "missing 'model'");
  normalizer_ = make_normalizer(json_util::get_or_null(tok, "normalizer"));
  model_ = make_model(tok.at("model"));
  const json& pre = json_util::get_or_null(tok, "pre_tokenizer");
  PreTokenizerOptions pre_opt;  // byte-level BPE: fold the alphabet mapping into the vocabulary once
  pre_opt.skip_final_byte_mapping = ends_with_byte_level(pre) && model_->use_raw_bytes();
  pre_tokenizer_ = make_pre_tokenizer(pre, pre_opt);
  post_processor_ = make_post_processor(json_util::get_or_null(tok, "post_processor"));
  decoder_ = make_decoder(json_util::get_or_null(tok, "decoder"));
  std::vector<AddedToken> added = parse_added_tokens(json_util::get_or_null(tok, "added_tokens"));
  assign_added_ids(added, *model_);
  added_.build(std::move(added), normalizer_.get());
  vocab_size_ = model_->vocab_size();
  for (const AddedToken& t : added_.tokens()) vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
}

void HfTokenizer::apply_config(const json& cfg) {
  if (cfg.is_null()) return;
  check(cfg.is_object(), "tokenizer", "top level must be a JSON object");
  bos_ = config_token(cfg, "bos_token");
  eos_ = config_token(cfg, "eos_token");
  add_bos_ = json_util::get_bool(cfg, "add_bos_token", false);
  add_eos_ = json_util::get_bool(cfg, "add_eos_token", false);
}

void HfTokenizer::encode_pieces(std::string text, bool at_start, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    model_->tokenize(text, ids);
    return;
  }
  pre_tokenizer_->for_each_piece(text, at_start,
                                 [&](std::string_view piece, bool) { model_->tokenize(piece, ids); });
}

void HfTokenizer::encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  std::string norm(text);
  if (normalizer_) normalizer_->normalize(norm);
  if (!added_.has_normalized_tokens()) {
    encode_pieces(std::move(norm), at_start, ids);
    return;
  }
  std::vector<AddedVocabulary::Segment> segs;
  added_.split(norm, /*normalized_pass=*/true, segs);
  for (const auto& s : segs) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      encode_pieces(norm.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, ids);
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view input, bool add_special) const {
  std::string sanitized;
  std::string_view text = input;
  if (!utf8::is_valid(input)) {
    sanitized = utf8::sanitize(input);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  std::vector<AddedVocabulary::Segment> segs;
  added_.split(text, /*normalized_pass=*/false, segs);
  for (const auto& s : segs) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      encode_plain(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
  }
  if (add_special) {
    if (post_processor_) post_processor_->add_special(ids);
    if (add_bos_ && bos_ && (ids.empty() || ids.front() != *bos_)) ids.insert(ids.begin(), *bos_);
    if (add_eos_ && eos_ && (ids.empty() || ids.back() != *eos_)) ids.push_back(*eos_);
  }
  return ids;
}

// HF's TokenizerImpl::decode: ids -> token strings (added vocabulary first), special ones dropped when
// skipping, then the decoder chain (or a space join without decoder); unknown ids decode to nothing.
std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* tok = nullptr;
    if (const AddedToken* t = added_.by_id(id))
      tok = &t->decoded;
    else
      tok = model_->id_to_token(id);
    if (!tok) continue;
    if (skip_special && added_.is_special_content(*tok)) continue;
    tokens.push_back(*tok);
  }
  if (decoder_) return decode_tokens(*decoder_, std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out.append(i ? " " : "").append(tokens[i]);
  return utf8::is_valid(out) ? out : utf8::sanitize(out);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  if (const AddedToken* t = added_.by_id(id)) return t->content;
  const std::string* tok = model_->id_to_token(id);
  if (!tok) return {};
  return decoder_ ? decoder_->token_bytes(*tok) : *tok;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("tokenizer", "cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error("tokenizer", origin + ": invalid JSON: " + e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_from_memory(std::string_view tokenizer_json,
                                                      std::string_view config_json,
                                                      const std::string& origin) {
  json tok = parse_json(tokenizer_json, origin + "/tokenizer.json");
  json cfg = config_json.empty() ? json() : parse_json(config_json, origin + "/tokenizer_config.json");
  std::unique_ptr<HfTokenizer> t;
  std::string file = origin + "/tokenizer.json";
  try {
    t = std::make_unique<HfTokenizer>(tok);
    file = origin + "/tokenizer_config.json";
    t->apply_config(cfg);
  } catch (const Error& e) {
    throw Error("tokenizer", file + ": " + e.message());
  } catch (const json::exception& e) {
    throw Error("tokenizer", file + ": " + e.what());
  }
  return t;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  std::string tok = read_file(dir + "/tokenizer.json");
  std::string cfg;
  std::ifstream probe(dir + "/tokenizer_config.json");
  if (probe) cfg = read_file(dir + "/tokenizer_config.json");
  return load_tokenizer_from_memory(tok, cfg, dir);
}

}  // namespace bunsen::text
