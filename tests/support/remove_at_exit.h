// Scratch paths a test process made, removed when the process exits. gtest_discover_tests runs every test
// case as its own process, so a per-process scratch name (the pid in it) would otherwise leave one directory
// per test case in the temp directory on every run. Removal waits for exit because the models loaded from
// those files stay mapped for the process' lifetime (function-local statics).
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace bunsen::test_support {

inline void remove_at_exit(const std::filesystem::path& path) {
  struct Registry {
    std::mutex mu;
    std::vector<std::filesystem::path> paths;
    ~Registry() {
      for (const auto& p : paths) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    }
  };
  static Registry registry;
  std::lock_guard<std::mutex> lock(registry.mu);
  for (const auto& p : registry.paths)
    if (p == path) return;
  registry.paths.push_back(path);
}

}  // namespace bunsen::test_support
