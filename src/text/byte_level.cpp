// Tables for the GPT-2 byte <-> unicode mapping, built once.
// Not the pre-tokenizer or decoder (pre_tokenizer.cpp, decoder.cpp). Invariant: the mapping is a bijection
// between the 256 bytes and 256 code points below U+0144.
#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace bunsen::text::byte_level {
namespace {

constexpr int kMaxCodePoint = 0x144;  // 256 + 68 remapped bytes

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, kMaxCodePoint> to_byte;
  Tables() {
    to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      utf8::append(cp, to_unicode[b]);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) {
  return tables().to_unicode[b];
}

int unicode_to_byte(char32_t cp) {
  return cp < kMaxCodePoint ? tables().to_byte[cp] : -1;
}

void encode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (char c : bytes) out += t.to_unicode[static_cast<uint8_t>(c)];
}

bool decode(std::string_view token, std::string& out) {
  size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    size_t n = utf8::valid_sequence_length(token.substr(i));
    int b = n ? unicode_to_byte(utf8::decode(token.data() + i, n)) : -1;
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(b);
    i += n;
  }
  return true;
}

}  // namespace bunsen::text::byte_level
