// config.json / generation_config.json -> ModelConfig. Per-family defaults follow the HF config classes'
// constructor defaults for keys a checkpoint omits. Both rope spellings are read: transformers 5
// `rope_parameters` and the legacy `rope_scaling` + `rope_theta`.
#include "model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/status.h"
#include "model/config_quant.h"

namespace bunsen::model {
namespace {

using nlohmann::json;
constexpr const char* kComponent = "config";

struct FamilyDefaults {
  const char* model_type;
  bool tie_word_embeddings;
  double rope_theta;
  double rms_norm_eps;
};

// Constructor defaults of the HF config classes, used only when a key is absent.
constexpr FamilyDefaults kFamilies[] = {
    {"llama", false, 10000.0, 1e-6},   {"mistral", false, 10000.0, 1e-6}, {"qwen2", false, 10000.0, 1e-6},
    {"qwen3", false, 10000.0, 1e-6},   {"smollm3", true, 2000000.0, 1e-6}, {"granite", false, 10000.0, 1e-6},
    {"phi3", false, 10000.0, 1e-5},
    {"gemma4_text", true, 10000.0, 1e-6}, {"gemma4", true, 10000.0, 1e-6},  // Gemma4TextConfig defaults
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(kComponent, "cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t get_int(const char* key) const {
    if (!has(key)) throw Error(kComponent, source_ + ": missing required key '" + key + "'");
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw Error(kComponent, source_ + ": '" + key + "' must be a non-negative integer, got " + v.dump());
    return v.get<int64_t>();
  }
  int64_t get_int(const char* key, int64_t def) const { return has(key) ? get_int(key) : def; }
  double get_num(const char* key, double def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_number()) throw Error(kComponent, source_ + ": '" + key + "' must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool get_bool(const char* key, bool def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_boolean()) throw Error(kComponent, source_ + ": '" + key + "' must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::vector<int64_t> get_ids(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const json& v = j_.at(key);
    if (v.is_number_integer()) {
      out.push_back(v.get<int64_t>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_number_integer()) throw Error(kComponent, source_ + ": '" + key + "' must hold integers");
        out.push_back(e.get<int64_t>());
      }
    } else {
      throw Error(kComponent, source_ + ": '" + key + "' must be an integer or a list of integers");
    }
    return out;
  }

 private:
  const json& j_;
  const std::string& source_;
};

RopeType parse_rope_type(const std::string& t, const std::string& source) {
  if (t == "default" || t.empty()) return RopeType::kDefault;
  if (t == "linear") return RopeType::kLinear;
  if (t == "dynamic") return RopeType::kDynamic;
  if (t == "llama3") return RopeType::kLlama3;
  if (t == "yarn") return RopeType::kYarn;
  throw Error(kComponent, source + ": unsupported rope type '" + t +
                              "' (supported: default, linear, dynamic, llama3, yarn)");
}

void parse_rope(const json& j, const FamilyDefaults& fam, ModelConfig& cfg, const std::string& source) {
  RopeConfig& r = cfg.rope;
  Reader top(j, source);
  r.theta = top.get_num("rope_theta", fam.rope_theta);
  r.partial_rotary_factor = top.get_num("partial_rotary_factor", 1.0);
  const json* params = nullptr;
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) params = &j.at("rope_parameters");
  else if (j.contains("rope_scaling") && j.at("rope_scaling").is_object()) params = &j.at("rope_scaling");
  if (!params) return;
  const std::string where = source + " rope parameters";
  Reader p(*params, where);
  std::string type;
  if (params->contains("rope_type") && params->at("rope_type").is_string()) type = params->at("rope_type");
  else if (params->contains("type") && params->at("type").is_string()) type = params->at("type");
  r.type = parse_rope_type(type, source);
  r.theta = p.get_num("rope_theta", r.theta);
  r.partial_rotary_factor = p.get_num("partial_rotary_factor", r.partial_rotary_factor);
  r.factor = p.get_num("factor", 0.0);  // 0 = absent (yarn derives it, others need it)
  r.low_freq_factor = p.get_num("low_freq_factor", 1.0);
  r.high_freq_factor = p.get_num("high_freq_factor", 4.0);
  // Phi3-style checkpoints keep the pretraining length at top level; HF gives that priority.
  r.original_max_position_embeddings =
      top.get_int("original_max_position_embeddings", p.get_int("original_max_position_embeddings", 0));
  r.beta_fast = p.get_num("beta_fast", 32.0);
  r.beta_slow = p.get_num("beta_slow", 1.0);
  if (p.has("attention_factor")) r.attention_factor = p.get_num("attention_factor", 1.0);
  if (p.has("mscale")) r.mscale = p.get_num("mscale", 1.0);
  if (p.has("mscale_all_dim")) r.mscale_all_dim = p.get_num("mscale_all_dim", 0.0);
  r.truncate = p.get_bool("truncate", true);
  if (r.type == RopeType::kYarn && r.factor == 0.0 && r.original_max_position_embeddings > 0)
    r.factor = static_cast<double>(top.get_int("max_position_embeddings", 0)) /
               static_cast<double>(r.original_max_position_embeddings);
  if (r.type == RopeType::kDefault) r.factor = 1.0;
  else if (!(r.factor > 0)) throw Error(kComponent, where + ": 'factor' must be > 0");
}

void parse_layers(const json& j, ModelConfig& cfg, const std::string& source) {
  Reader rd(j, source);
  const auto n = static_cast<size_t>(cfg.n_layers);
  cfg.sliding_window.assign(n, 0);
  cfg.use_rope.assign(n, true);
  const std::string& mt = cfg.model_type;
  int window = static_cast<int>(rd.get_int("sliding_window", 0));
  if (j.contains("layer_types") && j.at("layer_types").is_array()) {
    const json& lt = j.at("layer_types");
    if (lt.size() != n) throw Error(kComponent, source + ": 'layer_types' must have num_hidden_layers entries");
    for (size_t i = 0; i < n; ++i) {
      const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      if (t == "sliding_attention") cfg.sliding_window[i] = window;
      else if (t != "full_attention" && t != "linear_attention")  // linear: qwen3.5 / qwen3-next (arch/)
        throw Error(kComponent, source + ": unsupported layer type '" + t + "' in 'layer_types'");
    }
  } else if (mt == "mistral" || mt == "phi3") {
    for (auto& w : cfg.sliding_window) w = window;
  } else if ((mt == "qwen2" || mt == "qwen3" || mt == "smollm3") && rd.get_bool("use_sliding_window", false)) {
    int64_t max_window_layers = rd.get_int("max_window_layers", cfg.n_layers);
    for (size_t i = 0; i < n; ++i) cfg.sliding_window[i] = static_cast<int64_t>(i) >= max_window_layers ? window : 0;
  }
  if (mt == "smollm3") {
    if (j.contains("no_rope_layers") && j.at("no_rope_layers").is_array()) {
      const json& nr = j.at("no_rope_layers");
      if (nr.size() != n) throw Error(kComponent, source + ": 'no_rope_layers' must have num_hidden_layers entries");
      for (size_t i = 0; i < n; ++i) cfg.use_rope[i] = nr[i].get<int>() != 0;  // 1 = this layer uses rope
    } else {
      int64_t interval = rd.get_int("no_rope_layer_interval", 4);
      for (size_t i = 0; i < n; ++i) cfg.use_rope[i] = interval <= 0 || (i + 1) % interval != 0;
    }
  }
}

// ---- gemma2 / gemma3 (issue 9) ----
// Real Gemma configs (above all the nested text_config of the gemma3 wrapper) omit every key that equals the
// HF config class default, so those defaults are filled in before the generic parse. A key present as null
// stays null (for the soft-caps: off).

bool is_gemma(const std::string& mt) { return mt == "gemma2" || mt == "gemma3_text" || mt == "gemma3"; }

void gemma_json_defaults(json& j, const std::string& mt) {
  const bool g2 = mt == "gemma2";
  const json defaults = {{"vocab_size", g2 ? 256000 : 262208},
                         {"hidden_size", 2304},
                         {"intermediate_size", 9216},
                         {"num_hidden_layers", 26},
                         {"num_attention_heads", 8},
                         {"num_key_value_heads", 4},
                         {"head_dim", 256},
                         {"max_position_embeddings", g2 ? 8192 : 131072},
                         {"rms_norm_eps", 1e-6},
                         {"tie_word_embeddings", true},
                         {"query_pre_attn_scalar", 256},
                         {"sliding_window", 4096},
                         {"final_logit_softcapping", g2 ? json(30.0) : json(nullptr)},
                         {"attn_logit_softcapping", g2 ? json(50.0) : json(nullptr)}};
  for (const auto& [k, v] : defaults.items())
    if (!j.contains(k)) j[k] = v;
}

// Gemma 3 has one RoPE per layer kind: transformers 5 nests them ({"sliding_attention": {...},
// "full_attention": {...}}); older configs give rope_theta + rope_scaling (global layers) and
// rope_local_base_freq (local layers, never scaled). A flat rope_parameters is taken as the global one.
RopeConfig gemma3_rope(const json& j, bool global, const ModelConfig& cfg, const std::string& source) {
  const char* kind = global ? "full_attention" : "sliding_attention";
  json g = json::object();
  g["max_position_embeddings"] = cfg.max_position_embeddings;
  const json* rp = j.contains("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters")
                                                                                           : nullptr;
  const bool nested = rp && (rp->contains("full_attention") || rp->contains("sliding_attention"));
  if (nested && rp->contains(kind) && rp->at(kind).is_object()) g["rope_parameters"] = rp->at(kind);
  else if (!nested && global && rp) g["rope_parameters"] = *rp;
  else if (!nested && global && j.contains("rope_scaling") && j.at("rope_scaling").is_object())
    g["rope_scaling"] = j.at("rope_scaling");
  const char* theta_key = global ? "rope_theta" : "rope_local_base_freq";
  g["rope_theta"] = j.contains(theta_key) && j.at(theta_key).is_number() ? j.at(theta_key).get<double>()
                                                                          : (global ? 1000000.0 : 10000.0);
  ModelConfig tmp;
  tmp.max_position_embeddings = cfg.max_position_embeddings;
  parse_rope(g, FamilyDefaults{"", true, g["rope_theta"].get<double>(), 1e-6}, tmp, source + " (" + kind + ")");
  return tmp.rope;
}

void parse_gemma(const json& j, ModelConfig& cfg, const std::string& source) {
  Reader rd(j, source);
  const bool g2 = cfg.model_type == "gemma2";
  std::string act = j.contains("hidden_activation") && j.at("hidden_activation").is_string()
                        ? j.at("hidden_activation").get<std::string>()
                        : "gelu_pytorch_tanh";
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    throw Error(kComponent, source + ": hidden_activation '" + act +
                                "' is not supported for Gemma (supported: gelu_pytorch_tanh, gelu_new)");
  if (rd.get_bool("use_bidirectional_attention", false))
    throw Error(kComponent, source + ": use_bidirectional_attention (an embedding model) is not supported");
  cfg.attention_bias = rd.get_bool("attention_bias", false);  // q, k, v and o
  cfg.query_pre_attn_scalar = rd.get_num("query_pre_attn_scalar", 256.0);
  check(cfg.query_pre_attn_scalar > 0, kComponent, source + ": query_pre_attn_scalar must be > 0");
  // HF's Gemma 3 attention never passes its attn_logit_softcapping to the attention function.
  cfg.attn_logit_softcap = g2 ? rd.get_num("attn_logit_softcapping", 0.0) : 0.0;
  cfg.final_logit_softcap = rd.get_num("final_logit_softcapping", 0.0);
  check(cfg.attn_logit_softcap >= 0 && cfg.final_logit_softcap >= 0, kComponent,
        source + ": logit soft-caps must be >= 0");
  if (!(j.contains("layer_types") && j.at("layer_types").is_array())) {  // HF's default interleave
    const int64_t pattern = g2 ? 2 : rd.get_int("sliding_window_pattern", 6);
    const int window = static_cast<int>(rd.get_int("sliding_window", 4096));
    for (size_t i = 0; i < cfg.sliding_window.size(); ++i)
      cfg.sliding_window[i] = pattern > 0 && (static_cast<int64_t>(i) + 1) % pattern != 0 ? window : 0;
  }
  if (!g2) {
    cfg.rope = gemma3_rope(j, true, cfg, source);
    cfg.rope_local = gemma3_rope(j, false, cfg, source);
  }
}
// ---- end gemma2 / gemma3 ----

// ---- gemma4 (issue 9; its layer plan is parsed in arch/gemma4_params.cpp from hparams_json) ----
// Gemma4TextConfig's constructor defaults for the generic keys a nested text_config may omit.
void gemma4_json_defaults(json& j) {
  const json defaults = {{"vocab_size", 262144},      {"hidden_size", 2304},          {"intermediate_size", 9216},
                         {"num_hidden_layers", 30},   {"num_attention_heads", 8},     {"num_key_value_heads", 4},
                         {"head_dim", 256},           {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
                         {"tie_word_embeddings", true}};
  for (const auto& [k, v] : defaults.items())
    if (!j.contains(k)) j[k] = v;
}
// ---- end gemma4 ----

// ---- qwen3.5 / qwen3-next hybrid (issue 9) ----
// HF's config classes default partial_rotary_factor to 0.25 and derive layer_types from
// full_attention_interval (default 4) when a checkpoint omits them; the DeltaNet hyper-parameters are read
// by arch/qwen3_5.cpp from hparams_json.
bool is_qwen_hybrid(const std::string& mt) { return mt == "qwen3_5_text" || mt == "qwen3_5" || mt == "qwen3_next"; }

void qwen_hybrid_json_defaults(json& j) {
  const bool nested_prf = j.contains("rope_parameters") && j.at("rope_parameters").is_object() &&
                          j.at("rope_parameters").contains("partial_rotary_factor");
  if (!j.contains("partial_rotary_factor") && !nested_prf) j["partial_rotary_factor"] = 0.25;
  if (!j.contains("head_dim")) j["head_dim"] = 256;
  if (!(j.contains("layer_types") && j.at("layer_types").is_array()) && j.contains("num_hidden_layers") &&
      j.at("num_hidden_layers").is_number_integer()) {
    const int64_t interval =
        j.contains("full_attention_interval") && j.at("full_attention_interval").is_number_integer()
            ? j.at("full_attention_interval").get<int64_t>()
            : 4;
    json lt = json::array();
    for (int64_t i = 0; i < j.at("num_hidden_layers").get<int64_t>(); ++i)
      lt.push_back(interval > 0 && (i + 1) % interval == 0 ? "full_attention" : "linear_attention");
    j["layer_types"] = lt;
  }
}
// ---- end qwen3.5 / qwen3-next ----

const FamilyDefaults& family_defaults(const std::string& model_type) {
  for (const auto& f : kFamilies)
    if (model_type == f.model_type) return f;
  static const FamilyDefaults kGeneric{"", false, 10000.0, 1e-6};
  return kGeneric;
}

}  // namespace

float ModelConfig::attention_scale() const {
  if (attention_multiplier) return static_cast<float>(*attention_multiplier);
  if (query_pre_attn_scalar > 0) return static_cast<float>(std::pow(query_pre_attn_scalar, -0.5));  // gemma
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

int64_t ModelConfig::rotary_dim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
}

ModelConfig parse_config(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(kComponent, source + ": not valid JSON (" + e.what() + ")");
  }
  if (!root.is_object()) throw Error(kComponent, source + ": top level must be a JSON object");
  if (!root.contains("model_type") || !root.at("model_type").is_string())
    throw Error(kComponent, source + ": missing 'model_type'");
  // Multimodal checkpoints nest the language model's hyper-parameters in text_config.
  json j = root;
  if (root.contains("text_config") && root.at("text_config").is_object()) {
    j = root.at("text_config");
    for (const char* k : {"tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype"})
      if (!j.contains(k) && root.contains(k)) j[k] = root[k];
  }
  ModelConfig cfg;
  cfg.model_type = root.at("model_type").get<std::string>();
  if (is_gemma(cfg.model_type)) gemma_json_defaults(j, cfg.model_type);  // gemma2 / gemma3 (issue 9)
  if (cfg.model_type == "gemma4" || cfg.model_type == "gemma4_text") gemma4_json_defaults(j);  // (issue 9)
  if (is_qwen_hybrid(cfg.model_type)) qwen_hybrid_json_defaults(j);       // qwen3.5 / qwen3-next (issue 9)
  const FamilyDefaults& fam = family_defaults(cfg.model_type);
  Reader rd(j, source);
  cfg.vocab_size = rd.get_int("vocab_size");
  cfg.d_model = rd.get_int("hidden_size");
  cfg.n_layers = rd.get_int("num_hidden_layers");
  cfg.n_heads = rd.get_int("num_attention_heads");
  cfg.n_kv_heads = rd.get_int("num_key_value_heads", cfg.n_heads);
  check(cfg.vocab_size > 0 && cfg.d_model > 0 && cfg.n_layers > 0 && cfg.n_heads > 0 && cfg.n_kv_heads > 0,
        kComponent, source + ": vocab_size, hidden_size, num_hidden_layers and head counts must be > 0");
  check(cfg.n_heads % cfg.n_kv_heads == 0, kComponent,
        strfmt("%s: num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld)", source.c_str(),
               (long long)cfg.n_heads, (long long)cfg.n_kv_heads));
  cfg.head_dim = rd.get_int("head_dim", cfg.d_model / cfg.n_heads);
  check(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, kComponent, source + ": head_dim must be even and > 0");
  cfg.d_ff = rd.get_int("intermediate_size");
  cfg.rms_norm_eps = rd.get_num("rms_norm_eps", fam.rms_norm_eps);
  cfg.max_position_embeddings = rd.get_int("max_position_embeddings", 4096);
  cfg.tie_word_embeddings = rd.get_bool("tie_word_embeddings", fam.tie_word_embeddings);
  const std::string& mt = cfg.model_type;
  if (mt == "qwen2") {
    cfg.attention_bias = true;  // q/k/v only
  } else if (mt == "llama" || mt == "qwen3" || mt == "smollm3" || mt == "granite") {
    cfg.attention_bias = rd.get_bool("attention_bias", false);
    cfg.o_proj_bias = cfg.attention_bias;
  }
  if (mt == "llama" || mt == "granite") cfg.mlp_bias = rd.get_bool("mlp_bias", false);
  cfg.qk_norm = mt == "qwen3";
  cfg.fused_qkv = cfg.fused_gate_up = mt == "phi3";
  if (mt == "granite") {
    cfg.embedding_multiplier = rd.get_num("embedding_multiplier", 1.0);
    cfg.residual_multiplier = rd.get_num("residual_multiplier", 1.0);
    cfg.attention_multiplier = rd.get_num("attention_multiplier", 1.0);
    cfg.logits_scaling = rd.get_num("logits_scaling", 1.0);
  }
  parse_rope(j, fam, cfg, source);
  check(cfg.rotary_dim() % 2 == 0 && cfg.rotary_dim() <= cfg.head_dim, kComponent,
        source + ": partial_rotary_factor gives an odd or too large rotary dimension");
  parse_layers(j, cfg, source);
  if (is_gemma(cfg.model_type)) parse_gemma(j, cfg, source);  // gemma2 / gemma3 (issue 9)
  cfg.bos_token_ids = rd.get_ids("bos_token_id");
  cfg.eos_token_ids = rd.get_ids("eos_token_id");
  if (rd.has("pad_token_id") && j.at("pad_token_id").is_number_integer()) cfg.pad_token_id = j.at("pad_token_id").get<int64_t>();
  for (const char* k : {"torch_dtype", "dtype"})
    if (j.contains(k) && j.at(k).is_string())
      if (auto d = dtype_from_name(j.at(k).get<std::string>())) cfg.torch_dtype = *d;
  cfg.quantization = parse_quantization(root, source);
  cfg.hparams_json = j.dump();
  return cfg;
}

void apply_generation_config(ModelConfig& cfg, const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(kComponent, source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(kComponent, source + ": top level must be a JSON object");
  Reader rd(j, source);
  auto eos = rd.get_ids("eos_token_id");
  if (!eos.empty()) cfg.eos_token_ids = eos;
  auto bos = rd.get_ids("bos_token_id");
  if (!bos.empty()) cfg.bos_token_ids = bos;
  GenerationDefaults& g = cfg.generation;
  if (rd.has("temperature")) g.temperature = rd.get_num("temperature", 1.0);
  if (rd.has("top_p")) g.top_p = rd.get_num("top_p", 1.0);
  if (rd.has("top_k")) g.top_k = static_cast<int>(rd.get_int("top_k", 0));
  if (rd.has("min_p")) g.min_p = rd.get_num("min_p", 0.0);
  if (rd.has("repetition_penalty")) g.repetition_penalty = rd.get_num("repetition_penalty", 1.0);
  if (rd.has("do_sample")) g.do_sample = rd.get_bool("do_sample", false);
}

ModelConfig load_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ModelConfig cfg = parse_config(read_file(path), path);
  const std::string gen = dir + "/generation_config.json";
  if (std::ifstream(gen).good()) apply_generation_config(cfg, read_file(gen), gen);
  return cfg;
}

}  // namespace bunsen::model
