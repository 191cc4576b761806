// Qwen3.5 / Qwen3-Next hybrid decoder family (qwen3_5_text, the text part of the qwen3_5 multimodal wrapper,
// qwen3_next): gated DeltaNet linear-attention layers interleaved with gated full attention, zero-centred
// (1 + w) RMSNorms, partial rotary; Qwen3-Next adds a mixture of experts with a shared expert. Variants are
// chosen by model_type and config fields; checkpoint naming quirks are resolved at load.
#pragma once
#include <memory>
#include <vector>

#include "model/registry.h"

namespace bunsen::model::arch {

std::unique_ptr<Model> create_qwen3_5(const ModelConfig& cfg, WeightStore weights);
std::vector<TensorSpec> qwen3_5_tensors(const ModelConfig& cfg);
// What the model's kv_layout() returns, from the config alone (memory planning before loading).
std::vector<KvLayerSpec> qwen3_5_kv_layout(const ModelConfig& cfg);

}  // namespace bunsen::model::arch
