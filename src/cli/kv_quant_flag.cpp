// --kv-quant resolution: the flag value, or DIR/kv_config.json (mlx-bun's per-layer format), into one
// kv::KvQuantSpec per layer; plus the label and prefix-cache namespace derived from them. Not the kernels.
// Invariants: every returned spec has bits 0, 4 or 8 and group_size > 0 (fp8: bits 8, group_size 0 = the
// whole head_dim unless kv_config.json gives one); the vector is empty when no layer is quantized, else has
// exactly n_layers entries.
#include "cli/kv_quant_flag.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/log.h"
#include "core/status.h"

namespace bunsen::cli {
namespace {

constexpr int kDefaultGroup = 64;

std::vector<kv::KvQuantSpec> uniform(kv::KvQuantSpec spec, int64_t n_layers) {
  return std::vector<kv::KvQuantSpec>(static_cast<size_t>(n_layers), spec);
}

std::vector<kv::KvQuantSpec> read_config_file(const std::string& path, int64_t n_layers, const std::string& verb) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cli", "bunsen " + verb + ": --kv-quant config needs " + path + " (not found)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_kv_config(ss.str(), n_layers, "bunsen " + verb + ": " + path);
}

bool any_quantized(const std::vector<kv::KvQuantSpec>& specs) {
  for (const kv::KvQuantSpec& s : specs)
    if (s.bits != 0) return true;
  return false;
}

}  // namespace

std::vector<kv::KvQuantSpec> parse_kv_config(const std::string& json_text, int64_t n_layers, const std::string& where) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  check(doc.is_array(), "cli",
        where + ": expected a JSON array of {\"layer_idx\", \"bits\", \"group_size\"[, \"mode\": \"fp8\"]}");
  std::vector<kv::KvQuantSpec> out(static_cast<size_t>(n_layers));
  std::vector<bool> seen(out.size(), false);
  for (const nlohmann::json& e : doc) {
    const bool fp8 = e.is_object() && e.contains("mode") && e["mode"] == "fp8";
    check(e.is_object() && e.contains("layer_idx") && e["layer_idx"].is_number_integer() &&
              ((e.contains("bits") && e["bits"].is_number_integer()) || (fp8 && !e.contains("bits"))),
          "cli", where + ": every entry needs integer \"layer_idx\" and \"bits\", got " + e.dump());
    check(!e.contains("mode") || e["mode"] == "affine" || fp8, "cli",
          where + ": \"mode\" must be \"affine\" or \"fp8\", got " + e.dump());
    const int64_t layer = e["layer_idx"].get<int64_t>();
    const int64_t bits = e.contains("bits") ? e["bits"].get<int64_t>() : 8;
    const int64_t group = e.contains("group_size") && e["group_size"].is_number_integer()
                              ? e["group_size"].get<int64_t>() : fp8 ? 0 : kDefaultGroup;
    check(layer >= 0 && layer < n_layers, "cli",
          strfmt("%s: layer_idx %lld is outside the model's %lld layers", where.c_str(), (long long)layer,
                 (long long)n_layers));
    check(!seen[static_cast<size_t>(layer)], "cli", strfmt("%s: layer_idx %lld is listed twice", where.c_str(), (long long)layer));
    check(bits == 4 || bits == 8, "cli", strfmt("%s: layer %lld: bits %lld must be 4 or 8", where.c_str(), (long long)layer, (long long)bits));
    check(!fp8 || bits == 8, "cli", strfmt("%s: layer %lld: fp8 needs bits 8, got %lld", where.c_str(), (long long)layer, (long long)bits));
    check((group > 0 || (fp8 && group == 0)) && group <= 4096, "cli",
          strfmt("%s: layer %lld: group_size %lld must be in [1, 4096]", where.c_str(), (long long)layer, (long long)group));
    seen[static_cast<size_t>(layer)] = true;
    out[static_cast<size_t>(layer)] = {static_cast<int>(bits), static_cast<int>(group), fp8};
  }
  if (!any_quantized(out)) out.clear();
  return out;
}

std::vector<kv::KvQuantSpec> resolve_kv_quant(const std::optional<std::string>& flag, const std::string& model_dir,
                                              int64_t n_layers, Device device, const std::string& verb) {
  const std::string cfg_path = model_dir.empty() ? "" : (std::filesystem::path(model_dir) / "kv_config.json").string();
  const bool have_cfg = !cfg_path.empty() && std::filesystem::exists(cfg_path);
  std::vector<kv::KvQuantSpec> specs;
  if (!flag) {
    if (!have_cfg) return {};
    specs = read_config_file(cfg_path, n_layers, verb);
  } else if (*flag == "off") {
    return {};
  } else if (*flag == "4" || *flag == "8") {
    specs = uniform({*flag == "4" ? 4 : 8, kDefaultGroup}, n_layers);
  } else if (*flag == "fp8") {
    specs = uniform({8, 0, true}, n_layers);  // one e4m3 scale per (token, kv head)
  } else if (*flag == "config") {
    specs = read_config_file(cfg_path.empty() ? "kv_config.json" : cfg_path, n_layers, verb);
  } else {
    throw Error("cli", "bunsen " + verb + ": --kv-quant must be off, 4, 8, fp8 or config, got '" + *flag + "'");
  }
  (void)device;  // CPU and CUDA take the same specs
  return specs;
}

std::string kv_quant_label(const std::vector<kv::KvQuantSpec>& specs, DType base, int64_t n_layers) {
  if (specs.empty()) return dtype_name(base);
  int64_t n = 0;
  for (const kv::KvQuantSpec& s : specs) n += s.bits != 0;
  const kv::KvQuantSpec* first = nullptr;
  bool same = true;
  for (const kv::KvQuantSpec& s : specs) {
    if (s.bits == 0) continue;
    if (first && !(s == *first)) same = false;
    if (!first) first = &s;
  }
  std::string label = !same                 ? std::string("mixed int4/int8/fp8")
                      : !first->fp8          ? strfmt("int%d g%d", first->bits, first->group_size)
                      : first->group_size > 0 ? strfmt("fp8 e4m3 g%d", first->group_size)
                                              : std::string("fp8 e4m3");
  if (n < n_layers) label += strfmt(" (%lld/%lld layers, rest %s)", (long long)n, (long long)n_layers, dtype_name(base));
  return label;
}

}  // namespace bunsen::cli
