// Internal to model/: parsing of the quantization block of config.json (config_quant.cpp), called by
// parse_config. Not public API (it exposes nlohmann::json). Invariant: every spec it returns passed
// check_supported and the mode is "affine".
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/config.h"

namespace bunsen::model {

// Reads root["quantization"], else root["quantization_config"]; an absent block gives enabled = false.
QuantizationConfig parse_quantization(const nlohmann::json& root, const std::string& source);

}  // namespace bunsen::model
