// Model families by config.json model_type: one line per family in registry.cpp, each pointing at the
// factory and tensor manifest of one arch/ file. Not a plugin system: the table is explicit so static
// linking keeps every family. Unknown model_type -> Error listing the supported ones.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace bunsen::model {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Names and shapes of every tensor a checkpoint of this config holds (HF naming).
std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg);
std::unique_ptr<Model> create_model(const ModelConfig& cfg, WeightStore weights);
struct LoadOptions {
  Device device{};  // cuda:N: the weights are uploaded there before the family builds its views
  enum class Progress { kAuto, kOn, kOff } progress = Progress::kAuto;  // kAuto: when stderr is a TTY
};

// config.json (+ generation_config.json) and safetensors of DIR, on opts.device.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});
// The store on `device` (itself when that is the CPU), with the progress line as `progress` says.
WeightStore place_weights(WeightStore weights, Device device, LoadOptions::Progress progress);
std::vector<std::string> supported_model_types();
// The per-layer cache layout the loaded model's kv_layout() reports, from the config alone (bunsen fit):
// hybrid families give their linear-attention layers; other families one attention layer per layer.
std::vector<KvLayerSpec> kv_layout_from_config(const ModelConfig& cfg);
// The model_type of the language model a multimodal wrapper runs (gemma3 -> gemma3_text); any other type
// is returned as is. A wrapper's golden coverage is its language model's fixture.
std::string text_model_type(const std::string& model_type);

}  // namespace bunsen::model
