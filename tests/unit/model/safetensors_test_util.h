// Helpers shared by the safetensors/WeightStore tests: raw file writers and an assertion that a call throws
// bunsen::Error whose message contains given facts. Not production code. Scratch directories come from
// tests/support/scratch_dir.h.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>

#include "core/status.h"

namespace bunsen::model::testutil {

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file image: 8-byte length, header text as given (no padding), `data_bytes` bytes of data.
inline std::string st_image(const std::string& header, size_t data_bytes) {
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<char>(i * 7 + 1);
  return le64(header.size()) + header + data;
}

// Runs `fn`, expects a bunsen::Error whose what() contains every string in `facts`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> facts) {
  try {
    fn();
    ADD_FAILURE() << "expected a bunsen::Error mentioning " << *facts.begin();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& f : facts)
      EXPECT_NE(what.find(f), std::string::npos) << "message \"" << what << "\" lacks \"" << f << "\"";
  }
}

}  // namespace bunsen::model::testutil
