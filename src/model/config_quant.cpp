// config.json's quantization block (MLX / mlx-lm layout): {"group_size": 64, "bits": 4, "mode": "affine",
// "<module path>": {"group_size": .., "bits": ..} | false | true, ...}. mlx-lm writes the same block under
// both "quantization" and "quantization_config". Not the weights side (layers.cpp validates the tensors).
// Invariants: only mode "affine"; a block from another tool (a "quant_method" key: GPTQ, AWQ, fp8, ...) is
// an Error, never silently read as float; every spec is a supported bits × group size.
#include "model/config_quant.h"

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace bunsen::model {
namespace {

using nlohmann::json;

int read_int(const json& j, const char* key, int def, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) {
    check(def > 0, "config", where + ": missing '" + key + "'");
    return def;
  }
  const json& v = j.at(key);
  check(v.is_number_integer(), "config", where + ": '" + key + "' must be an integer, got " + v.dump());
  return v.get<int>();
}

void check_mode(const json& j, const std::string& where) {
  if (!j.contains("mode") || j.at("mode").is_null()) return;
  const json& m = j.at("mode");
  check(m.is_string() && m.get<std::string>() == "affine", "config",
        where + ": unsupported quantization mode " + m.dump() + " (only \"affine\")");
}

QuantSpec read_spec(const json& j, QuantSpec def, const std::string& where) {
  check_mode(j, where);
  QuantSpec s{read_int(j, "bits", def.bits, where), read_int(j, "group_size", def.group_size, where)};
  check(is_supported(s), "config",
        strfmt("%s: unsupported quantization bits=%d group_size=%d (bits 2,3,4,5,6,8; group_size 32,64,128)",
               where.c_str(), s.bits, s.group_size));
  return s;
}

}  // namespace

QuantizationConfig parse_quantization(const json& root, const std::string& source) {
  QuantizationConfig q;
  const char* key = nullptr;
  for (const char* k : {"quantization", "quantization_config"})
    if (!key && root.contains(k) && root.at(k).is_object()) key = k;
  if (!key) return q;
  const json& block = root.at(key);
  const std::string where = source + " '" + key + "'";
  if (block.contains("quant_method")) {
    throw Error("config", where + ": unsupported quantization method " + block.at("quant_method").dump() +
                              " (bunsen reads MLX affine checkpoints only)");
  }
  q.enabled = true;
  q.spec = read_spec(block, QuantSpec{0, 0}, where);
  for (const auto& [name, v] : block.items()) {
    if (v.is_boolean()) {
      q.overrides[name] = v.get<bool>() ? std::optional<QuantSpec>(q.spec) : std::nullopt;
    } else if (v.is_object()) {
      q.overrides[name] = read_spec(v, q.spec, where + " module '" + name + "'");
    }  // other scalars (bits, group_size, mode, tool metadata) are not modules
  }
  return q;
}

std::optional<QuantSpec> ModelConfig::quant_spec(const std::string& path) const {
  if (!quantization.enabled) return std::nullopt;
  auto it = quantization.overrides.find(path);
  if (it != quantization.overrides.end()) return it->second;
  return quantization.spec;
}

}  // namespace bunsen::model
