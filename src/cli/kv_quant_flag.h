// --kv-quant for bunsen serve and bunsen generate: off | 4 | 8 | fp8 | config, resolved into one KvQuantSpec
// per layer. `config` reads DIR/kv_config.json, [{"layer_idx": i, "bits": 4|8, "group_size": 64}] (an entry
// may say "mode": "fp8" for e4m3 codes; layers not listed stay unquantized), and is the default when that
// file exists (as in mlx-bun). Not the kernels:
// only flag parsing, validation and the labels/namespace the CLI prints and passes on. Errors are one
// line: Error("cli", "bunsen VERB: ...").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kv/kv_storage.h"

namespace bunsen::cli {

inline constexpr const char* kKvQuantHelp =
    "KV cache quantization: off, 4 or 8 (affine, group 64 along head_dim, f32 scale+bias), fp8 (e4m3, one "
    "f32 scale per token and kv head), or config (DIR/kv_config.json per layer; the default when that file "
    "exists). At head_dim 128 a quantized cache holds ~1.8x (8), ~1.9x (fp8) or ~3.2x (4) the tokens; on "
    "CUDA its attention runs on the SIMT kernel instead of the tensor-core ones, so decode is slower "
    "(docs/PERFORMANCE.md)";

// Per-layer specs for a model with n_layers layers in model_dir ("" = none); empty = unquantized. The
// same on CPU and CUDA (`device` is kept for the callers' signature).
std::vector<kv::KvQuantSpec> resolve_kv_quant(const std::optional<std::string>& flag, const std::string& model_dir,
                                              int64_t n_layers, Device device, const std::string& verb);
// Parses a kv_config.json document (tests call this directly).
std::vector<kv::KvQuantSpec> parse_kv_config(const std::string& json_text, int64_t n_layers, const std::string& where);
// "f32", "int8 g64", "int4 g64 (12/28 layers, rest bf16)", ... for the card and the admin info.
std::string kv_quant_label(const std::vector<kv::KvQuantSpec>& specs, DType base, int64_t n_layers);

}  // namespace bunsen::cli
