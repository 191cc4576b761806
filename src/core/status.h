// Errors for every module: bunsen::Error carries the component that raised it ("safetensors",
// "config", "kernels", ...) so a one-line message always says where it came from.
// Not a logging facility (see log.h). Invariant: what() == "<component>: <message>".
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace bunsen {

class Error : public std::runtime_error {
 public:
  Error(std::string_view component, std::string_view message);
  const std::string& component() const { return component_; }
  const std::string& message() const { return message_; }

 private:
  std::string component_;
  std::string message_;
};

// Throws Error(component, message) when `ok` is false. A function, not a macro: no hidden locals.
inline void check(bool ok, std::string_view component, std::string_view message) {
  if (!ok) throw Error(component, message);
}

// printf-style helper for building messages without iostreams.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace bunsen
