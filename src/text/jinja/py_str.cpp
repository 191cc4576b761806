// Python str semantics over UTF-8 (see py_str.h). Case mapping: utf8proc's simple mappings plus the
// unconditional SpecialCasing entries that change length (ß, ﬀ..ﬆ, İ); Greek final-sigma context is not
// applied by lower() (a documented difference from CPython).
#include "text/jinja/py_str.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/status.h"

namespace bunsen::text::jinja::py {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0.
size_t seq_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t n = s.size() - i;
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (b(1) & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 3 || (b(1) & 0xC0) != 0x80 || (b(2) & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;
    if (c == 0xED && b(1) >= 0xA0) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 4 || (b(1) & 0xC0) != 0x80 || (b(2) & 0xC0) != 0x80 || (b(3) & 0xC0) != 0x80) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;
    if (c == 0xF4 && b(1) >= 0x90) return 0;
    return 4;
  }
  return 0;
}

utf8proc_category_t category(char32_t c) {
  return c > 0x10FFFF ? UTF8PROC_CATEGORY_CN : utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_cased(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

// Full upper/lower/title mapping of one code point, appended to out.
enum class Case { kUpper, kLower, kTitle };

void map_case(char32_t c, Case mode, std::u32string& out) {
  if (mode != Case::kLower) {
    const char* special = nullptr;
    switch (c) {
      case 0xDF: special = mode == Case::kUpper ? "SS" : "Ss"; break;
      case 0xFB00: special = mode == Case::kUpper ? "FF" : "Ff"; break;
      case 0xFB01: special = mode == Case::kUpper ? "FI" : "Fi"; break;
      case 0xFB02: special = mode == Case::kUpper ? "FL" : "Fl"; break;
      case 0xFB03: special = mode == Case::kUpper ? "FFI" : "Ffi"; break;
      case 0xFB04: special = mode == Case::kUpper ? "FFL" : "Ffl"; break;
      case 0xFB05: case 0xFB06: special = mode == Case::kUpper ? "ST" : "St"; break;
      default: break;
    }
    if (special) {
      for (const char* p = special; *p; ++p) out.push_back(static_cast<char32_t>(*p));
      return;
    }
  } else if (c == 0x130) {  // İ -> i + combining dot above
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  if (c > 0x10FFFF) {
    out.push_back(c);
    return;
  }
  const auto ci = static_cast<utf8proc_int32_t>(c);
  const utf8proc_int32_t m = mode == Case::kUpper ? utf8proc_toupper(ci)
                           : mode == Case::kLower ? utf8proc_tolower(ci) : utf8proc_totitle(ci);
  out.push_back(static_cast<char32_t>(m));
}

std::string map_all(std::string_view s, Case mode) {
  std::u32string out;
  for (char32_t c : decode(s)) map_case(c, mode, out);
  return encode(out);
}

bool in_set(char32_t c, const std::u32string* set) {
  return set ? set->find(c) != std::u32string::npos : is_space(c);
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = seq_len(s, i);
    if (n == 0) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    const auto b0 = static_cast<unsigned char>(s[i]);
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0, i = 0;
  while (i < s.size()) {
    const size_t k = seq_len(s, i);
    i += k ? k : 1;
    ++n;
  }
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return (c >= 0x0A && c <= 0x0D) || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool is_alnum(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_printable(char32_t c) {
  if (c == U' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string upper(std::string_view s) { return map_all(s, Case::kUpper); }
std::string lower(std::string_view s) { return map_all(s, Case::kLower); }

std::string capitalize(std::string_view s) {
  std::u32string in = decode(s), out;
  for (size_t i = 0; i < in.size(); ++i) map_case(in[i], i == 0 ? Case::kTitle : Case::kLower, out);
  return encode(out);
}

std::string title(std::string_view s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : decode(s)) {
    map_case(c, prev_cased ? Case::kLower : Case::kTitle, out);
    prev_cased = is_cased(c);
  }
  return encode(out);
}

std::string swapcase(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) {
    auto k = category(c);
    if (k == UTF8PROC_CATEGORY_LU) map_case(c, Case::kLower, out);
    else if (k == UTF8PROC_CATEGORY_LL) map_case(c, Case::kUpper, out);
    else out.push_back(c);
  }
  return encode(out);
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    auto k = category(c);
    if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
    if (k == UTF8PROC_CATEGORY_LL) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    auto k = category(c);
    if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return false;
    if (k == UTF8PROC_CATEGORY_LU) cased = true;
  }
  return cased;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string set;
  if (chars) set = decode(*chars);
  const std::u32string* setp = chars ? &set : nullptr;
  std::u32string u = decode(s);
  size_t b = 0, e = u.size();
  if (left) while (b < e && in_set(u[b], setp)) ++b;
  if (right) while (e > b && in_set(u[e - 1], setp)) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    bunsen::check(!sep->empty(), "template", "ValueError: empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    bunsen::check(!sep->empty(), "template", "ValueError: empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = decode(s);
  size_t e = u.size();
  while (true) {
    while (e > 0 && is_space(u[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(0, e)));
      break;
    }
    size_t b = e;
    while (b > 0 && !is_space(u[b - 1])) --b;
    out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = decode(s);
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    while (j < u.size() && !is_linebreak(u[j])) ++j;
    size_t eol = j;
    if (j < u.size()) j += (u[j] == U'\r' && j + 1 < u.size() && u[j + 1] == U'\n') ? 2 : 1;
    out.push_back(encode(std::u32string_view(u).substr(i, (keepends ? j : eol) - i)));
    i = j;
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count) {
  std::string out;
  if (old_s.empty()) {
    std::u32string u = decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_s);
        ++done;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_s);
    pos = hit + old_s.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, hit)));
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  bunsen::check(step != 0, "template", "ValueError: slice step cannot be zero");
  std::u32string u = decode(s);
  const int64_t n = static_cast<int64_t>(u.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
  std::u32string out;
  for (int64_t i = b; step > 0 ? i < e : i > e;) {
    out.push_back(u[static_cast<size_t>(i)]);
    if (step > 0 ? step >= e - i : step <= e - i) break;  // no int64 overflow for huge steps
    i += step;
  }
  return encode(out);
}

std::string repr(std::string_view s) {
  std::u32string u = decode(s);
  const bool has_single = u.find(U'\'') != std::u32string::npos;
  const bool has_double = u.find(U'"') != std::u32string::npos;
  const char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out(1, static_cast<char>(quote));
  char buf[16];
  for (char32_t c : u) {
    if (c == quote || c == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F || is_printable(c)) {
      append_utf8(out, c);
    } else {
      const char* fmt = c <= 0xFF ? "\\x%02x" : c <= 0xFFFF ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(static_cast<char>(quote));
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace bunsen::text::jinja::py
