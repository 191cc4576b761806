// Gemma 2 / 3 decoder (gemma2, gemma3_text, gemma3's language model): sandwich-norm blocks
//   x += rms1(attn(rms1(x)));  x += rms1(mlp(rms1(x)))        rms1 = RMSNorm with (1 + w)
// with GQA attention over the paged KV cache (scale query_pre_attn_scalar^-0.5, optional logit soft-cap,
// sliding-window layers interleaved with global ones, Gemma 3: q/k RMSNorms and a separate RoPE table for
// the sliding layers), a GeGLU MLP (tanh GELU), the embedding scaled by sqrt(d_model) and the final logit
// soft-cap. Checkpoint quirks resolved at load: the language model's key prefix (HF 5.x, the gemma3
// wrapper's model.language_model., the Hub/MLX language_model.model.), tied heads, MLX-quantized modules.
// Runs where its weights live: f32 activations on the CPU; on CUDA an f32 residual stream, bf16 otherwise,
// and decode steps run the MLP's gate/up/GeGLU as one launch (gated_mlp).
// Sliding layers write and read through StepBatch::slots_for/tables_for(window): the Runner's sliding block
// space when it has one, the shared tables otherwise.
#include "model/arch/gemma.h"

#include <array>
#include <cmath>
#include <tuple>

#include "core/status.h"
#include "model/layers.h"

namespace bunsen::model::arch {
namespace {

constexpr float kNormOffset = 1.0f;  // Gemma's RMSNorm multiplies by (1 + w)

struct GemmaLayer {
  Tensor in_norm, post_attn_norm, pre_ff_norm, post_ff_norm;  // [d_model], applied as (1 + w)
  Tensor q_norm, k_norm;                                      // [head_dim] (gemma3) or empty
  Linear q, k, v, o, gate, up, down;
  bool local = false;  // sliding-window layer: the local RoPE table
  kernels::AttentionParams attn;
};

std::string layer_prefix(const std::string& base, int64_t i) { return base + "layers." + std::to_string(i); }

bool has_qk_norm(const ModelConfig& c) { return c.model_type != "gemma2"; }

class Gemma final : public Model {
 public:
  Gemma(const ModelConfig& cfg, WeightStore weights)
      : cfg_(cfg),
        weights_(std::move(weights)),
        act_dtype_(weights_.device().is_cuda() ? DType::kBF16 : DType::kF32) {
    load();
  }

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return weights_.device(); }

  std::vector<KvLayerSpec> kv_layout() const override {
    std::vector<KvLayerSpec> out;
    for (int64_t i = 0; i < cfg_.n_layers; ++i)
      out.push_back({cfg_.n_kv_heads, cfg_.head_dim, cfg_.sliding_window[static_cast<size_t>(i)]});
    return out;
  }

  size_t workspace_bytes(int64_t max_tokens, int64_t max_out) const override {
    return model::workspace_bytes(buffer_specs(max_tokens, max_out));
  }

  size_t weight_bytes_per_token() const override {
    size_t total = final_norm_.nbytes() + lm_head_.bytes() + embed_.row_bytes();
    for (const GemmaLayer& l : layers_) {
      for (const Tensor* t : {&l.in_norm, &l.post_attn_norm, &l.pre_ff_norm, &l.post_ff_norm, &l.q_norm, &l.k_norm})
        total += t->nbytes();
      for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) total += p->bytes();
    }
    return total;
  }

  void forward(const ForwardArgs& a) override;

 private:
  // Workspace tensors of one step, in allocation order: x and xo f32, the rest in act_dtype_.
  static constexpr size_t kBuffers = 11;
  std::array<WorkspaceSpec, kBuffers> buffer_specs(int64_t n, int64_t n_out) const {
    const int64_t q_dim = cfg_.n_heads * cfg_.head_dim, kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    const int64_t d = cfg_.d_model, f = cfg_.d_ff;
    const DType a = act_dtype_, f32 = DType::kF32;
    // x, h, q, k, v, attn, proj, gate, up, act, xo
    return {WorkspaceSpec{f32, n, d}, {a, n, d}, {a, n, q_dim}, {a, n, kv_dim}, {a, n, kv_dim}, {a, n, q_dim},
            {a, n, d},                {a, n, f}, {a, n, f},     {a, n, f},      {f32, n_out, d}};
  }

  void load();
  GemmaLayer load_layer(const std::string& p, int64_t i) const;
  void attention_block(const ForwardArgs& a, const GemmaLayer& l, const kernels::PagedKv& kv, Tensor h, Tensor out);
  void mlp_block(kernels::Context& ctx, const GemmaLayer& l, Tensor h, Tensor out);

  ModelConfig cfg_;
  WeightStore weights_;
  DType act_dtype_;    // activation dtype: f32 on the CPU, bf16 on CUDA
  Embedding embed_;    // [vocab_size, d_model]
  float embed_scale_ = 1.0f;
  Tensor final_norm_;  // [d_model]
  Linear lm_head_;     // [vocab_size, d_model] (embed_ when tied)
  std::vector<GemmaLayer> layers_;
  RopeTable rope_global_, rope_local_;
  // Step scratch, allocated from the workspace in forward().
  Tensor q_, k_, v_, attn_, gate_, up_, act_;
};

GemmaLayer Gemma::load_layer(const std::string& p, int64_t i) const {
  const ModelConfig& c = cfg_;
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  const WeightStore& w = weights_;
  GemmaLayer l;
  l.in_norm = float_weight(w, p + ".input_layernorm.weight", {d});
  l.post_attn_norm = float_weight(w, p + ".post_attention_layernorm.weight", {d});
  l.pre_ff_norm = float_weight(w, p + ".pre_feedforward_layernorm.weight", {d});
  l.post_ff_norm = float_weight(w, p + ".post_feedforward_layernorm.weight", {d});
  l.q = load_linear(w, c, p + ".self_attn.q_proj", q_dim, d, c.attention_bias);
  l.k = load_linear(w, c, p + ".self_attn.k_proj", kv_dim, d, c.attention_bias);
  l.v = load_linear(w, c, p + ".self_attn.v_proj", kv_dim, d, c.attention_bias);
  l.o = load_linear(w, c, p + ".self_attn.o_proj", d, q_dim, c.attention_bias);
  if (has_qk_norm(c)) {
    l.q_norm = float_weight(w, p + ".self_attn.q_norm.weight", {hd});
    l.k_norm = float_weight(w, p + ".self_attn.k_norm.weight", {hd});
  }
  l.gate = load_linear(w, c, p + ".mlp.gate_proj", c.d_ff, d, false);
  l.up = load_linear(w, c, p + ".mlp.up_proj", c.d_ff, d, false);
  l.down = load_linear(w, c, p + ".mlp.down_proj", d, c.d_ff, false);
  const int window = c.sliding_window[static_cast<size_t>(i)];
  l.local = window > 0;
  l.attn.scale = c.attention_scale();
  l.attn.sliding_window = window;
  l.attn.softcap = static_cast<float>(c.attn_logit_softcap);
  return l;
}

void Gemma::load() {
  const ModelConfig& c = cfg_;
  const int64_t d = c.d_model;
  check(c.query_pre_attn_scalar > 0, "model", "gemma: config lacks query_pre_attn_scalar (not parsed as Gemma)");
  for (const RopeConfig* r : {&c.rope, c.rope_local ? &*c.rope_local : &c.rope})
    check(r->type != RopeType::kDynamic, "model", "gemma: dynamic RoPE scaling is not supported");
  const GemmaNames names = gemma_names(weights_);
  embed_ = load_embedding(weights_, c, names.base + "embed_tokens", c.vocab_size, d);
  embed_scale_ = gemma_embed_scale(d, embed_.quantized() ? DType::kBF16 : embed_.table.dtype);
  final_norm_ = float_weight(weights_, names.base + "norm.weight", {d});
  if (c.tie_word_embeddings) lm_head_ = embed_.as_linear();
  else lm_head_ = load_linear(weights_, c, names.lm_head, c.vocab_size, d, false);
  rope_global_ = compute_rope(c, 0);
  if (c.rope_local) {
    ModelConfig local = c;
    local.rope = *c.rope_local;
    rope_local_ = compute_rope(local, 0);
  } else {
    rope_local_ = rope_global_;
  }
  for (int64_t i = 0; i < c.n_layers; ++i) layers_.push_back(load_layer(layer_prefix(names.base, i), i));
}

// Attention over the paged cache; on CUDA a mixed step runs its decode rows (flash-decoding) and its prefill
// chunks (tensor-core flash attention) as two calls; each row's result does not depend on the split.
void attend(const ForwardArgs& a, bool cuda, Tensor o3, Tensor q3, const kernels::PagedKv& kv,
            const kernels::AttentionParams& p) {
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), nd = b.n_single;
  const Tensor& tables = b.tables_for(p.sliding_window);
  const Tensor& slots = b.slots_for(p.sliding_window);
  if (cuda && nd > 0 && nd < n) {
    auto rows = [](const Tensor& t, int64_t lo, int64_t hi) { return t.slice(0, lo, hi); };
    const kernels::AttentionMeta md{rows(b.positions, 0, nd), rows(b.seq_index, 0, nd), tables, rows(slots, 0, nd)};
    const kernels::AttentionMeta mp{rows(b.positions, nd, n), rows(b.seq_index, nd, n), tables, rows(slots, nd, n)};
    kernels::paged_attention(*a.ctx, rows(o3, 0, nd), rows(q3, 0, nd), kv, md, p);
    kernels::paged_attention(*a.ctx, rows(o3, nd, n), rows(q3, nd, n), kv, mp, p);
    return;
  }
  const kernels::AttentionMeta meta{b.positions, b.seq_index, tables, slots};
  kernels::paged_attention(*a.ctx, o3, q3, kv, meta, p);
}

void Gemma::attention_block(const ForwardArgs& a, const GemmaLayer& l, const kernels::PagedKv& kv, Tensor h,
                            Tensor out) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), hd = cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  project(ctx, h, {{&l.q, q_}, {&l.k, k_}, {&l.v, v_}});  // one GEMV launch on CUDA decode steps
  if (!l.q_norm.empty()) {  // per-head (1 + w) RMSNorm over head_dim, before RoPE
    Tensor qh = q_.reshape({n * cfg_.n_heads, hd}), kh = k_.reshape({n * cfg_.n_kv_heads, hd});
    kernels::rms_norm(ctx, qh, qh, l.q_norm, eps, kNormOffset);
    kernels::rms_norm(ctx, kh, kh, l.k_norm, eps, kNormOffset);
  }
  Tensor q3 = q_.reshape({n, cfg_.n_heads, hd}), k3 = k_.reshape({n, cfg_.n_kv_heads, hd});
  Tensor v3 = v_.reshape({n, cfg_.n_kv_heads, hd}), o3 = attn_.reshape({n, cfg_.n_heads, hd});
  const RopeTable& rt = l.local ? rope_local_ : rope_global_;
  const kernels::RopeParams rope{rt.inv_freq.data(), rt.rotary_dim, rt.attention_scaling};
  kernels::rope_kv_write(ctx, q3, k3, v3, kv, b.positions, b.slots_for(l.attn.sliding_window), rope);
  attend(a, device().is_cuda(), o3, q3, kv, l.attn);
  l.o(ctx, out, attn_);
}

void Gemma::mlp_block(kernels::Context& ctx, const GemmaLayer& l, Tensor h, Tensor out) {
  gated_mlp(ctx, l.gate, l.up, l.down, h, out, act_, gate_, up_, kernels::GluAct::kGeluTanh);
}

void Gemma::forward(const ForwardArgs& a) {
  const StepBatch& b = *a.batch;
  kernels::Context& ctx = *a.ctx;
  const int64_t n = b.n_tokens(), n_out = b.n_out();
  check(a.kv.size() == layers_.size(), "model", "forward: KV cache has the wrong number of layers");
  if (a.logits.dim(0) != n_out || a.logits.dim(1) != cfg_.vocab_size)
    throw Error("model", "forward: logits must be [n_out, vocab_size], got " + a.logits.shape_str());
  Arena& ws = *a.workspace;
  ws.reset();
  std::array<Tensor, kBuffers> t;
  const auto specs = buffer_specs(n, n_out);
  for (size_t i = 0; i < kBuffers; ++i) t[i] = ws.alloc(specs[i].dtype, {specs[i].rows, specs[i].cols});
  Tensor x = t[0], h = t[1], proj = t[6], xo = t[10];
  q_ = t[2], k_ = t[3], v_ = t[4], attn_ = t[5], gate_ = t[7], up_ = t[8], act_ = t[9];
  const float eps = static_cast<float>(cfg_.rms_norm_eps);

  embed_(ctx, x, b.token_ids, embed_scale_);  // HF's scaled embedding module: the hooks see its output
  if (a.hook) a.hook->on("embed", -1, x);
  if (a.hook) a.hook->on("decoder_in", -1, x);
  // Each residual add is fused with the norm that follows it (this layer's pre-feedforward norm, or the
  // next layer's input norm); the sub-block outputs get their post-norm in place first.
  if (!layers_.empty()) kernels::rms_norm(ctx, h, x, layers_[0].in_norm, eps, kNormOffset);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const GemmaLayer& l = layers_[i];
    attention_block(a, l, a.kv[i], h, proj);
    kernels::rms_norm(ctx, proj, proj, l.post_attn_norm, eps, kNormOffset);
    kernels::add_rms_norm(ctx, h, x, proj, l.pre_ff_norm, eps, 1.0f, kNormOffset);
    mlp_block(ctx, l, h, proj);
    kernels::rms_norm(ctx, proj, proj, l.post_ff_norm, eps, kNormOffset);
    if (i + 1 < layers_.size())
      kernels::add_rms_norm(ctx, h, x, proj, layers_[i + 1].in_norm, eps, 1.0f, kNormOffset);
    else if (a.hook)  // the hook sees the last layer's output; otherwise head_input adds it
      kernels::add_scaled(ctx, x, proj, 1.0f);
    if (a.hook) a.hook->on("layer", static_cast<int>(i), x);
  }
  const Tensor y_last = a.hook || layers_.empty() ? Tensor{} : proj;
  const Tensor ho = head_input(ctx, lm_head_, b, x, y_last, 1.0f, xo, h, final_norm_, eps, kNormOffset);
  if (a.hook) a.hook->on("final_norm", -1, ho);
  lm_head_(ctx, a.logits, ho);
  if (cfg_.final_logit_softcap > 0) kernels::softcap(ctx, a.logits, static_cast<float>(cfg_.final_logit_softcap));
  if (a.hook) a.hook->on("logits", -1, a.logits);
}

}  // namespace

GemmaNames gemma_names(const WeightStore& ws) {
  static constexpr std::array<std::array<const char*, 2>, 3> kVariants = {{
      {"model.", "lm_head"},                                // HF 5.x (Gemma2/3ForCausalLM), mlx-lm text models
      {"model.language_model.", "lm_head"},                 // HF 5.x Gemma3ForConditionalGeneration
      {"language_model.model.", "language_model.lm_head"},  // Hub gemma-3 checkpoints, mlx-vlm conversions
  }};
  std::string tried;
  for (const auto& [base, head] : kVariants) {
    if (ws.has(std::string(base) + "embed_tokens.weight")) return {base, head};
    tried += std::string(tried.empty() ? "" : ", ") + base + "embed_tokens.weight";
  }
  throw Error("model", "gemma: the checkpoint has no embedding table (tried " + tried + ")");
}

float gemma_embed_scale(int64_t d_model, DType table_dtype) {
  const float s = static_cast<float>(std::sqrt(static_cast<double>(d_model)));  // torch.tensor(d ** 0.5): f32
  if (table_dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(s));
  if (table_dtype == DType::kF16) return f16_to_f32(f32_to_f16(s));
  return s;
}

std::vector<TensorSpec> gemma_tensors(const ModelConfig& c) {
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  const std::string base = c.model_type == "gemma3" ? "model.language_model." : "model.";
  std::vector<TensorSpec> out;
  out.push_back({base + "embed_tokens.weight", {c.vocab_size, d}});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(base, i);
    for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                             "post_feedforward_layernorm"})
      out.push_back({p + "." + norm + ".weight", {d}});
    for (auto [name, rows, cols] : {std::tuple{"q_proj", q_dim, d}, {"k_proj", kv_dim, d}, {"v_proj", kv_dim, d},
                                    {"o_proj", d, q_dim}}) {
      out.push_back({p + ".self_attn." + name + ".weight", {rows, cols}});
      if (c.attention_bias) out.push_back({p + ".self_attn." + name + ".bias", {rows}});
    }
    if (has_qk_norm(c)) {
      out.push_back({p + ".self_attn.q_norm.weight", {hd}});
      out.push_back({p + ".self_attn.k_norm.weight", {hd}});
    }
    out.push_back({p + ".mlp.gate_proj.weight", {c.d_ff, d}});
    out.push_back({p + ".mlp.up_proj.weight", {c.d_ff, d}});
    out.push_back({p + ".mlp.down_proj.weight", {d, c.d_ff}});
  }
  out.push_back({base + "norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

std::unique_ptr<Model> create_gemma(const ModelConfig& cfg, WeightStore weights) {
  return std::make_unique<Gemma>(cfg, std::move(weights));
}

}  // namespace bunsen::model::arch
