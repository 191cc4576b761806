// Switches read from the process environment: A/B switches of the kernels and models (BUNSEN_QMMA_PLAN, ...),
// thread count, cache paths. Callers read a switch once (a function-local static), so no hot path calls
// getenv. Not a configuration system: what a user sets is a CLI flag. Invariant: one parsing rule per kind,
// the same for every switch.
#pragma once
#include <string_view>

namespace bunsen {

// The variable's value, or "" when it is unset.
std::string_view env_str(const char* name);

// Unset or empty: `fallback`; "0": false; any other value: true.
bool env_flag(const char* name, bool fallback);

// Unset, empty or not a whole decimal integer (optional sign): `fallback`; else its value, clamped to int.
int env_int(const char* name, int fallback);

}  // namespace bunsen
