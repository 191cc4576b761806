// Gemma 4 weight loading, checkpoint-name resolution and the HF tensor manifest (gemma4_weights.h).
// Not the forward pass. Invariants: names are resolved once here (prefix chosen by where embed_tokens is);
// every loaded tensor's shape is checked against the layer plan; scalars (layer_scalar) are read to the host.
#include "model/arch/gemma4_weights.h"

#include <cstring>

#include "core/status.h"

namespace bunsen::model::arch {
namespace {

constexpr const char* kMoeRouter = "router.proj";
constexpr const char* kMoeExperts = "experts";
constexpr const char* kMoeMlx = "experts.switch_glu";  // mlx-lm SwitchGLU under the HF module name

std::string layer_prefix(const std::string& prefix, size_t i) { return prefix + "layers." + std::to_string(i) + "."; }

MoeSpec moe_spec(const ModelConfig& cfg, const Gemma4Params& p) {
  MoeSpec s;
  s.n_experts = p.n_experts;
  s.top_k = p.top_k;
  s.d_model = cfg.d_model;
  s.d_expert = p.moe_d_ff;
  s.scoring = kernels::MoeScoring::kSoftmax;
  s.norm_topk = true;  // Gemma4TextRouter renormalizes the top-k, then applies per_expert_scale
  s.act = kernels::MoeActivation::kGeluTanh;
  return s;
}

// A one-element float tensor's value, wherever it lives.
float read_scalar(const Tensor& t, const std::string& name) {
  check(t.numel() == 1 && is_float(t.dtype), "weights", "tensor '" + name + "' must hold one float");
  unsigned char raw[4] = {};
  if (t.device.is_cuda()) {
    kernels::Context ctx;
    kernels::copy_async(ctx, raw, t.data, dtype_size(t.dtype));
    kernels::synchronize(ctx);
  } else {
    std::memcpy(raw, t.data, dtype_size(t.dtype));
  }
  if (t.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, raw, sizeof v);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, raw, sizeof h);
  return t.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// A [n] f32 vector of ones on `device` (the weightless RMSNorm's weight).
void make_ones(Gemma4Weights& w, int64_t n, Device device) {
  w.ones_host = OwnedTensor::make(DType::kF32, {n});
  float* p = w.ones_host.tensor.ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  if (device.is_cpu()) {
    w.ones = w.ones_host.tensor;
    return;
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  w.ones_memory = kernels::DeviceMemory::allocate(device, bytes);
  kernels::upload(device, std::vector<kernels::HostToDevice>{{w.ones_memory.data(), p, bytes}}, bytes);
  w.ones = Tensor::view(w.ones_memory.data(), DType::kF32, {n}, device);
}

void load_attention(const WeightStore& ws, const ModelConfig& c, const Gemma4Layer& pl, const std::string& lp,
                    bool bias, Gemma4LayerWeights& l) {
  const int64_t d = c.d_model, hd = pl.head_dim, q_dim = c.n_heads * hd, kv_dim = pl.n_kv_heads * hd;
  const std::string a = lp + "self_attn.";
  l.q = load_linear(ws, c, a + "q_proj", q_dim, d, bias);
  l.o = load_linear(ws, c, a + "o_proj", d, q_dim, bias);
  l.q_norm = float_weight(ws, a + "q_norm.weight", {hd});
  if (pl.kv_source >= 0) return;
  l.k = load_linear(ws, c, a + "k_proj", kv_dim, d, bias);
  if (!pl.k_eq_v) l.v = load_linear(ws, c, a + "v_proj", kv_dim, d, bias);
  l.k_norm = float_weight(ws, a + "k_norm.weight", {hd});
}

void load_layer(const WeightStore& ws, const ModelConfig& c, const Gemma4Params& p, size_t i,
                const std::string& prefix, Gemma4LayerWeights& l) {
  const Gemma4Layer& pl = p.layers[i];
  const std::string lp = layer_prefix(prefix, i);
  const int64_t d = c.d_model;
  l.in_norm = float_weight(ws, lp + "input_layernorm.weight", {d});
  l.post_attn_norm = float_weight(ws, lp + "post_attention_layernorm.weight", {d});
  l.pre_ffw_norm = float_weight(ws, lp + "pre_feedforward_layernorm.weight", {d});
  l.post_ffw_norm = float_weight(ws, lp + "post_feedforward_layernorm.weight", {d});
  load_attention(ws, c, pl, lp, p.attention_bias, l);
  l.gate = load_linear(ws, c, lp + "mlp.gate_proj", pl.d_ff, d, false);
  l.up = load_linear(ws, c, lp + "mlp.up_proj", pl.d_ff, d, false);
  l.down = load_linear(ws, c, lp + "mlp.down_proj", d, pl.d_ff, false);
  if (p.ple_dim > 0) {
    l.ple_gate = load_linear(ws, c, lp + "per_layer_input_gate", p.ple_dim, d, false);
    l.ple_proj = load_linear(ws, c, lp + "per_layer_projection", d, p.ple_dim, false);
    l.post_ple_norm = float_weight(ws, lp + "post_per_layer_input_norm.weight", {d});
  }
  if (p.moe) {
    MoeNames names{kMoeRouter, kMoeExperts, kMoeMlx};
    l.moe = load_moe(ws, c, lp.substr(0, lp.size() - 1), moe_spec(c, p), names);
    l.moe.expert_scale = float_weight(ws, lp + "router.per_expert_scale", {p.n_experts});
    l.router_scale = float_weight(ws, lp + "router.scale", {d});
    l.pre_ffw_norm_2 = float_weight(ws, lp + "pre_feedforward_layernorm_2.weight", {d});
    l.post_ffw_norm_1 = float_weight(ws, lp + "post_feedforward_layernorm_1.weight", {d});
    l.post_ffw_norm_2 = float_weight(ws, lp + "post_feedforward_layernorm_2.weight", {d});
  }
  // A buffer HF keeps in the state dict; checkpoints without it mean 1.
  if (ws.has(lp + "layer_scalar")) l.layer_scalar = read_scalar(ws.get(lp + "layer_scalar"), lp + "layer_scalar");
  l.inv_freq = gemma4_inv_freq(pl.sliding ? p.rope_sliding : p.rope_full, pl.head_dim);
}

}  // namespace

std::string gemma4_prefix(const WeightStore& ws, const ModelConfig& cfg) {
  // The wrapper's own layout first: a gemma4 checkpoint keeps its language model below the wrapper.
  const bool wrapper = cfg.model_type == "gemma4";
  const std::vector<std::string> candidates =
      wrapper ? std::vector<std::string>{"model.language_model.", "language_model.model.", "model."}
              : std::vector<std::string>{"model.", "model.language_model.", "language_model.model."};
  for (const std::string& c : candidates)
    if (ws.has(c + "embed_tokens.weight")) return c;
  throw Error("weights", "gemma4: no embed_tokens.weight under any of model., model.language_model., "
                         "language_model.model. (is this a Gemma 4 checkpoint?)");
}

Gemma4Weights load_gemma4_weights(const WeightStore& ws, const ModelConfig& c, const Gemma4Params& p) {
  Gemma4Weights w;
  w.prefix = gemma4_prefix(ws, c);
  const std::string& pre = w.prefix;
  const int64_t d = c.d_model, ple_all = c.n_layers * p.ple_dim;
  w.embed = load_embedding(ws, c, pre + "embed_tokens", c.vocab_size, d);
  if (p.ple_dim > 0) {
    w.embed_ple = load_embedding(ws, c, pre + "embed_tokens_per_layer", p.ple_vocab, ple_all);
    w.ple_model_proj = load_linear(ws, c, pre + "per_layer_model_projection", ple_all, d, false);
    w.ple_proj_norm = float_weight(ws, pre + "per_layer_projection_norm.weight", {p.ple_dim});
  }
  w.final_norm = float_weight(ws, pre + "norm.weight", {d});
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed.as_linear();
  } else {  // next to the wrapper's model (HF) or inside its language model (mlx-vlm)
    const std::string head = pre == "language_model.model." ? "language_model.lm_head" : "lm_head";
    w.lm_head = load_linear(ws, c, head, c.vocab_size, d, false);
  }
  int64_t max_hd = 0;
  for (const Gemma4Layer& l : p.layers) max_hd = std::max(max_hd, l.head_dim);
  make_ones(w, max_hd, ws.device());
  w.layers.resize(p.layers.size());
  for (size_t i = 0; i < p.layers.size(); ++i) load_layer(ws, c, p, i, pre, w.layers[i]);
  return w;
}

size_t gemma4_weight_bytes_per_token(const Gemma4Weights& w) {
  size_t total = w.embed.row_bytes() + w.final_norm.nbytes() + w.lm_head.bytes();
  if (!w.embed_ple.table.empty() || w.embed_ple.quantized())
    total += w.embed_ple.row_bytes() + w.ple_model_proj.bytes() + w.ple_proj_norm.nbytes();
  for (const Gemma4LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.in_norm, &l.post_attn_norm, &l.pre_ffw_norm, &l.post_ffw_norm, &l.q_norm, &l.k_norm,
                            &l.post_ple_norm, &l.router_scale, &l.pre_ffw_norm_2, &l.post_ffw_norm_1,
                            &l.post_ffw_norm_2})
      total += t->nbytes();
    for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj})
      total += p->bytes();
    if (l.moe.spec.n_experts > 0) total += l.moe.active_bytes();
  }
  return total;
}

std::vector<TensorSpec> gemma4_tensors(const ModelConfig& c) {
  const Gemma4Params p = gemma4_params(c);
  const std::string pre = c.model_type == "gemma4" ? "model.language_model." : "model.";
  const int64_t d = c.d_model, ple_all = c.n_layers * p.ple_dim;
  std::vector<TensorSpec> out;
  out.push_back({pre + "embed_tokens.weight", {c.vocab_size, d}});
  if (p.ple_dim > 0) {
    out.push_back({pre + "embed_tokens_per_layer.weight", {p.ple_vocab, ple_all}});
    out.push_back({pre + "per_layer_model_projection.weight", {ple_all, d}});
    out.push_back({pre + "per_layer_projection_norm.weight", {p.ple_dim}});
  }
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const Gemma4Layer& l = p.layers[i];
    const std::string lp = layer_prefix(pre, i), a = lp + "self_attn.";
    const int64_t q_dim = c.n_heads * l.head_dim, kv_dim = l.n_kv_heads * l.head_dim;
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      out.push_back({lp + n + ".weight", {d}});
    out.push_back({lp + "layer_scalar", {1}});
    auto proj = [&](const std::string& name, int64_t rows, int64_t cols) {
      out.push_back({a + name + ".weight", {rows, cols}});
      if (p.attention_bias) out.push_back({a + name + ".bias", {rows}});
    };
    proj("q_proj", q_dim, d);
    proj("o_proj", d, q_dim);
    out.push_back({a + "q_norm.weight", {l.head_dim}});
    if (l.kv_source < 0) {
      proj("k_proj", kv_dim, d);
      if (!l.k_eq_v) proj("v_proj", kv_dim, d);
      out.push_back({a + "k_norm.weight", {l.head_dim}});
    }
    out.push_back({lp + "mlp.gate_proj.weight", {l.d_ff, d}});
    out.push_back({lp + "mlp.up_proj.weight", {l.d_ff, d}});
    out.push_back({lp + "mlp.down_proj.weight", {d, l.d_ff}});
    if (p.ple_dim > 0) {
      out.push_back({lp + "per_layer_input_gate.weight", {p.ple_dim, d}});
      out.push_back({lp + "per_layer_projection.weight", {d, p.ple_dim}});
      out.push_back({lp + "post_per_layer_input_norm.weight", {d}});
    }
    if (p.moe) {
      append_moe_tensors(out, lp.substr(0, lp.size() - 1), moe_spec(c, p), MoeNames{kMoeRouter, kMoeExperts, kMoeMlx});
      out.push_back({lp + "router.scale", {d}});
      out.push_back({lp + "router.per_expert_scale", {p.n_experts}});
      for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
        out.push_back({lp + n + ".weight", {d}});
    }
  }
  out.push_back({pre + "norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

}  // namespace bunsen::model::arch
