// stderr logger; one line per call, written with a single fwrite so lines from threads do not interleave.
#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/env.h"

namespace bunsen::log {
namespace {

Level level_from_env() {
  const std::string_view v = env_str("BUNSEN_LOG");
  if (v == "error") return Level::kError;
  if (v == "info") return Level::kInfo;
  if (v == "debug") return Level::kDebug;
  return Level::kWarn;
}

std::atomic<int>& current() {
  static std::atomic<int> lvl{static_cast<int>(level_from_env())};
  return lvl;
}

const char* kNames[] = {"error", "warn", "info", "debug"};

}  // namespace

Level level() { return static_cast<Level>(current().load()); }
void set_level(Level l) { current().store(static_cast<int>(l)); }

void write(Level l, std::string_view component, std::string_view message) {
  if (static_cast<int>(l) > current().load()) return;
  std::string line = "[bunsen ";
  line += kNames[static_cast<int>(l)];
  line += "] ";
  line += component;
  line += ": ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace bunsen::log
