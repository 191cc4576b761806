// Qwen3-MoE decoder (model_type qwen3_moe): Qwen3 attention (GQA, per-head q/k RMSNorm, RoPE) and, per
// layer, either the routed-expert MLP (model/moe.h: softmax router, top-k, norm_topk_prob) or a dense SwiGLU
// MLP: sparse where the layer is not in mlp_only_layers, num_experts > 0 and (layer + 1) % decoder_sparse_step
// == 0 (HF's rule). Expert checkpoints in the transformers 5.x stacked layout, Hub per-expert tensors or MLX
// switch_mlp (float or quantized) all load without a copy (moe.cpp). Runs on the CPU (f32 activations) and
// CUDA (f32 residual stream, bf16 activations), like llama.cpp. Not llama.cpp: that file is left alone.
// Sliding-window layers use StepBatch::slots_for/tables_for(window) (their own block space when the Runner has one).
#include "model/arch/qwen3_moe.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/residual.h"

namespace bunsen::model::arch {
namespace {

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i); }

// The qwen3_moe keys of config.json that ModelConfig does not hold.
struct MoeHparams {
  MoeSpec spec;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool attention_bias = false;
  int sliding_window = 0;  // every layer when use_sliding_window
};

MoeHparams parse_hparams(const ModelConfig& c) {
  const auto j = nlohmann::json::parse(c.hparams_json);
  auto num = [&](const char* k, int64_t def) {
    return j.contains(k) && j.at(k).is_number_integer() ? j.at(k).get<int64_t>() : def;
  };
  auto flag = [&](const char* k, bool def) { return j.contains(k) && j.at(k).is_boolean() ? j.at(k).get<bool>() : def; };
  MoeHparams h;
  h.spec.n_experts = num("num_experts", num("num_local_experts", 128));
  h.spec.top_k = num("num_experts_per_tok", 8);
  h.spec.d_model = c.d_model;
  h.spec.d_expert = num("moe_intermediate_size", 768);
  h.spec.norm_topk = flag("norm_topk_prob", false);
  h.decoder_sparse_step = num("decoder_sparse_step", 1);
  if (j.contains("mlp_only_layers") && j.at("mlp_only_layers").is_array())
    for (const auto& v : j.at("mlp_only_layers")) h.mlp_only_layers.push_back(v.get<int64_t>());
  h.attention_bias = flag("attention_bias", false);
  if (flag("use_sliding_window", false)) h.sliding_window = static_cast<int>(num("sliding_window", 0));
  const std::string act = j.contains("hidden_act") && j.at("hidden_act").is_string() ? j.at("hidden_act").get<std::string>()
                                                                                     : "silu";
  check(act == "silu", "config", "qwen3_moe: hidden_act '" + act + "' is not supported (silu)");
  check(h.decoder_sparse_step > 0, "config", "qwen3_moe: decoder_sparse_step must be > 0");
  check(h.spec.n_experts == 0 || (h.spec.top_k >= 1 && h.spec.top_k <= h.spec.n_experts), "config",
        "qwen3_moe: num_experts_per_tok must be in [1, num_experts]");
  return h;
}

bool is_sparse(const MoeHparams& h, int64_t layer) {
  for (int64_t l : h.mlp_only_layers)
    if (l == layer) return false;
  return h.spec.n_experts > 0 && (layer + 1) % h.decoder_sparse_step == 0;
}

struct Layer {
  Tensor in_norm, post_norm;  // [d_model]
  Tensor q_norm, k_norm;      // [head_dim]
  Linear q, k, v, o;
  Linear gate, up, down;      // dense layers
  std::unique_ptr<MoeLayer> moe;  // sparse layers
  kernels::AttentionParams attn;
};

class Qwen3Moe final : public Model {
 public:
  Qwen3Moe(const ModelConfig& cfg, WeightStore weights)
      : cfg_(cfg), hp_(parse_hparams(cfg)), weights_(std::move(weights)),
        act_dtype_(weights_.device().is_cuda() ? DType::kBF16 : DType::kF32) {
    load();
  }

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return weights_.device(); }

  std::vector<KvLayerSpec> kv_layout() const override {
    return std::vector<KvLayerSpec>(static_cast<size_t>(cfg_.n_layers),
                                    KvLayerSpec{cfg_.n_kv_heads, cfg_.head_dim, hp_.sliding_window});
  }

  size_t workspace_bytes(int64_t max_tokens, int64_t max_out) const override {
    return model::workspace_bytes(buffer_specs(max_tokens, max_out));
  }

  // Dense parts plus, per sparse layer, the router and the top_k experts a token reads.
  size_t weight_bytes_per_token() const override {
    size_t total = final_norm_.nbytes() + lm_head_.bytes() + embed_.row_bytes();
    for (const Layer& l : layers_) {
      total += l.in_norm.nbytes() + l.post_norm.nbytes() + l.q_norm.nbytes() + l.k_norm.nbytes();
      for (const Linear* p : {&l.q, &l.k, &l.v, &l.o}) total += p->bytes();
      total += l.moe ? l.moe->active_bytes() : l.gate.bytes() + l.up.bytes() + l.down.bytes();
    }
    return total;
  }

  void forward(const ForwardArgs& a) override;

 private:
  // x, h, q, k, v, attn, proj, gate, up, act, xo, then the MoE buffers (logits, ids, weights).
  std::vector<WorkspaceSpec> buffer_specs(int64_t n, int64_t n_out) const {
    const int64_t q_dim = cfg_.n_heads * cfg_.head_dim, kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    const int64_t d = cfg_.d_model, f = cfg_.d_ff;
    const DType a = act_dtype_, f32 = DType::kF32;
    std::vector<WorkspaceSpec> s = {{f32, n, d},    {a, n, d},     {a, n, q_dim},   {a, n, kv_dim},
                                    {a, n, kv_dim}, {a, n, q_dim}, {a, n, d},       {a, n, f},
                                    {a, n, f},      {a, n, f},     {f32, n_out, d}, {f32, n, d}};
    append_moe_workspace(s, hp_.spec, n);
    return s;
  }

  void load();
  // pre (optional): the residual add + norm that produce h (kernels::AddRmsNorm), inside the first
  // projection's GEMV where it applies, else add_rms_norm first (always on routed-expert layers).
  void attention_block(const ForwardArgs& a, const Layer& l, const kernels::PagedKv& kv, Tensor h, Tensor out,
                       const kernels::AddRmsNorm* pre);
  void mlp_block(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out, const kernels::AddRmsNorm* pre);

  ModelConfig cfg_;
  MoeHparams hp_;
  WeightStore weights_;
  DType act_dtype_;
  Embedding embed_;    // [vocab_size, d_model]
  Tensor final_norm_;  // [d_model]
  Linear lm_head_;     // [vocab_size, d_model] (embed_ when tied)
  std::vector<Layer> layers_;
  RopeTable rope_;
  kernels::RopeParams rope_params_;
  // Step scratch, allocated from the workspace in forward().
  Tensor q_, k_, v_, attn_, gate_, up_, act_;
  MoeBuffers moe_buf_;
};

void Qwen3Moe::load() {
  const ModelConfig& c = cfg_;
  check(c.rope.type != RopeType::kDynamic, "config", "qwen3_moe: dynamic RoPE is not supported");
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  const bool bias = hp_.attention_bias;
  embed_ = load_embedding(weights_, c, "model.embed_tokens", c.vocab_size, d);
  final_norm_ = float_weight(weights_, "model.norm.weight", {d});
  lm_head_ = c.tie_word_embeddings ? embed_.as_linear() : load_linear(weights_, c, "lm_head", c.vocab_size, d, false);
  rope_ = compute_rope(c, 0);
  rope_params_ = {rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    Layer l;
    l.in_norm = float_weight(weights_, p + ".input_layernorm.weight", {d});
    l.post_norm = float_weight(weights_, p + ".post_attention_layernorm.weight", {d});
    l.q = load_linear(weights_, c, p + ".self_attn.q_proj", q_dim, d, bias);
    l.k = load_linear(weights_, c, p + ".self_attn.k_proj", kv_dim, d, bias);
    l.v = load_linear(weights_, c, p + ".self_attn.v_proj", kv_dim, d, bias);
    l.o = load_linear(weights_, c, p + ".self_attn.o_proj", d, q_dim, bias);
    l.q_norm = float_weight(weights_, p + ".self_attn.q_norm.weight", {hd});
    l.k_norm = float_weight(weights_, p + ".self_attn.k_norm.weight", {hd});
    if (is_sparse(hp_, i)) {
      l.moe = std::make_unique<MoeLayer>(load_moe(weights_, c, p + ".mlp", hp_.spec));
    } else {
      l.gate = load_linear(weights_, c, p + ".mlp.gate_proj", c.d_ff, d, false);
      l.up = load_linear(weights_, c, p + ".mlp.up_proj", c.d_ff, d, false);
      l.down = load_linear(weights_, c, p + ".mlp.down_proj", d, c.d_ff, false);
    }
    l.attn.scale = c.attention_scale();
    l.attn.sliding_window = hp_.sliding_window;
    layers_.push_back(std::move(l));
  }
}

void Qwen3Moe::attention_block(const ForwardArgs& a, const Layer& l, const kernels::PagedKv& kv, Tensor h,
                               Tensor out, const kernels::AddRmsNorm* pre) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), hd = cfg_.head_dim;
  project(ctx, h, {{&l.q, q_}, {&l.k, k_}, {&l.v, v_}}, pre);  // one GEMV launch on CUDA decode steps
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor qh = q_.reshape({n * cfg_.n_heads, hd}), kh = k_.reshape({n * cfg_.n_kv_heads, hd});
  kernels::rms_norm(ctx, qh, qh, l.q_norm, eps);
  kernels::rms_norm(ctx, kh, kh, l.k_norm, eps);
  Tensor q3 = q_.reshape({n, cfg_.n_heads, hd}), k3 = k_.reshape({n, cfg_.n_kv_heads, hd});
  Tensor v3 = v_.reshape({n, cfg_.n_kv_heads, hd}), o3 = attn_.reshape({n, cfg_.n_heads, hd});
  kernels::rope_kv_write(ctx, q3, k3, v3, kv, b.positions, b.slots_for(l.attn.sliding_window), rope_params_);
  const int64_t nd = b.n_single;
  if (device().is_cuda() && nd > 0 && nd < n) {  // decode rows and prefill chunks take different kernels
    auto rows = [](const Tensor& t, int64_t s, int64_t e) { return t.slice(0, s, e); };
    const kernels::AttentionMeta md{rows(b.positions, 0, nd), rows(b.seq_index, 0, nd), b.tables_for(l.attn.sliding_window),
                                    rows(b.slots_for(l.attn.sliding_window), 0, nd)};
    const kernels::AttentionMeta mp{rows(b.positions, nd, n), rows(b.seq_index, nd, n), b.tables_for(l.attn.sliding_window),
                                    rows(b.slots_for(l.attn.sliding_window), nd, n)};
    kernels::paged_attention(ctx, rows(o3, 0, nd), rows(q3, 0, nd), kv, md, l.attn);
    kernels::paged_attention(ctx, rows(o3, nd, n), rows(q3, nd, n), kv, mp, l.attn);
  } else {
    const kernels::AttentionMeta meta{b.positions, b.seq_index, b.tables_for(l.attn.sliding_window), b.slots_for(l.attn.sliding_window)};
    kernels::paged_attention(ctx, o3, q3, kv, meta, l.attn);
  }
  l.o(ctx, out, attn_);
}

void Qwen3Moe::mlp_block(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out,
                         const kernels::AddRmsNorm* pre) {
  if (l.moe) {
    if (pre != nullptr) kernels::add_rms_norm(ctx, h, *pre);
    return moe_forward(ctx, *l.moe, out, h, moe_buf_);
  }
  gated_mlp(ctx, l.gate, l.up, l.down, h, out, act_, gate_, up_, kernels::GluAct::kSilu, pre);
}

void Qwen3Moe::forward(const ForwardArgs& a) {
  const StepBatch& b = *a.batch;
  kernels::Context& ctx = *a.ctx;
  const int64_t n = b.n_tokens(), n_out = b.n_out();
  check(a.kv.size() == layers_.size(), "model", "forward: KV cache has the wrong number of layers");
  if (a.logits.dim(0) != n_out || a.logits.dim(1) != cfg_.vocab_size)
    throw Error("model", "forward: logits must be [n_out, vocab_size], got " + a.logits.shape_str());
  Arena& ws = *a.workspace;
  ws.reset();
  const auto specs = buffer_specs(n, n_out);
  std::vector<Tensor> t;
  for (size_t i = 0; i < 12; ++i) t.push_back(ws.alloc(specs[i].dtype, {specs[i].rows, specs[i].cols}));
  Tensor x = t[0], h = t[1], proj = t[6], xo = t[10];
  q_ = t[2], k_ = t[3], v_ = t[4], attn_ = t[5], gate_ = t[7], up_ = t[8], act_ = t[9];
  moe_buf_ = alloc_moe_buffers(ws, hp_.spec, n);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);

  embed_(ctx, x, b.token_ids);
  if (a.hook) a.hook->on("embed", -1, x);
  if (a.hook) a.hook->on("decoder_in", -1, x);
  // As llama.cpp's forward: with norms_in_projections (decode steps without a hook, fused_norm_enabled())
  // each residual add + norm runs in the prologue of the projection that reads it (model::Residual; routed-
  // expert layers run it as add_rms_norm); elsewhere add_rms_norm updates x in place.
  Residual res(x, t[11], norms_in_projections(a.hook != nullptr, n, false), eps);  // off: Qwen3's q/k norms
  if (!layers_.empty()) kernels::rms_norm(ctx, h, x, layers_[0].in_norm, eps);
  const kernels::AddRmsNorm* pre = nullptr;  // the norm that produces h, when left to its projection
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    attention_block(a, l, a.kv[i], h, proj, pre);
    mlp_block(ctx, l, h, proj, res.add_norm(ctx, h, proj, l.post_norm));
    if (l.moe) hook_routing(a.hook, static_cast<int>(i), moe_buf_);
    if (i + 1 < layers_.size())
      pre = res.add_norm(ctx, h, proj, layers_[i + 1].in_norm);
    else if (a.hook)  // the hook sees the last layer's output; otherwise head_input adds it
      kernels::add_scaled(ctx, res.x(), proj);
    if (a.hook) a.hook->on("layer", static_cast<int>(i), res.x());
  }
  const Tensor y_last = a.hook || layers_.empty() ? Tensor{} : proj;
  const Tensor ho = head_input(ctx, lm_head_, b, res.x(), y_last, 1.0f, xo, h, final_norm_, eps);
  if (a.hook) a.hook->on("final_norm", -1, ho);
  lm_head_(ctx, a.logits, ho);
  if (a.hook) a.hook->on("logits", -1, a.logits);
}

}  // namespace

std::vector<TensorSpec> qwen3_moe_tensors(const ModelConfig& c) {
  const MoeHparams hp = parse_hparams(c);
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, d}});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    out.push_back({p + ".input_layernorm.weight", {d}});
    for (auto [name, rows, in] : {std::tuple{"q_proj", q_dim, d}, {"k_proj", kv_dim, d}, {"v_proj", kv_dim, d},
                                  {"o_proj", d, q_dim}}) {
      out.push_back({p + ".self_attn." + name + ".weight", {rows, in}});
      if (hp.attention_bias) out.push_back({p + ".self_attn." + name + ".bias", {rows}});
    }
    out.push_back({p + ".self_attn.q_norm.weight", {hd}});
    out.push_back({p + ".self_attn.k_norm.weight", {hd}});
    out.push_back({p + ".post_attention_layernorm.weight", {d}});
    if (is_sparse(hp, i)) {
      append_moe_tensors(out, p + ".mlp", hp.spec);
    } else {
      out.push_back({p + ".mlp.gate_proj.weight", {c.d_ff, d}});
      out.push_back({p + ".mlp.up_proj.weight", {c.d_ff, d}});
      out.push_back({p + ".mlp.down_proj.weight", {d, c.d_ff}});
    }
  }
  out.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

std::unique_ptr<Model> create_qwen3_moe(const ModelConfig& cfg, WeightStore weights) {
  return std::make_unique<Qwen3Moe>(cfg, std::move(weights));
}

}  // namespace bunsen::model::arch
