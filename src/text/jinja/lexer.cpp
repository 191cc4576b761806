// Jinja2 tokenizer (see lexer.h). Mirrors jinja2.lexer.Lexer.tokeniter for the root, comment, block,
// variable and raw states; the regular expressions of jinja2 are hand-coded here, one function each.
// Not the parser. Invariant: each step consumes input, so tokenizing is linear in the source.
#include "text/jinja/lexer.h"

#include <utf8proc.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "core/status.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

[[noreturn]] void syntax_error(const std::string& msg, int line) {
  throw Error("template", strfmt("TemplateSyntaxError: %s (line %d)", msg.c_str(), line));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// \d+(_\d+)* at p; returns the end or npos.
size_t match_digits(std::string_view s, size_t p) {
  if (p >= s.size() || !is_digit(s[p])) return std::string_view::npos;
  while (p < s.size() && is_digit(s[p])) ++p;
  while (p + 1 < s.size() && s[p] == '_' && is_digit(s[p + 1])) {
    ++p;
    while (p < s.size() && is_digit(s[p])) ++p;
  }
  return p;
}

size_t match_exponent(std::string_view s, size_t p) {
  if (p >= s.size() || (s[p] != 'e' && s[p] != 'E')) return std::string_view::npos;
  ++p;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
  return match_digits(s, p);
}

// jinja2 float_re: (?<!\.)D((\.D)?eD|\.D)
size_t match_float(std::string_view s, size_t p) {
  if (p > 0 && s[p - 1] == '.') return std::string_view::npos;
  const size_t d = match_digits(s, p);
  if (d == std::string_view::npos) return d;
  size_t frac = std::string_view::npos;
  if (d < s.size() && s[d] == '.') frac = match_digits(s, d + 1);
  if (frac != std::string_view::npos) {
    const size_t e = match_exponent(s, frac);
    return e != std::string_view::npos ? e : frac;
  }
  return match_exponent(s, d);
}

// jinja2 integer_re: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)*
size_t match_integer(std::string_view s, size_t p, int& base) {
  if (p >= s.size() || !is_digit(s[p])) return std::string_view::npos;
  auto run = [&](size_t q, auto ok) {
    size_t start = q;
    while (q < s.size()) {
      if (ok(s[q])) ++q;
      else if (s[q] == '_' && q + 1 < s.size() && ok(s[q + 1])) q += 2;
      else break;
    }
    return q == start ? std::string_view::npos : q;
  };
  if (s[p] == '0' && p + 1 < s.size()) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[p + 1])));
    size_t e = std::string_view::npos;
    if (c == 'b') e = run(p + 2, [](char x) { return x == '0' || x == '1'; }), base = 2;
    else if (c == 'o') e = run(p + 2, [](char x) { return x >= '0' && x <= '7'; }), base = 8;
    else if (c == 'x') e = run(p + 2, [](char x) { return std::isxdigit(static_cast<unsigned char>(x)) != 0; }), base = 16;
    if (e != std::string_view::npos) return e;
  }
  base = 10;
  if (s[p] == '0') {
    size_t q = p + 1;
    while (q < s.size() && (s[q] == '0' || (s[q] == '_' && q + 1 < s.size() && s[q + 1] == '0'))) q += s[q] == '_' ? 2 : 1;
    return q;
  }
  return run(p, is_digit);
}

bool name_char(char32_t c, bool first) {
  if (c < 0x80) return std::isalpha(static_cast<int>(c)) || c == '_' || (!first && is_digit(static_cast<char>(c)));
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
      return true;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return !first;
    default:
      return false;
  }
}

// Length in bytes of the code point at s[p] (1 for invalid bytes) and its value.
size_t next_cp(std::string_view s, size_t p, char32_t& cp) {
  const auto b = static_cast<unsigned char>(s[p]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (p + n > s.size()) n = 1;
  std::u32string u = py::decode(s.substr(p, n));
  if (u.size() != 1) n = 1, u = py::decode(s.substr(p, 1));
  cp = u[0];
  return n;
}

size_t match_name(std::string_view s, size_t p) {
  char32_t c;
  size_t q = p;
  bool first = true;
  while (q < s.size()) {
    const size_t n = next_cp(s, q, c);
    if (!name_char(c, first)) break;
    q += n;
    first = false;
  }
  return q == p ? std::string_view::npos : q;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

// value_str[1:-1].encode("ascii", "backslashreplace").decode("unicode-escape")
std::string decode_string_literal(std::string_view body, int line) {
  std::string ascii;
  char buf[16];
  for (char32_t c : py::decode(body)) {
    if (c < 0x80) {
      ascii.push_back(static_cast<char>(c));
    } else {
      std::snprintf(buf, sizeof buf, c <= 0xFF ? "\\x%02x" : c <= 0xFFFF ? "\\u%04x" : "\\U%08x", static_cast<unsigned>(c));
      ascii += buf;
    }
  }
  std::string out;
  for (size_t i = 0; i < ascii.size(); ++i) {
    if (ascii[i] != '\\') {
      out.push_back(ascii[i]);
      continue;
    }
    if (++i >= ascii.size()) syntax_error("\\ at end of string", line);
    const char c = ascii[i];
    switch (c) {
      case '\n': break;
      case '\\': case '\'': case '"': out.push_back(c); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          const int h = i + 1 < ascii.size() ? hex_value(ascii[i + 1]) : -1;
          if (h < 0) syntax_error(strfmt("truncated \\%c escape", c), line);
          v = v * 16 + static_cast<uint32_t>(h);
          ++i;
        }
        if (v > 0x10FFFF) syntax_error("illegal Unicode character", line);
        py::append_utf8(out, (v >= 0xD800 && v <= 0xDFFF) ? 0xFFFD : v);
        break;
      }
      case 'N': syntax_error("\\N{...} escapes are not supported", line);
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(ascii[++i] - '0');
          py::append_utf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

// '...' or "..." with backslash escapes; returns the end or npos when unterminated.
size_t match_string(std::string_view s, size_t p) {
  const char q = s[p];
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == q) return i + 1;
  }
  return std::string_view::npos;
}

constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
constexpr std::string_view kOps1 = "+-/*%~[](){}><=.:|,;";

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}
  std::vector<Token> run();

 private:
  void root();
  void emit(Tok t, std::string text = {}) { out_.push_back(Token{t, std::move(text), 0, 0, line_}); }
  void advance_to(size_t p) {
    for (size_t i = pos_; i < p; ++i) line_ += s_[i] == '\n';
    line_starting_ = p > pos_ ? s_[p - 1] == '\n' : line_starting_;
    pos_ = p;
  }
  size_t skip_ws(size_t p) const;
  void strip_data(std::string& text, char sign, bool is_var) const;
  bool try_raw(size_t p, char sign, std::string data);
  void comment();
  void inside(bool block);
  bool tag_token(std::vector<char>& stack);

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

size_t Lexer::skip_ws(size_t p) const {
  char32_t c;
  while (p < s_.size()) {
    const size_t n = next_cp(s_, p, c);
    if (!py::is_space(c)) break;
    p += n;
  }
  return p;
}

void Lexer::strip_data(std::string& text, char sign, bool is_var) const {
  if (sign == '-') {
    text = py::strip(text, std::nullopt, false, true);
  } else if (sign != '+' && !is_var) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
  }
}

std::vector<Token> Lexer::run() {
  while (pos_ < s_.size()) root();
  emit(Tok::kEof);
  return std::move(out_);
}

void Lexer::root() {
  size_t p = pos_;
  while (true) {
    p = s_.find('{', p);
    if (p == std::string::npos || p + 1 >= s_.size()) {
      emit(Tok::kData, s_.substr(pos_));
      advance_to(s_.size());
      return;
    }
    const char k = s_[p + 1];
    if (k == '{' || k == '%' || k == '#') break;
    ++p;
  }
  const char kind = s_[p + 1];
  const char sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
  std::string data = s_.substr(pos_, p - pos_);
  if (kind == '%' && try_raw(p, sign, data)) return;
  strip_data(data, sign, kind == '{');
  if (!data.empty()) emit(Tok::kData, std::move(data));
  advance_to(p + 2 + (sign ? 1 : 0));
  line_starting_ = false;
  if (kind == '#') return comment();
  emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin);
  inside(kind == '%');
}

// {%[-+]?\s*raw\s*(-%}\s*|%}) ... {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)
bool Lexer::try_raw(size_t p, char sign, std::string data) {
  size_t q = skip_ws(p + 2 + (sign ? 1 : 0));
  if (s_.compare(q, 3, "raw") != 0) return false;
  q = skip_ws(q + 3);
  size_t body;
  if (s_.compare(q, 3, "-%}") == 0) body = skip_ws(q + 3);
  else if (s_.compare(q, 2, "%}") == 0) body = q + 2;
  else return false;
  strip_data(data, sign, false);
  if (!data.empty()) emit(Tok::kData, std::move(data));
  advance_to(body);
  for (size_t e = s_.find("{%", body); e != std::string::npos; e = s_.find("{%", e + 1)) {
    const char esign = e + 2 < s_.size() && (s_[e + 2] == '-' || s_[e + 2] == '+') ? s_[e + 2] : 0;
    size_t r = skip_ws(e + 2 + (esign ? 1 : 0));
    if (s_.compare(r, 6, "endraw") != 0) continue;
    r = skip_ws(r + 6);
    size_t end;
    if (s_.compare(r, 3, "+%}") == 0) end = r + 3;
    else if (s_.compare(r, 3, "-%}") == 0) end = skip_ws(r + 3);
    else if (s_.compare(r, 2, "%}") == 0) end = r + 2 + (r + 2 < s_.size() && s_[r + 2] == '\n');
    else continue;
    std::string text = s_.substr(body, e - body);
    strip_data(text, esign, false);
    if (!text.empty()) emit(Tok::kData, std::move(text));
    advance_to(end);
    return true;
  }
  syntax_error("Missing end of raw directive", line_);
}

void Lexer::comment() {
  const size_t start = pos_;
  const size_t q = s_.find("#}", start);
  if (q == std::string::npos) syntax_error("Missing end of comment tag", line_);
  const char sign = q > start ? s_[q - 1] : 0;
  size_t end = q + 2;
  if (sign == '-') end = skip_ws(end);
  else if (sign != '+' && end < s_.size() && s_[end] == '\n') ++end;
  advance_to(end);
}

void Lexer::inside(bool block) {
  std::vector<char> stack;
  while (pos_ < s_.size()) {
    if (stack.empty()) {
      const std::string_view rest = std::string_view(s_).substr(pos_);
      const char* close = block ? "%}" : "}}";
      if (block && rest.substr(0, 3) == "+%}") {
        advance_to(pos_ + 3);
        return emit(Tok::kBlockEnd);
      }
      if (rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close) {
        advance_to(skip_ws(pos_ + 3));
        return emit(block ? Tok::kBlockEnd : Tok::kVarEnd);
      }
      if (rest.substr(0, 2) == close) {
        advance_to(pos_ + 2 + (block && rest.size() > 2 && rest[2] == '\n'));
        return emit(block ? Tok::kBlockEnd : Tok::kVarEnd);
      }
    }
    if (!tag_token(stack)) syntax_error(strfmt("unexpected char '%c'", s_[pos_]), line_);
  }
}

bool Lexer::tag_token(std::vector<char>& stack) {
  const size_t p = pos_;
  char32_t c;
  next_cp(s_, p, c);
  if (py::is_space(c)) {
    advance_to(skip_ws(p));
    return true;
  }
  int base = 10;
  size_t e = match_float(s_, p);
  if (e != std::string::npos) {
    std::string digits;
    for (size_t i = p; i < e; ++i) if (s_[i] != '_') digits.push_back(s_[i]);
    Token t{Tok::kFloat, {}, 0, 0, line_};
    t.float_value = *py::parse_float(digits);
    out_.push_back(std::move(t));
    advance_to(e);
    return true;
  }
  if ((e = match_integer(s_, p, base)) != std::string::npos) {
    std::string digits;
    for (size_t i = p + (base == 10 ? 0 : 2); i < e; ++i) if (s_[i] != '_') digits.push_back(s_[i]);
    auto v = py::parse_int(digits, base);
    if (!v) syntax_error("invalid integer literal", line_);
    Token t{Tok::kInt, {}, *v, 0, line_};
    out_.push_back(std::move(t));
    advance_to(e);
    return true;
  }
  if ((e = match_name(s_, p)) != std::string::npos) {
    emit(Tok::kName, s_.substr(p, e - p));
    advance_to(e);
    return true;
  }
  if (s_[p] == '\'' || s_[p] == '"') {
    e = match_string(s_, p);
    if (e == std::string::npos) syntax_error("unexpected end of string", line_);
    emit(Tok::kString, decode_string_literal(std::string_view(s_).substr(p + 1, e - p - 2), line_));
    advance_to(e);
    return true;
  }
  for (std::string_view op : kOps2)
    if (s_.compare(p, 2, op) == 0) {
      emit(Tok::kOp, std::string(op));
      advance_to(p + 2);
      return true;
    }
  if (kOps1.find(s_[p]) == std::string_view::npos) return false;
  const char op = s_[p];
  if (op == '(' || op == '[' || op == '{') {
    stack.push_back(op == '(' ? ')' : op == '[' ? ']' : '}');
  } else if (op == ')' || op == ']' || op == '}') {
    if (stack.empty()) syntax_error(strfmt("unexpected '%c'", op), line_);
    if (stack.back() != op) syntax_error(strfmt("unexpected '%c', expected '%c'", op, stack.back()), line_);
    stack.pop_back();
  }
  emit(Tok::kOp, std::string(1, op));
  advance_to(p + 1);
  return true;
}

// jinja2: newlines normalised to \n and one trailing newline dropped (keep_trailing_newline=False).
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize(source)).run(); }

}  // namespace bunsen::text::jinja
