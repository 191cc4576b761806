// Helpers shared by CLI verbs: device flag validation, tokenizer opening with a byte fallback, EOS sets.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "text/tokenizer.h"

namespace bunsen::cli {

// Accepts "cpu"; "cuda[:N]" is an error until the CUDA backend lands.
void check_device(const std::string& device, const std::string& verb);
// DIR/tokenizer.json when present, else a byte-level fallback (warned once on stderr).
std::unique_ptr<text::Tokenizer> open_tokenizer(const std::string& dir, const model::ModelConfig& cfg);
// EOS ids from config/generation_config plus the tokenizer's own.
std::vector<int32_t> eos_ids(const model::ModelConfig& cfg, const text::Tokenizer& tok);

}  // namespace bunsen::cli
