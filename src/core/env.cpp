// core/env.h: the parsing rules of environment switches (getenv is called here only).
#include "core/env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

namespace bunsen {

std::string_view env_str(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string_view(v) : std::string_view();
}

bool env_flag(const char* name, bool fallback) {
  const std::string_view v = env_str(name);
  if (v.empty()) return fallback;
  return v != "0";
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0') return fallback;
  if (errno == ERANGE || n > INT_MAX) return n < 0 ? INT_MIN : INT_MAX;
  if (n < INT_MIN) return INT_MIN;
  return static_cast<int>(n);
}

}  // namespace bunsen
