// Llama-like decoder family: llama, mistral, qwen2, qwen3, smollm3, granite, phi3 — one implementation
// whose variants are chosen by explicit ModelConfig switches (biases, qk-norm, fused projections, NoPE
// layers, sliding windows, granite multipliers), never by probing which tensors exist.
#pragma once
#include <memory>
#include <vector>

#include "model/registry.h"

namespace bunsen::model::arch {

std::unique_ptr<Model> create_llama_like(const ModelConfig& cfg, WeightStore weights);
std::vector<TensorSpec> llama_like_tensors(const ModelConfig& cfg);

}  // namespace bunsen::model::arch
