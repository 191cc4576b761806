// Writes the demo model directory atomically: build in DIR.tmp-PID, then rename to DIR.
#include "hub/demo_model.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/env.h"
#include "core/status.h"
#include "model/config.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model/weights.h"

extern "C" const char bunsen_demo_tokenizer_json[], bunsen_demo_tokenizer_json_end[];
extern "C" const char bunsen_demo_tokenizer_config_json[], bunsen_demo_tokenizer_config_json_end[];

namespace bunsen::hub {
namespace fs = std::filesystem;
namespace {

constexpr const char* kDemoName = "demo-qwen3-tiny";

constexpr const char* kReadme =
    "bunsen built-in demo model\n\n"
    "A tiny Qwen3-shaped model (2 layers, hidden 64) with RANDOM weights and the real Qwen3 tokenizer.\n"
    "It exists so bunsen runs on a fresh machine with nothing downloaded; its output is gibberish by design.\n"
    "Real models are Hugging Face snapshot directories: bunsen generate --model /path/to/snapshot\n";

void write_text(const fs::path& p, const char* begin, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(begin, static_cast<std::streamsize>(n));
  if (!f) throw Error("hub", "cannot write " + p.string());
}

void build(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string cfg_text = demo_config_json();
  write_text(dir / "config.json", cfg_text.data(), cfg_text.size());
  const std::string gen = "{\n  \"bos_token_id\": 151643,\n  \"eos_token_id\": [151645, 151643]\n}\n";
  write_text(dir / "generation_config.json", gen.data(), gen.size());
  write_text(dir / "tokenizer.json", bunsen_demo_tokenizer_json,
             static_cast<size_t>(bunsen_demo_tokenizer_json_end - bunsen_demo_tokenizer_json));
  write_text(dir / "tokenizer_config.json", bunsen_demo_tokenizer_config_json,
             static_cast<size_t>(bunsen_demo_tokenizer_config_json_end - bunsen_demo_tokenizer_config_json));
  write_text(dir / "README.txt", kReadme, std::char_traits<char>::length(kReadme));
  const model::ModelConfig cfg = model::parse_config(cfg_text, "demo config.json");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& spec : model::expected_tensors(cfg)) {
    owned.push_back(model::synthetic_tensor(spec.name, spec.shape, DType::kBF16, demo_seed()));
    tensors.emplace_back(spec.name, owned.back().tensor);
  }
  model::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_text(dir / "DONE", "1\n", 2);
}

}  // namespace

std::string cache_dir() {
  if (const std::string_view v = env_str("BUNSEN_CACHE"); !v.empty()) return std::string(v);
  if (const std::string_view v = env_str("XDG_CACHE_HOME"); !v.empty()) return std::string(v) + "/bunsen";
  if (const std::string_view v = env_str("HOME"); !v.empty()) return std::string(v) + "/.cache/bunsen";
  return "/tmp/bunsen-cache";
}

std::string ensure_demo_model(const std::string& root) {
  const fs::path dir = fs::path(root.empty() ? cache_dir() + "/models" : root) / kDemoName;
  if (fs::exists(dir / "DONE")) return dir.string();
  // Several processes may get here at once: each builds its own temp dir and renames it into place; the
  // final directory only ever appears complete (rename of a finished build), so a loser just discards its copy.
  const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    build(tmp);
    fs::rename(tmp, dir, ec);
    if (ec && !fs::exists(dir / "DONE")) {  // a leftover without DONE (interrupted older layout): replace it
      fs::remove_all(dir);
      fs::rename(tmp, dir);
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error("hub", std::string("cannot create the demo model in ") + dir.string() + ": " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);
  return dir.string();
}

}  // namespace bunsen::hub
