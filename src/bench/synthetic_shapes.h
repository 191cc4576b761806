// Named real model shapes for `bunsen benchmark --synthetic NAME`: config.json text of the real
// checkpoints' architecture (weights are generated, nothing is downloaded; on CUDA they are generated on
// the host and uploaded).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/quant.h"
#include "model/weights.h"

namespace bunsen::bench {

std::vector<std::string> synthetic_shape_names();
// config.json text for a shape; Error("bench", ...) listing the known names when unknown.
std::string synthetic_config_json(const std::string& name);
// Builds the model with deterministic synthetic weights in `dtype`, in host memory, then uploads them to
// `device` when it is a CUDA device.
// With `quant`: an MLX affine-quantized checkpoint of the shape (every Linear, the embedding and lm_head
// quantized with `quant`, bf16 scales/biases, random codes; synthetic_quant.cpp); dtype is then the dtype
// of the tensors left in float (norms, biases).
std::unique_ptr<model::Model> make_synthetic_model(const std::string& name, DType dtype, Device device = {},
                                                   std::optional<model::QuantSpec> quant = std::nullopt);
// The shape's config.json with a "quantization" block for `quant` added.
std::string synthetic_config_json(const std::string& name, model::QuantSpec quant);
// Every tensor of a quantized config (synthetic_quant.cpp).
model::WeightStore synthetic_quant_weights(const model::ModelConfig& cfg, DType dtype, uint64_t seed);

}  // namespace bunsen::bench
