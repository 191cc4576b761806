// Gemma 2 / Gemma 3 decoder family: gemma2, gemma3_text and the text part of the gemma3 multimodal wrapper.
// Variants are chosen by explicit ModelConfig fields (soft-caps, per-layer sliding windows, local RoPE, the
// model_type for q/k norms), never by probing tensors; only the checkpoint's key prefix of the language
// model (model., model.language_model., language_model.model.) is resolved from the names at load.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/registry.h"

namespace bunsen::model::arch {

std::unique_ptr<Model> create_gemma(const ModelConfig& cfg, WeightStore weights);
// HF 5.x state-dict names: model.* (gemma2, gemma3_text), model.language_model.* (gemma3; text part only).
std::vector<TensorSpec> gemma_tensors(const ModelConfig& cfg);
// The checkpoint key prefixes of the language model and its head, e.g. {"language_model.model.",
// "language_model.lm_head"}; throws Error("model", ...) naming the prefixes tried when none holds
// embed_tokens.weight.
struct GemmaNames {
  std::string base;     // prefix of embed_tokens, layers, norm
  std::string lm_head;  // module path of the untied head
};
GemmaNames gemma_names(const WeightStore& ws);
// sqrt(d_model) as HF's scaled embedding applies it: computed in f32, then rounded to the table's dtype
// (bf16 for an MLX-quantized table, as mlx-lm does).
float gemma_embed_scale(int64_t d_model, DType table_dtype);

}  // namespace bunsen::model::arch
