// Helpers for the SSD-tier tests (test_ssd_store.cpp, test_ssd_state.cpp): a snapshot to write (key, token ids,
// layout, payload bytes filled from a seed) and a little-endian u32 read from a file's header. Not a test by
// itself. Invariant: a sample's layout.tensor_bytes matches its payloads one for one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <utility>
#include <vector>

#include "kv/ssd_store.h"

namespace bunsen::kv::test {

struct SsdSample {
  SsdEntryKey key;
  std::vector<int32_t> tokens;
  SsdLayout layout;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<std::span<const std::byte>> spans() const { return {payloads.begin(), payloads.end()}; }

  // Appends a payload tensor of `bytes` pseudo-random bytes from the generator state `x` (and its size to the layout).
  void add_payload(size_t bytes, uint32_t& x) {
    std::vector<std::byte> p(bytes);
    for (auto& b : p) b = static_cast<std::byte>((x = x * 1664525u + 1013904223u) >> 24);
    layout.tensor_bytes.push_back(p.size());
    payloads.push_back(std::move(p));
  }
};

inline uint32_t read_u32(const std::filesystem::path& p, uint64_t at) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  uint32_t v = 0;
  f.read(reinterpret_cast<char*>(&v), 4);
  return v;
}

}  // namespace bunsen::kv::test
