// Helpers shared by CLI verbs: device flag validation, tokenizer opening with a byte fallback, EOS sets.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

#include "model/config.h"
#include "text/tokenizer.h"

namespace bunsen::cli {

// --device: "cpu" or "cuda[:N]" (only in a CUDA build with device N present); absent: cuda:0 when a GPU
// is visible, else cpu. Errors are one line: Error("cli", "bunsen VERB: --device ...").
Device parse_device(const std::optional<std::string>& flag, const std::string& verb);
// The --device help text.
inline constexpr const char* kDeviceHelp = "cpu or cuda[:N] (default: cuda:0 when a GPU is present, else cpu)";
// DIR/tokenizer.json when present, else a byte-level fallback (warned once on stderr).
std::unique_ptr<text::Tokenizer> open_tokenizer(const std::string& dir, const model::ModelConfig& cfg);
// EOS ids from config/generation_config plus the tokenizer's own.
std::vector<int32_t> eos_ids(const model::ModelConfig& cfg, const text::Tokenizer& tok);

}  // namespace bunsen::cli
