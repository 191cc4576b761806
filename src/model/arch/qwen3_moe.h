// Qwen3-MoE decoder family (model_type qwen3_moe): Qwen3 attention with routed-expert MLPs on the sparse
// layers (model/moe.h) and dense SwiGLU MLPs elsewhere, chosen by mlp_only_layers and decoder_sparse_step.
// Not the hybrid Qwen3-Next / Qwen3.5 families (their own arch files).
#pragma once
#include <memory>
#include <vector>

#include "model/registry.h"

namespace bunsen::model::arch {

std::unique_ptr<Model> create_qwen3_moe(const ModelConfig& cfg, WeightStore weights);
std::vector<TensorSpec> qwen3_moe_tensors(const ModelConfig& cfg);

}  // namespace bunsen::model::arch
