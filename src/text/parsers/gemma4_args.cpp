// Recursive-descent reader for Gemma 4's tool-call argument syntax (see gemma4_args.h for the grammar
// and its source). Not JSON: strings are delimited by the <|"|> token and keys are bare.
// Invariant: recursion depth <= kMaxDepth, so hostile nesting cannot overflow the stack.
#include "text/parsers/gemma4_args.h"

#include <string>

namespace bunsen::text::parsers {
namespace {

constexpr int kMaxDepth = 64;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  void ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool at_end() const { return i_ == s_.size(); }
  bool eat(std::string_view lit) {
    if (s_.substr(i_, lit.size()) != lit) return false;
    i_ += lit.size();
    return true;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }

  bool quoted(std::string& out) {
    if (!eat(kGemmaQuote)) return false;
    size_t e = s_.find(kGemmaQuote, i_);
    if (e == std::string_view::npos) return false;
    out.assign(s_.substr(i_, e - i_));
    i_ = e + kGemmaQuote.size();
    return true;
  }

  bool value(OrderedJson& out, int depth) {
    if (depth > kMaxDepth) return false;
    ws();
    if (s_.substr(i_, kGemmaQuote.size()) == kGemmaQuote) {
      std::string str;
      if (!quoted(str)) return false;
      out = std::move(str);
      return true;
    }
    if (peek('{')) return object(out, depth + 1);
    if (peek('[')) return array(out, depth + 1);
    return bare(out);
  }

  bool object(OrderedJson& out, int depth) {
    if (!eat("{")) return false;
    out = OrderedJson::object();
    for (;;) {
      ws();
      if (eat("}")) return true;
      std::string k;
      if (!key(k)) return false;
      ws();
      if (!eat(":")) return false;
      OrderedJson v;
      if (!value(v, depth)) return false;
      out[k] = std::move(v);
      ws();
      if (eat(",")) continue;
      if (eat("}")) return true;
      return false;
    }
  }

  bool array(OrderedJson& out, int depth) {
    if (!eat("[")) return false;
    out = OrderedJson::array();
    for (;;) {
      ws();
      if (eat("]")) return true;
      OrderedJson v;
      if (!value(v, depth)) return false;
      out.push_back(std::move(v));
      ws();
      if (eat(",")) continue;
      if (eat("]")) return true;
      return false;
    }
  }

  bool key(std::string& out) {
    if (s_.substr(i_, kGemmaQuote.size()) == kGemmaQuote) return quoted(out);
    size_t b = i_;
    while (i_ < s_.size() && s_[i_] != ':' && !is_ws(s_[i_])) {
      if (std::string_view("{}[],<>\"").find(s_[i_]) != std::string_view::npos) return false;
      ++i_;
    }
    out.assign(s_.substr(b, i_ - b));
    return !out.empty();
  }

  // A bare token up to , } ] (trimmed): true / false / null / a JSON number / else the text.
  bool bare(OrderedJson& out) {
    size_t b = i_;
    while (i_ < s_.size() && std::string_view(",}]").find(s_[i_]) == std::string_view::npos) {
      if (std::string_view("{[<").find(s_[i_]) != std::string_view::npos) return false;
      ++i_;
    }
    std::string_view tok = s_.substr(b, i_ - b);
    while (!tok.empty() && is_ws(tok.back())) tok.remove_suffix(1);
    if (tok.empty()) return false;
    if (tok == "true" || tok == "false") {
      out = tok == "true";
      return true;
    }
    if (tok == "null") {
      out = nullptr;
      return true;
    }
    OrderedJson num = OrderedJson::parse(tok.data(), tok.data() + tok.size(), nullptr, false);
    out = num.is_number() ? num : OrderedJson(std::string(tok));
    return true;
  }

  size_t pos() const { return i_; }
  void set_pos(size_t p) { i_ = p; }
  std::string_view rest() const { return s_.substr(i_); }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<OrderedJson> parse_gemma4_value(std::string_view s) {
  Reader r(s);
  OrderedJson v;
  if (!r.value(v, 0)) return std::nullopt;
  r.ws();
  if (!r.at_end()) return std::nullopt;
  return v;
}

std::optional<ToolDraft> parse_gemma4_call(std::string_view payload) {
  Reader r(payload);
  r.ws();
  if (!r.eat("call:")) return std::nullopt;
  std::string_view rest = r.rest();
  size_t brace = rest.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  std::string_view name = rest.substr(0, brace);
  while (!name.empty() && is_ws(name.back())) name.remove_suffix(1);
  if (name.empty() || name.find_first_of(" \t\n\r{}[],:<>\"") != std::string_view::npos) return std::nullopt;
  r.set_pos(r.pos() + brace);
  OrderedJson args;
  if (!r.object(args, 1)) return std::nullopt;
  r.ws();
  if (!r.at_end()) return std::nullopt;
  return ToolDraft{std::string(name), dump_json(args)};
}

BodyParser gemma4_body() {
  return [](std::string_view inner) -> std::optional<std::vector<ToolDraft>> {
    std::optional<ToolDraft> d = parse_gemma4_call(inner);
    if (!d) return std::nullopt;
    return std::vector<ToolDraft>{std::move(*d)};
  };
}

}  // namespace bunsen::text::parsers
