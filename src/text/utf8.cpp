// UTF-8 validation and lossy decoding by maximal subparts (Unicode Table 3-7 ranges).
// Not normalisation. Invariant: append_lossy never emits invalid UTF-8 and consumes every byte when final.
#include "text/utf8.h"

namespace bunsen::text::utf8 {
namespace {

// Expected continuation count and the allowed range of the first continuation byte for a lead byte.
struct Lead {
  int n_cont;  // -1: not a lead byte
  uint8_t lo, hi;
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

enum class Scan { kValid, kInvalid, kTruncated };

// Scans one sequence at s[0]; `len` receives the sequence length (valid) or the maximal subpart length.
Scan scan(std::string_view s, size_t& len) {
  uint8_t b0 = static_cast<uint8_t>(s[0]);
  Lead l = lead_info(b0);
  if (l.n_cont < 0) {
    len = 1;
    return Scan::kInvalid;
  }
  len = 1;
  for (int i = 1; i <= l.n_cont; ++i) {
    if (len >= s.size()) return Scan::kTruncated;
    uint8_t b = static_cast<uint8_t>(s[len]);
    uint8_t lo = i == 1 ? l.lo : 0x80, hi = i == 1 ? l.hi : 0xBF;
    if (b < lo || b > hi) return Scan::kInvalid;
    ++len;
  }
  return Scan::kValid;
}

}  // namespace

size_t valid_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  size_t len = 0;
  return scan(s, len) == Scan::kValid ? len : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t append_lossy(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  while (i < in.size()) {
    size_t run = i;  // copy ASCII runs in one go
    while (run < in.size() && static_cast<uint8_t>(in[run]) < 0x80) ++run;
    out.append(in.data() + i, run - i);
    i = run;
    if (i >= in.size()) break;
    size_t len = 0;
    Scan r = scan(in.substr(i), len);
    if (r == Scan::kValid) {
      out.append(in.data() + i, len);
    } else if (r == Scan::kInvalid || final) {
      out.append(kReplacement);
    } else {
      return i;  // truncated tail, wait for more bytes
    }
    i += len;
  }
  return i;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_lossy(s, out, true);
  return out;
}

char32_t decode(const char* p, size_t len) {
  auto b = [p](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(p[i])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace bunsen::text::utf8
