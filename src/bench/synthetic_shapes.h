// Named real model shapes for `bunsen benchmark --synthetic NAME`: config.json text of the real
// checkpoints' architecture (weights are generated, nothing is downloaded; on CUDA they are generated on
// the host and uploaded).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace bunsen::bench {

std::vector<std::string> synthetic_shape_names();
// config.json text for a shape; Error("bench", ...) listing the known names when unknown.
std::string synthetic_config_json(const std::string& name);
// Builds the model with deterministic synthetic weights in `dtype`, in host memory, then uploads them to
// `device` when it is a CUDA device.
std::unique_ptr<model::Model> make_synthetic_model(const std::string& name, DType dtype, Device device = {});

}  // namespace bunsen::bench
