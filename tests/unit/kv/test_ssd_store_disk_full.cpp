// Disk-full tests for SsdStore, each in a forked child so limits and mounts never leak into the test
// process: a real ENOSPC on a tiny tmpfs (private mount namespace; skipped when the kernel or container
// forbids it) and EFBIG from RLIMIT_FSIZE. Expected: the entry that fits is written, the one that does not
// disables the tier with exactly one warning, leaves no temp file, and nothing throws.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "../../support/scratch_dir.h"
#include "kv/ssd_store.h"

namespace fs = std::filesystem;
using bunsen::kv::SsdEntryKey;
using bunsen::kv::SsdLayout;
using bunsen::kv::SsdStore;
using bunsen::test_support::ScratchDir;

namespace {

constexpr int kSkip = 77;

// 1 layer x (K, V) of n_tokens x 64 bytes each.
bool put_entry(SsdStore& store, uint64_t prefix_hash, int n_tokens) {
  std::vector<int32_t> tokens(n_tokens, 3);
  std::vector<std::byte> k(n_tokens * 64, std::byte{1}), v(n_tokens * 64, std::byte{2});
  SsdLayout layout{1, 16, 1, 32, bunsen::DType::kBF16, {k.size(), v.size()}};
  std::vector<std::span<const std::byte>> spans = {k, v};
  return store.put(SsdEntryKey{1, prefix_hash}, tokens, layout, spans);
}

// Runs in the child after the environment is set up; returns the exit code (0 = all checks passed).
int disk_full_checks(const fs::path& dir, const fs::path& err_file) {
  int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::dup2(fd, 2) < 0) return 20;
  try {
    SsdStore store({dir.string(), 1ull << 30, false});
    if (!store.enabled()) return 10;
    if (!put_entry(store, 1, 64)) return 11;          // ~12 KiB: fits
    if (put_entry(store, 2, 4096)) return 12;         // ~0.5 MiB: does not
    if (store.enabled()) return 13;
    if (put_entry(store, 3, 64)) return 14;           // disabled: a no-op from now on
    if (store.get(SsdEntryKey{1, 1}).has_value()) return 15;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) return 16;  // temp file left behind
    }
    if (!fs::exists(dir / SsdStore::file_name(SsdEntryKey{1, 1}))) return 17;
  } catch (...) {
    return 30;
  }
  return 0;
}

int run_in_child(const std::function<int()>& fn) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool write_text(const char* path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f.flush());
}

// A private mount namespace (a user namespace too when not root) with a 128 KiB tmpfs on `dir`.
bool mount_tiny_tmpfs(const fs::path& dir) {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (uid != 0) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    write_text("/proc/self/setgroups", "deny");
    if (!write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n")) return false;
    if (!write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n")) return false;
  } else if (::unshare(CLONE_NEWNS) != 0) {
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  return ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=128k") == 0;
}

class SsdStoreDiskFull : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_); }
  std::string child_stderr() const {
    std::ifstream f(root_.path() / "stderr.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  int warnings() const {
    std::string s = child_stderr();
    int n = 0;
    for (size_t at = 0; (at = s.find("[bunsen warn] ssd-cache", at)) != std::string::npos; ++at) ++n;
    return n;
  }
  ScratchDir root_{"bunsen-ssd-full"};
  fs::path dir_ = root_.path() / "cache";
};

TEST_F(SsdStoreDiskFull, EnospcOnTinyTmpfsDisablesWithOneWarning) {
  int rc = run_in_child([&] {
    if (!mount_tiny_tmpfs(dir_)) return kSkip;
    return disk_full_checks(dir_, root_.path() / "stderr.txt");
  });
  if (rc == kSkip) GTEST_SKIP() << "cannot mount a private tmpfs here (no user/mount namespaces)";
  EXPECT_EQ(rc, 0) << "child check failed (see disk_full_checks for the code)";
  EXPECT_EQ(warnings(), 1) << child_stderr();
  EXPECT_NE(child_stderr().find(std::strerror(ENOSPC)), std::string::npos) << child_stderr();
}

TEST_F(SsdStoreDiskFull, FileSizeLimitDisablesWithOneWarning) {
  int rc = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);  // otherwise exceeding RLIMIT_FSIZE kills the process
    rlimit lim{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return kSkip;
    return disk_full_checks(dir_, root_.path() / "stderr.txt");
  });
  if (rc == kSkip) GTEST_SKIP() << "setrlimit(RLIMIT_FSIZE) refused";
  EXPECT_EQ(rc, 0) << "child check failed (see disk_full_checks for the code)";
  EXPECT_EQ(warnings(), 1) << child_stderr();
  EXPECT_NE(child_stderr().find(std::strerror(EFBIG)), std::string::npos) << child_stderr();
}

}  // namespace
