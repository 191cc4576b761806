// CLI helpers.
#include "cli/common.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/status.h"
#include "kernels/device.h"

namespace bunsen::cli {

Device parse_device(const std::optional<std::string>& flag, const std::string& verb) {
  const int n = kernels::cuda_device_count();
  if (!flag) return n > 0 ? Device::cuda(0) : Device::cpu();
  const std::string& s = *flag;
  if (s == "cpu") return Device::cpu();
  const std::string prefix = "bunsen " + verb + ": --device " + s + ": ";
  int index = 0;
  if (s != "cuda") {
    const std::string digits = s.rfind("cuda:", 0) == 0 ? s.substr(5) : std::string();
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw Error("cli", "bunsen " + verb + ": --device must be cpu or cuda[:N], got '" + s + "'");
    index = std::stoi(digits);
  }
  if (!kernels::cuda_built()) throw Error("cli", prefix + "this build has no CUDA backend; use --device cpu");
  if (n == 0) throw Error("cli", prefix + "no CUDA device is visible; use --device cpu");
  if (index >= n)
    throw Error("cli", prefix + strfmt("no such device (%d CUDA device%s visible)", n, n == 1 ? "" : "s"));
  return Device::cuda(index);
}

std::unique_ptr<text::Tokenizer> open_tokenizer(const std::string& dir, const model::ModelConfig& cfg) {
  if (std::filesystem::exists(dir + "/tokenizer.json")) return text::load_tokenizer(dir);
  std::fprintf(stderr, "bunsen: %s has no tokenizer.json; using raw bytes as token ids 0..255\n",
               dir.c_str());
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
