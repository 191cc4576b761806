// Leveled logging to stderr with a component tag. Not for user-facing output of commands (that goes to
// stdout through the CLI). Level comes from BUNSEN_LOG (error|warn|info|debug), default warn.
#pragma once
#include <string_view>

namespace bunsen::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

Level level();
void set_level(Level level);
void write(Level level, std::string_view component, std::string_view message);

inline void error(std::string_view c, std::string_view m) { write(Level::kError, c, m); }
inline void warn(std::string_view c, std::string_view m) { write(Level::kWarn, c, m); }
inline void info(std::string_view c, std::string_view m) { write(Level::kInfo, c, m); }
inline void debug(std::string_view c, std::string_view m) { write(Level::kDebug, c, m); }

}  // namespace bunsen::log
