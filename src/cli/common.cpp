// CLI helpers.
#include "cli/common.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/status.h"

namespace bunsen::cli {

void check_device(const std::string& device, const std::string& verb) {
  if (device == "cpu") return;
  if (device.rfind("cuda", 0) == 0)
    throw Error("cli", "bunsen " + verb + ": --device " + device +
                           ": the CUDA backend is not in this build yet; use --device cpu");
  throw Error("cli", "bunsen " + verb + ": --device must be cpu or cuda[:N], got '" + device + "'");
}

std::unique_ptr<text::Tokenizer> open_tokenizer(const std::string& dir, const model::ModelConfig& cfg) {
  if (std::filesystem::exists(dir + "/tokenizer.json")) return text::load_tokenizer(dir);
  std::fprintf(stderr, "bunsen: %s has no tokenizer.json; using raw bytes as token ids 0..255\n", dir.c_str());
  return text::make_byte_tokenizer(cfg.vocab_size);
}

std::vector<int32_t> eos_ids(const model::ModelConfig& cfg, const text::Tokenizer& tok) {
  std::vector<int32_t> out;
  for (int64_t id : cfg.eos_token_ids) out.push_back(static_cast<int32_t>(id));
  for (int32_t id : tok.eos_ids())
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

}  // namespace bunsen::cli
