// A fresh scratch directory for one test: <temp dir>/<prefix>_XXXXXX made with mkdtemp (never shared with
// another test process running in parallel), removed with everything in it when the object goes. The prefix
// names the suite, so a directory left behind by a crashed test still says whose it is. Removal ignores
// errors: a destructor must not throw, and a leftover scratch directory is harmless.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace bunsen::test_support {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view prefix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (std::string(prefix) + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      const int err = errno;
      throw std::runtime_error("mkdtemp failed for " + tmpl + ": " + std::generic_category().message(err));
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // path() / name, as a string.
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace bunsen::test_support
