// The family table (model_type -> arch/ factory) and load_model().
#include "model/registry.h"

#include <unistd.h>

#include <utility>

#include "core/status.h"
#include "model/arch/gemma.h"
#include "model/arch/gemma4.h"
#include "model/arch/llama.h"
#include "model/arch/qwen3_5.h"
#include "model/arch/qwen3_moe.h"

namespace bunsen::model {
namespace {

struct Family {
  const char* model_type;
  std::unique_ptr<Model> (*create)(const ModelConfig&, WeightStore);
  std::vector<TensorSpec> (*tensors)(const ModelConfig&);
};

constexpr Family kFamilies[] = {
    {"llama", arch::create_llama_like, arch::llama_like_tensors},
    {"mistral", arch::create_llama_like, arch::llama_like_tensors},
    {"qwen2", arch::create_llama_like, arch::llama_like_tensors},
    {"qwen3", arch::create_llama_like, arch::llama_like_tensors},
    {"smollm3", arch::create_llama_like, arch::llama_like_tensors},
    {"granite", arch::create_llama_like, arch::llama_like_tensors},
    {"phi3", arch::create_llama_like, arch::llama_like_tensors},
    {"qwen3_moe", arch::create_qwen3_moe, arch::qwen3_moe_tensors},
    {"gemma2", arch::create_gemma, arch::gemma_tensors},
    {"gemma3_text", arch::create_gemma, arch::gemma_tensors},
    {"gemma3", arch::create_gemma, arch::gemma_tensors},  // multimodal wrapper: its language model only
    {"gemma4_text", arch::create_gemma4, arch::gemma4_tensors},
    {"gemma4", arch::create_gemma4, arch::gemma4_tensors},
    {"qwen3_5_text", arch::create_qwen3_5, arch::qwen3_5_tensors},
    {"qwen3_5", arch::create_qwen3_5, arch::qwen3_5_tensors},  // multimodal wrapper: its language model only
    {"qwen3_next", arch::create_qwen3_5, arch::qwen3_5_tensors},
};

const Family& find_family(const std::string& model_type) {
  for (const auto& f : kFamilies)
    if (model_type == f.model_type) return f;
  std::string list;
  for (const auto& f : kFamilies) list += std::string(list.empty() ? "" : ", ") + f.model_type;
  throw Error("model", "unsupported model_type '" + model_type + "' (supported: " + list + ")");
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg) { return find_family(cfg.model_type).tensors(cfg); }

std::unique_ptr<Model> create_model(const ModelConfig& cfg, WeightStore weights) {
  return find_family(cfg.model_type).create(cfg, std::move(weights));
}

WeightStore place_weights(WeightStore weights, Device device, LoadOptions::Progress progress) {
  if (device.is_cpu()) return weights;
  UploadOptions uo;
  uo.progress = progress == LoadOptions::Progress::kOn ||
                (progress == LoadOptions::Progress::kAuto && isatty(STDERR_FILENO) == 1);
  return weights.to_device(device, uo);
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  ModelConfig cfg = load_config(dir);
  const Family& fam = find_family(cfg.model_type);  // fail on model_type before touching weights
  return fam.create(cfg, place_weights(WeightStore::open(dir), opts.device, opts.progress));
}

std::string text_model_type(const std::string& model_type) {
  // Multimodal wrappers -> their language model's model_type (one line per wrapper).
  static constexpr std::pair<const char*, const char*> kWrappers[] = {
      {"gemma3", "gemma3_text"},
      {"gemma4", "gemma4_text"},
      {"qwen3_5", "qwen3_5_text"},
  };
  for (const auto& [wrapper, text] : kWrappers)
    if (model_type == wrapper) return text;
  return model_type;
}

std::vector<KvLayerSpec> kv_layout_from_config(const ModelConfig& cfg) {
  const std::string& mt = cfg.model_type;
  if (mt == "qwen3_5_text" || mt == "qwen3_5" || mt == "qwen3_next") return arch::qwen3_5_kv_layout(cfg);
  if (mt == "gemma4_text" || mt == "gemma4") return arch::gemma4_kv_layout(cfg);
  std::vector<KvLayerSpec> out;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    KvLayerSpec s;
    s.n_kv_heads = cfg.n_kv_heads;
    s.head_dim = cfg.head_dim;
    if (static_cast<size_t>(i) < cfg.sliding_window.size()) s.sliding_window = cfg.sliding_window[static_cast<size_t>(i)];
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.emplace_back(f.model_type);
  return out;
}

}  // namespace bunsen::model
