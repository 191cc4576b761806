// GPT-2's byte-level alphabet: every byte 0..255 maps to one printable Unicode character (bytes that are
// printable Latin-1 map to themselves, the others to U+0100.. in order), so BPE vocabularies never contain
// raw control bytes or spaces. Used by the ByteLevel pre-tokenizer and decoder. Not a tokenizer.
// Invariant: unicode_to_byte(byte_to_unicode(b)) == b for every byte.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace bunsen::text::byte_level {

// UTF-8 of the character standing for byte b.
std::string_view byte_to_unicode(uint8_t b);
// The byte a character stands for, or -1 if the character is not in the alphabet.
int unicode_to_byte(char32_t cp);
// Appends the byte-level spelling of raw `bytes` to out.
void encode(std::string_view bytes, std::string& out);
// Maps a byte-level token back to raw bytes; false (out unchanged) if any character is outside the alphabet.
bool decode(std::string_view token, std::string& out);

}  // namespace bunsen::text::byte_level
