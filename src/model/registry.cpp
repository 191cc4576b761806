// The family table (model_type -> arch/ factory) and load_model().
#include "model/registry.h"

#include <unistd.h>

#include "core/status.h"
#include "model/arch/llama.h"

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
  check(!cfg.quantization.enabled || opts.device.is_cpu(), "model",
        "quantized (MLX affine) checkpoints are not supported on " + opts.device.str() +
            " yet; load the model on the CPU");  // before uploading anything
  return fam.create(cfg, place_weights(WeightStore::open(dir), opts.device, opts.progress));
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.emplace_back(f.model_type);
  return out;
}

}  // namespace bunsen::model
