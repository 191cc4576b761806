// Implementation of bunsen::Error and strfmt.
#include "core/status.h"

#include <cstdarg>
#include <cstdio>

namespace bunsen {

Error::Error(std::string_view component, std::string_view message)
    : std::runtime_error(std::string(component) + ": " + std::string(message)),
      component_(component),
      message_(message) {}

std::string strfmt(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

}  // namespace bunsen
