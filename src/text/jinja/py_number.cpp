// Python numbers as text (see py_str.h): repr(float) (shortest round-trip digits, fixed notation for
// exponents in [-4, 16), else d.ddde+XX) and int()/float() parsing of strings (whitespace, signs,
// underscores between digits, base prefixes, inf/nan). Not formatting with specs (format.cpp).
// Invariant: parse_int never wraps: values outside int64 raise Error (Python would make a big int).
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/status.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja::py {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci = [-]D[.DDD]e(+|-)XX
  const bool neg = sci[0] == '-';
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(neg ? 1 : 0, epos - (neg ? 1 : 0));
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant) if (c != '.') digits.push_back(c);
  const int decpt = exp + 1;  // position of the decimal point relative to the digits
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + buf;
}

namespace {

// Digits with single underscores allowed between digits (Python's numeric literal rule for int()/float()).
bool strip_underscores(std::string_view in, std::string& out, bool (*is_digit)(char)) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '_') {
      if (i == 0 || i + 1 == in.size() || !is_digit(in[i - 1]) || !is_digit(in[i + 1])) return false;
      continue;
    }
    out.push_back(in[i]);
  }
  return true;
}

std::string_view trim_space(std::string_view s, std::u32string& scratch, std::string& keep) {
  scratch = decode(s);
  size_t b = 0, e = scratch.size();
  while (b < e && is_space(scratch[b])) ++b;
  while (e > b && is_space(scratch[e - 1])) --e;
  keep = encode(std::u32string_view(scratch).substr(b, e - b));
  return keep;
}

}  // namespace

std::optional<int64_t> parse_int(std::string_view s, int base) {
  std::u32string scratch;
  std::string keep;
  std::string_view t = trim_space(s, scratch, keep);
  bool neg = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    t.remove_prefix(1);
  }
  auto prefix_base = [&](char c) { c = static_cast<char>(std::tolower(c)); return c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0; };
  if (t.size() >= 2 && t[0] == '0' && prefix_base(t[1]) && (base == 0 || base == prefix_base(t[1]))) {
    base = prefix_base(t[1]);
    t.remove_prefix(2);
    if (!t.empty() && t[0] == '_') t.remove_prefix(1);
  } else if (base == 0) {
    base = 10;
    if (t.size() > 1 && t[0] == '0' && t.find_first_not_of("0_") != std::string_view::npos) return std::nullopt;
  }
  if (base < 2 || base > 36) throw Error("template", "ValueError: int() base must be >= 2 and <= 36");
  std::string digits;
  if (t.empty() || !strip_underscores(t, digits, [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }))
    return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) {
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
          : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, static_cast<uint64_t>(base), &v) || __builtin_add_overflow(v, static_cast<uint64_t>(d), &v) ||
        v > static_cast<uint64_t>(INT64_MAX) + (neg ? 1 : 0))
      throw Error("template", "integer too large (bunsen's templates use 64-bit integers)");
  }
  return neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

std::optional<double> parse_float(std::string_view s) {
  std::u32string scratch;
  std::string keep;
  std::string_view t = trim_space(s, scratch, keep);
  bool neg = false;
  std::string_view body = t;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  std::string low(body);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (low == "inf" || low == "infinity") return neg ? -INFINITY : INFINITY;
  if (low == "nan") return neg ? -NAN : NAN;
  // digits [. digits] [e [+-] digits], at least one digit in the mantissa
  std::string clean;
  if (!strip_underscores(body, clean, [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))
    return std::nullopt;
  size_t i = 0, mant = 0;
  while (i < clean.size() && std::isdigit(static_cast<unsigned char>(clean[i]))) ++i, ++mant;
  if (i < clean.size() && clean[i] == '.') {
    ++i;
    while (i < clean.size() && std::isdigit(static_cast<unsigned char>(clean[i]))) ++i, ++mant;
  }
  if (mant == 0) return std::nullopt;
  if (i < clean.size() && (clean[i] == 'e' || clean[i] == 'E')) {
    ++i;
    if (i < clean.size() && (clean[i] == '+' || clean[i] == '-')) ++i;
    size_t d = 0;
    while (i < clean.size() && std::isdigit(static_cast<unsigned char>(clean[i]))) ++i, ++d;
    if (d == 0) return std::nullopt;
  }
  if (i != clean.size()) return std::nullopt;
  double v = 0;
  auto r = std::from_chars(clean.data(), clean.data() + clean.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    // from_chars reports overflow/underflow; Python gives inf or 0.0 (or the denormal it parsed).
    v = std::strtod(clean.c_str(), nullptr);
  }
  return neg ? -v : v;
}

}  // namespace bunsen::text::jinja::py
