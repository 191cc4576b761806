// The decoders of HF tokenizers' decode chain. ByteLevel joins everything into one lossy UTF-8 string;
// ByteFallback turns runs of <0xNN> tokens into their bytes (a run that is not valid UTF-8 becomes one
// U+FFFD per byte, as HF does); Metaspace/Replace/Strip/WordPiece work token by token; Fuse joins.
// Not the streaming detokenizer (stream_decoder.cpp). Invariant: steps never see invalid UTF-8 except
// ByteLevel's intermediate bytes, which it resolves itself.
#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/json_util.h"
#include "text/regex.h"
#include "text/replace_pattern.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  std::string token_bytes(std::string_view token) const override {
    std::string out;
    if (!byte_level::decode(token, out)) out.assign(token);
    return out;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens)
      if (!byte_level::decode(t, bytes)) bytes.append(t);
    std::string out;
    out.reserve(bytes.size());
    utf8::append_lossy(bytes, out, true);
    tokens.assign(1, std::move(out));
  }
};

// "<0xNN>" -> NN, else -1.
int byte_token(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  std::string token_bytes(std::string_view token) const override {
    int b = byte_token(token);
    return b < 0 ? std::string(token) : std::string(1, static_cast<char>(b));
  }
  bool holds_back(std::string_view token) const override { return byte_token(token) >= 0; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (utf8::is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(utf8::kReplacement);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      int b = byte_token(t);
      if (b >= 0) {
        run += static_cast<char>(b);
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const nlohmann::json& j) : pattern_(j) {}
  std::string token_bytes(std::string_view token) const override { return pattern_.apply(std::string(token)); }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.apply(std::move(t));
  }

 private:
  ReplacePattern pattern_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const nlohmann::json& j)
      : replacement_(json_util::get_string(j, "replacement", "\xE2\x96\x81")) {
    check(!replacement_.empty() && utf8::valid_sequence_length(replacement_) == replacement_.size(),
          "tokenizer", "Metaspace 'replacement' must be one character");
    std::string scheme = json_util::get_string(j, "prepend_scheme");
    if (scheme.empty()) scheme = json_util::get_bool(j, "add_prefix_space", true) ? "always" : "never";
    strip_first_ = scheme != "never";
  }
  std::string token_bytes(std::string_view token) const override { return replace(token, false); }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = replace(tokens[i], i == 0 && strip_first_);
  }

 private:
  // Every replacement character becomes a space, or disappears in the first token (HF drops them all).
  std::string replace(std::string_view t, bool drop) const {
    std::string out;
    out.reserve(t.size());
    for (size_t pos = 0; pos < t.size();) {
      if (!replacement_.empty() && t.compare(pos, replacement_.size(), replacement_) == 0) {
        if (!drop) out += ' ';
        pos += replacement_.size();
      } else {
        out += t[pos++];
      }
    }
    return out;
  }
  std::string replacement_;
  bool strip_first_;
};

class StripDecoder final : public Decoder {
 public:
  explicit StripDecoder(const nlohmann::json& j) : start_(j.value("start", 0)), stop_(j.value("stop", 0)) {
    std::string c = json_util::get_string(j, "content", " ");
    check(utf8::valid_sequence_length(c) == c.size() && !c.empty(), "tokenizer",
          "Strip decoder 'content' must be one character");
    content_ = c;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0; ++i)
        begin += content_.size();
      for (int i = 0; i < stop_ && end >= begin + content_.size() &&
                      t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

std::string cleanup(std::string s);

class WordPieceDecoder final : public Decoder {
 public:
  explicit WordPieceDecoder(const nlohmann::json& j)
      : prefix_(json_util::get_string(j, "prefix", "##")),
        cleanup_(json_util::get_bool(j, "cleanup", true)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t.insert(0, 1, ' ');
      }
      if (cleanup_) t = cleanup(std::move(t));
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// HF's clean_up_tokenization: spaces before punctuation and English contractions.
std::string cleanup(std::string s) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    std::string out;
    size_t prev = 0;
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
      out.append(s, prev, pos - prev).append(to);
      prev = pos + from.size();
    }
    if (prev == 0) continue;
    s = out.append(s, prev, std::string::npos);
  }
  return s;
}

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::string token_bytes(std::string_view token) const override {
    std::string t(token);
    for (const auto& p : parts_) t = p->token_bytes(t);
    return t;
  }
  bool holds_back(std::string_view token) const override {
    for (const auto& p : parts_)
      if (p->holds_back(token)) return true;
    return false;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    size_t input = 0;
    for (const std::string& t : tokens) input += t.size();
    for (const auto& p : parts_) {
      p->decode_chain(tokens);
      size_t now = 0;
      for (const std::string& t : tokens) now += t.size();
      json_util::check_growth(input, now);
    }
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens) {
  decoder.decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return utf8::is_valid(out) ? out : utf8::sanitize(out);
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  json_util::NestingGuard nesting;
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j);
  if (type == "Strip") return std::make_unique<StripDecoder>(j);
  if (type == "WordPiece") return std::make_unique<WordPieceDecoder>(j);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : j.at("decoders")) {
      auto part = make_decoder(d);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  throw Error("tokenizer", "unsupported decoder type '" + type + "'");
}

}  // namespace bunsen::text
