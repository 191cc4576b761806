// gemma4_params(): the Gemma 4 layer plan from config.json, following Gemma4TextConfig (transformers 5.17):
// its constructor defaults for absent keys, `per_layer_config` ({layer: {head_dim, num_key_value_heads}},
// written by 5.17) or the older `global_head_dim` / `num_global_key_value_heads`, per-layer-type
// `rope_parameters`, and the KV-sharing rule of Gemma4TextAttention. Not weights (gemma4.cpp).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/arch/gemma4.h"

namespace bunsen::model::arch {
namespace {

using nlohmann::json;
constexpr const char* kComponent = "config";
constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";

bool present(const json& j, const char* k) { return j.contains(k) && !j.at(k).is_null(); }

int64_t get_int(const json& j, const char* k, int64_t def) {
  if (!present(j, k)) return def;
  if (!j.at(k).is_number_integer() || j.at(k).get<int64_t>() < 0)
    throw Error(kComponent, std::string("gemma4: '") + k + "' must be a non-negative integer");
  return j.at(k).get<int64_t>();
}

double get_num(const json& j, const char* k, double def) {
  if (!present(j, k)) return def;
  if (!j.at(k).is_number()) throw Error(kComponent, std::string("gemma4: '") + k + "' must be a number");
  return j.at(k).get<double>();
}

bool get_bool(const json& j, const char* k, bool def) {
  if (!present(j, k)) return def;
  if (!j.at(k).is_boolean()) throw Error(kComponent, std::string("gemma4: '") + k + "' must be true or false");
  return j.at(k).get<bool>();
}

std::vector<std::string> layer_types(const json& j, int64_t n) {
  std::vector<std::string> out;
  if (present(j, "layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n)
      throw Error(kComponent, "gemma4: 'layer_types' must list num_hidden_layers layer types");
    for (const json& t : lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != kSliding && s != kFull) throw Error(kComponent, "gemma4: unsupported layer type '" + s + "'");
      out.push_back(s);
    }
  } else {  // HF default: 5 sliding layers, then one full
    for (int64_t i = 0; i < n; ++i) out.push_back((i + 1) % 6 ? kSliding : kFull);
  }
  if (!out.empty()) out.back() = kFull;  // HF forces the last layer to full attention
  return out;
}

Gemma4Rope parse_rope(const json& j, const char* type) {
  Gemma4Rope r;
  const bool full = std::string(type) == kFull;
  r.proportional = full;  // HF defaults: sliding default/1e4, full proportional 0.25/1e6
  r.theta = full ? 1e6 : 1e4;
  r.partial_rotary_factor = full ? 0.25 : 1.0;
  if (!present(j, "rope_parameters")) return r;
  const json& rp = j.at("rope_parameters");
  if (!rp.is_object() || !present(rp, type)) return r;
  const json& p = rp.at(type);
  if (!p.is_object()) throw Error(kComponent, std::string("gemma4: rope_parameters.") + type + " must be an object");
  const std::string rt = p.contains("rope_type") && p.at("rope_type").is_string() ? p.at("rope_type").get<std::string>()
                                                                                   : "default";
  if (rt != "default" && rt != "proportional")
    throw Error(kComponent, "gemma4: unsupported rope_type '" + rt + "' (supported: default, proportional)");
  r.proportional = rt == "proportional";
  r.theta = get_num(p, "rope_theta", r.theta);
  r.partial_rotary_factor = get_num(p, "partial_rotary_factor", 1.0);  // HF's .get(..., 1.0) once given
  r.factor = get_num(p, "factor", 1.0);
  check(r.theta > 0 && r.factor > 0 && r.partial_rotary_factor >= 0 && r.partial_rotary_factor <= 1, kComponent,
        std::string("gemma4: bad rope parameters for ") + type);
  return r;
}

// Per-layer head_dim / KV heads: `per_layer_config` keyed by layer index (or layer type), else HF's
// conversion of global_head_dim / num_global_key_value_heads (full layers only).
void apply_layer_shapes(const json& j, const ModelConfig& cfg, const std::vector<std::string>& types,
                        bool k_eq_v, std::vector<Gemma4Layer>& layers) {
  for (Gemma4Layer& l : layers) {
    l.head_dim = cfg.head_dim;
    l.n_kv_heads = cfg.n_kv_heads;
  }
  if (present(j, "per_layer_config") && j.at("per_layer_config").is_object()) {
    for (const auto& [key, ov] : j.at("per_layer_config").items()) {
      if (!ov.is_object()) throw Error(kComponent, "gemma4: per_layer_config." + key + " must be an object");
      for (size_t i = 0; i < layers.size(); ++i) {
        if (key != std::to_string(i) && key != types[i]) continue;
        layers[i].head_dim = get_int(ov, "head_dim", layers[i].head_dim);
        layers[i].n_kv_heads = get_int(ov, "num_key_value_heads", layers[i].n_kv_heads);
      }
    }
    return;
  }
  const int64_t global_hd = get_int(j, "global_head_dim", 512);
  const int64_t global_kv = k_eq_v ? get_int(j, "num_global_key_value_heads", 0) : 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (types[i] != kFull) continue;
    layers[i].head_dim = global_hd;
    if (global_kv > 0) layers[i].n_kv_heads = global_kv;
  }
}

}  // namespace

int64_t Gemma4Params::max_q_dim() const {
  int64_t m = 0;
  for (const Gemma4Layer& l : layers) m = std::max(m, n_heads * l.head_dim);
  return m;
}

namespace {

void parse_globals(const json& j, int64_t n_layers, Gemma4Params& p) {
  if (present(j, "use_bidirectional_attention") && j.at("use_bidirectional_attention") == "all")
    throw Error(kComponent, "gemma4: use_bidirectional_attention='all' (a non-causal encoder) is not supported");
  const std::string act = present(j, "hidden_activation") && j.at("hidden_activation").is_string()
                              ? j.at("hidden_activation").get<std::string>()
                              : "gelu_pytorch_tanh";
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")  // both are the tanh approximation
    throw Error(kComponent, "gemma4: hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh)");
  p.ple_dim = get_int(j, "hidden_size_per_layer_input", 256);
  p.ple_vocab = get_int(j, "vocab_size_per_layer_input", 262144);
  p.n_kv_shared = get_int(j, "num_kv_shared_layers", 0);
  check(p.n_kv_shared < n_layers, kComponent, "gemma4: num_kv_shared_layers must be < num_hidden_layers");
  p.attention_bias = get_bool(j, "attention_bias", false);
  p.moe = get_bool(j, "enable_moe_block", false);
  if (p.moe) {
    p.n_experts = get_int(j, "num_experts", 0);
    p.top_k = get_int(j, "top_k_experts", 0);
    p.moe_d_ff = get_int(j, "moe_intermediate_size", 0);
    check(p.n_experts > 0 && p.top_k > 0 && p.top_k <= p.n_experts && p.moe_d_ff > 0, kComponent,
          "gemma4: enable_moe_block needs num_experts, top_k_experts (<= num_experts) and moe_intermediate_size");
  }
  p.final_softcap = static_cast<float>(get_num(j, "final_logit_softcapping", 0.0));
  p.rope_sliding = parse_rope(j, kSliding);
  p.rope_full = parse_rope(j, kFull);
}

// Gemma4TextAttention: layers from num_hidden_layers - num_kv_shared_layers on reuse the K/V of the last
// earlier layer of their own kind.
void link_kv_source(const std::vector<std::string>& types, int64_t first_shared, size_t i, Gemma4Params& p) {
  Gemma4Layer& l = p.layers[i];
  for (int64_t s = first_shared - 1; s >= 0; --s)
    if (types[static_cast<size_t>(s)] == types[i]) {
      l.kv_source = static_cast<int>(s);
      break;
    }
  check(l.kv_source >= 0, kComponent,
        strfmt("gemma4: KV-shared layer %zu has no earlier %s layer to share with", i, types[i].c_str()));
  const Gemma4Layer& src = p.layers[static_cast<size_t>(l.kv_source)];
  check(src.head_dim == l.head_dim && src.n_kv_heads == l.n_kv_heads, kComponent,
        strfmt("gemma4: KV-shared layer %zu and its source layer %d differ in head_dim or KV heads", i, l.kv_source));
}

}  // namespace

Gemma4Params gemma4_params(const ModelConfig& cfg) {
  const json j = json::parse(cfg.hparams_json.empty() ? "{}" : cfg.hparams_json);
  Gemma4Params p;
  p.n_heads = cfg.n_heads;
  const int64_t n = cfg.n_layers;
  parse_globals(j, n, p);
  const bool k_eq_v = get_bool(j, "attention_k_eq_v", false);
  const bool double_wide = get_bool(j, "use_double_wide_mlp", false);
  const int window = static_cast<int>(get_int(j, "sliding_window", 512));
  const std::vector<std::string> types = layer_types(j, n);
  p.layers.resize(static_cast<size_t>(n));
  apply_layer_shapes(j, cfg, types, k_eq_v, p.layers);
  const int64_t first_shared = n - p.n_kv_shared;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    Gemma4Layer& l = p.layers[i];
    l.sliding = types[i] == kSliding;
    l.window = l.sliding ? window : 0;
    check(l.head_dim > 0 && l.head_dim % 2 == 0 && l.n_kv_heads > 0 && cfg.n_heads % l.n_kv_heads == 0,
          kComponent, strfmt("gemma4: layer %zu: head_dim %lld must be even and num_attention_heads a multiple "
                             "of its %lld KV heads", i, (long long)l.head_dim, (long long)l.n_kv_heads));
    l.k_eq_v = k_eq_v && !l.sliding;
    const bool shared = p.n_kv_shared > 0 && static_cast<int64_t>(i) >= first_shared;
    l.d_ff = cfg.d_ff * (double_wide && shared ? 2 : 1);
    if (shared) link_kv_source(types, first_shared, i, p);
  }
  return p;
}

std::vector<KvLayerSpec> gemma4_kv_layout(const ModelConfig& cfg) { return gemma4_kv_layout(gemma4_params(cfg)); }

std::vector<KvLayerSpec> gemma4_kv_layout(const Gemma4Params& p) {
  std::vector<KvLayerSpec> out;
  for (const Gemma4Layer& l : p.layers) {
    KvLayerSpec s;
    s.n_kv_heads = l.n_kv_heads;
    s.head_dim = l.head_dim;
    s.sliding_window = l.window;
    s.shares_kv_with = l.kv_source;
    out.push_back(s);
  }
  return out;
}

std::vector<float> gemma4_inv_freq(const Gemma4Rope& r, int64_t head_dim) {
  // HF: 1 / base ** (arange(0, 2 * angles, 2).float() / head_dim), exponent and power in f32.
  const int64_t half = head_dim / 2;
  const int64_t angles =
      r.proportional ? static_cast<int64_t>(std::floor(r.partial_rotary_factor * static_cast<double>(head_dim) / 2.0))
                     : half;
  std::vector<float> inv(static_cast<size_t>(half), 0.0f);
  for (int64_t i = 0; i < std::min(angles, half); ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(r.theta), e);
  }
  if (r.factor != 1.0)
    for (float& f : inv) f /= static_cast<float>(r.factor);
  return inv;
}

}  // namespace bunsen::model::arch
