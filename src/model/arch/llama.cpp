// Llama-like decoder (llama, mistral, qwen2, qwen3, smollm3, granite, phi3): pre-norm blocks of
//   x += attn(rms_norm(x)) * residual_multiplier;  x += mlp(rms_norm(x)) * residual_multiplier
// with GQA attention over the paged KV cache and a SwiGLU MLP. Checkpoint quirks are resolved at load:
// phi3's fused qkv_proj / gate_up_proj become row-slice views (no copy), tied heads reuse embed_tokens.
// MLX affine-quantized checkpoints (every Linear, the embedding, lm_head; per-module bits) run on the CPU
// and on CUDA (the packed weights are uploaded as they are; the kernels dequantize).
// Runs wherever its weights live: on the CPU every activation is f32; on CUDA the residual stream (x, the
// gathered logit rows) stays f32 and the other activations are bf16 (kernels accumulate in f32).
// Sliding-window layers use StepBatch::slots_for/tables_for(window) (their own block space when the Runner has one).
#include "model/arch/llama.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "core/status.h"
#include "kernels/decode_fused.h"
#include "model/layers.h"
#include "model/residual.h"

namespace bunsen::model::arch {
namespace {

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i); }

struct Layer {
  Tensor in_norm;    // [d_model]
  Tensor post_norm;  // [d_model]
  Tensor q_norm;     // [head_dim] (qwen3) or empty
  Tensor k_norm;     // [head_dim] (qwen3) or empty
  Linear q, k, v, o, gate, up, down;
  kernels::RopeParams rope;  // rotary_dim 0 = NoPE layer
  kernels::AttentionParams attn;
};

class LlamaLike final : public Model {
 public:
  LlamaLike(const ModelConfig& cfg, WeightStore weights)
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
    size_t total = final_norm_.nbytes() + lm_head_.bytes();
    total += embed_.row_bytes();  // one embedding row
    for (const Layer& l : layers_) {
      total += l.in_norm.nbytes() + l.post_norm.nbytes() + l.q_norm.nbytes() + l.k_norm.nbytes();
      for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) total += p->bytes();
    }
    return total;
  }

  void forward(const ForwardArgs& a) override;

 private:
  // Workspace tensors of one step, in allocation order: x, xo and x2 f32, the rest in act_dtype_.
  static constexpr size_t kBuffers = 13;
  std::array<WorkspaceSpec, kBuffers> buffer_specs(int64_t n, int64_t n_out) const {
    const int64_t q_dim = cfg_.n_heads * cfg_.head_dim, kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    const int64_t d = cfg_.d_model, f = cfg_.d_ff;
    const DType a = act_dtype_, f32 = DType::kF32;
    // x, h, q, k, v, attn, proj, gate, up, act, xo, x2 (the residual's second buffer on fused-norm steps),
    // the fused decode step's scratch (CUDA)
    const int64_t fused =
        a == DType::kBF16 ? kernels::fused_decode_scratch_floats(cfg_.n_heads, cfg_.head_dim) : 0;
    return {WorkspaceSpec{f32, n, d},
            {a, n, d},
            {a, n, q_dim},
            {a, n, kv_dim},
            {a, n, kv_dim},
            {a, n, q_dim},
            {a, n, d},
            {a, n, f},
            {a, n, f},
            {a, n, f},
            {f32, n_out, d},
            {f32, n, d},
            {f32, fused > 0 ? 1 : 0, fused}};
  }

  void load();
  void attention_block(const ForwardArgs& a, const Layer& l, const kernels::PagedKv& kv, Tensor h, Tensor out,
                       const kernels::AddRmsNorm* pre);
  void mlp_block(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out, const kernels::AddRmsNorm* pre);
  void update_dynamic_rope(const StepBatch& b);
  bool fused_decode(const ForwardArgs& a, Tensor x, Tensor scratch);

  ModelConfig cfg_;
  WeightStore weights_;
  DType act_dtype_;    // activation dtype: f32 on the CPU, bf16 on CUDA
  Embedding embed_;    // [vocab_size, d_model]
  Tensor final_norm_;  // [d_model]
  Linear lm_head_;     // [vocab_size, d_model] (embed_ when tied)
  std::vector<Layer> layers_;
  RopeTable rope_;
  int64_t rope_seq_len_ = 0;  // dynamic rope: sequence length the table was computed for
  // Step scratch, allocated from the workspace in forward().
  Tensor q_, k_, v_, attn_, gate_, up_, act_;
  std::vector<kernels::FusedDecodeLayer> fused_layers_;  // fused_decode's description of the layers
};

void LlamaLike::load() {
  const ModelConfig& c = cfg_;
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  embed_ = load_embedding(weights_, c, "model.embed_tokens", c.vocab_size, d);
  final_norm_ = float_weight(weights_, "model.norm.weight", {d});
  if (c.tie_word_embeddings) lm_head_ = embed_.as_linear();
  else lm_head_ = load_linear(weights_, c, "lm_head", c.vocab_size, d, false);
  rope_ = compute_rope(c, 0);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    Layer l;
    l.in_norm = float_weight(weights_, p + ".input_layernorm.weight", {d});
    l.post_norm = float_weight(weights_, p + ".post_attention_layernorm.weight", {d});
    if (c.fused_qkv) {
      Linear qkv = load_linear(weights_, c, p + ".self_attn.qkv_proj", q_dim + 2 * kv_dim, d, c.attention_bias);
      l.q = slice_rows(qkv, 0, q_dim);
      l.k = slice_rows(qkv, q_dim, q_dim + kv_dim);
      l.v = slice_rows(qkv, q_dim + kv_dim, q_dim + 2 * kv_dim);
    } else {
      l.q = load_linear(weights_, c, p + ".self_attn.q_proj", q_dim, d, c.attention_bias);
      l.k = load_linear(weights_, c, p + ".self_attn.k_proj", kv_dim, d, c.attention_bias);
      l.v = load_linear(weights_, c, p + ".self_attn.v_proj", kv_dim, d, c.attention_bias);
    }
    l.o = load_linear(weights_, c, p + ".self_attn.o_proj", d, q_dim, c.o_proj_bias);
    if (c.qk_norm) {
      l.q_norm = float_weight(weights_, p + ".self_attn.q_norm.weight", {hd});
      l.k_norm = float_weight(weights_, p + ".self_attn.k_norm.weight", {hd});
    }
    if (c.fused_gate_up) {
      Linear gu = load_linear(weights_, c, p + ".mlp.gate_up_proj", 2 * c.d_ff, d, c.mlp_bias);
      l.gate = slice_rows(gu, 0, c.d_ff);
      l.up = slice_rows(gu, c.d_ff, 2 * c.d_ff);
    } else {
      l.gate = load_linear(weights_, c, p + ".mlp.gate_proj", c.d_ff, d, c.mlp_bias);
      l.up = load_linear(weights_, c, p + ".mlp.up_proj", c.d_ff, d, c.mlp_bias);
    }
    l.down = load_linear(weights_, c, p + ".mlp.down_proj", d, c.d_ff, c.mlp_bias);
    l.attn.scale = c.attention_scale();
    l.attn.sliding_window = c.sliding_window[static_cast<size_t>(i)];
    l.attn.prefetch_next = l.o.quantized() ? l.o.q.packed : l.o.w;  // an L2 hint for decode steps
    layers_.push_back(l);
  }
  fused_layers_.reserve(layers_.size());
}

void LlamaLike::update_dynamic_rope(const StepBatch& b) {
  if (cfg_.rope.type != RopeType::kDynamic) return;
  int64_t seq_len = b.max_seq_len;
  if (seq_len <= cfg_.max_position_embeddings) seq_len = 0;  // below the trained length: base table
  if (seq_len != rope_seq_len_) {
    rope_ = compute_rope(cfg_, seq_len);
    rope_seq_len_ = seq_len;
  }
}

// pre (optional): the residual add and norm that produce h (kernels::AddRmsNorm), inside the q/k/v launch
// where the fold takes it, else add_rms_norm first.
void LlamaLike::attention_block(const ForwardArgs& a, const Layer& l, const kernels::PagedKv& kv, Tensor h,
                                Tensor out, const kernels::AddRmsNorm* pre) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), hd = cfg_.head_dim;
  Tensor q3 = q_.reshape({n, cfg_.n_heads, hd}), k3 = k_.reshape({n, cfg_.n_kv_heads, hd});
  Tensor v3 = v_.reshape({n, cfg_.n_kv_heads, hd}), o3 = attn_.reshape({n, cfg_.n_heads, hd});
  const Tensor slots = b.slots_for(l.attn.sliding_window);
  if (l.q_norm.empty() && !l.q.quantized() && !l.k.quantized() && !l.v.quantized()) {
    // One GEMV launch with the rope and the cache write in its store on CUDA decode steps (the same bits).
    const kernels::LinearPart parts[3] = {{q_, l.q.w, l.q.b}, {k_, l.k.w, l.k.b}, {v_, l.v.w, l.v.b}};
    kernels::linear_qkv_rope_kv(ctx, h, parts, q3, k3, v3, kv, b.positions, slots, l.rope, pre);
  } else {
    project(ctx, h, {{&l.q, q_}, {&l.k, k_}, {&l.v, v_}}, pre);  // one GEMV launch on CUDA decode steps
    if (!l.q_norm.empty()) {  // per-head RMSNorm over head_dim
      Tensor qh = q_.reshape({n * cfg_.n_heads, hd}), kh = k_.reshape({n * cfg_.n_kv_heads, hd});
      kernels::rms_norm(ctx, qh, qh, l.q_norm, static_cast<float>(cfg_.rms_norm_eps));
      kernels::rms_norm(ctx, kh, kh, l.k_norm, static_cast<float>(cfg_.rms_norm_eps));
    }
    kernels::rope_kv_write(ctx, q3, k3, v3, kv, b.positions, slots, l.rope);  // rotary_dim 0: write only
  }
  const int64_t nd = b.n_single;
  if (device().is_cuda() && nd > 0 && nd < n) {
    // A mixed step on CUDA: decode rows and prefill chunks take different kernels (flash-decoding and
    // tensor-core flash attention); each row's result does not depend on the split.
    auto rows = [](const Tensor& t, int64_t a, int64_t z) { return t.slice(0, a, z); };
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

void LlamaLike::mlp_block(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out,
                          const kernels::AddRmsNorm* pre) {
  gated_mlp(ctx, l.gate, l.up, l.down, h, out, act_, gate_, up_, kernels::GluAct::kSilu, pre);
}

// A one-token CUDA step runs every layer in one launch (kernels::decode_layers_fused) where it applies:
// BUNSEN_DECODE_FUSED=1, no hook, bf16 or MLX 4-bit (group 64) projections without biases, no q/k norms, full
// attention, a static RoPE table. Returns false (nothing done) otherwise.
bool LlamaLike::fused_decode(const ForwardArgs& a, Tensor x, Tensor scratch) {
  const StepBatch& b = *a.batch;
  if (!kernels::fused_decode_enabled() || a.hook != nullptr || !x.device.is_cuda() || b.n_tokens() != 1 ||
      b.n_single != 1 || scratch.empty() || cfg_.rope.type == RopeType::kDynamic)
    return false;
  std::vector<kernels::FusedDecodeLayer>& ls =
      fused_layers_;  // capacity reserved at load: no allocation here
  ls.clear();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    kernels::FusedDecodeLayer f;
    const Linear* ps[7] = {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down};
    Tensor* ws[7] = {&f.q, &f.k, &f.v, &f.o, &f.gate, &f.up, &f.down};
    for (int j = 0; j < 7; ++j) {
      if (!ps[j]->b.empty() || ps[j]->quantized() != l.q.quantized()) return false;
      if (ps[j]->quantized())
        f.quant[j] = ps[j]->q;
      else
        *ws[j] = ps[j]->w;
    }
    if (!l.q_norm.empty() || l.attn.sliding_window != 0 || l.attn.softcap != 0.0f) return false;
    f.in_norm = l.in_norm;
    f.post_norm = l.post_norm;
    f.kv = a.kv[i];
    f.rope = cfg_.use_rope[i];
    ls.push_back(f);
  }
  kernels::FusedDecodeStep s;
  s.layers = ls;
  s.x = x;
  s.q = q_;
  s.k = k_;
  s.v = v_;
  s.attn = attn_;
  s.act = act_;
  s.scratch = scratch;
  s.positions = b.positions;
  s.slot_mapping = b.slot_mapping;
  s.block_tables = b.block_tables;
  s.rope = {rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling};
  s.eps = static_cast<float>(cfg_.rms_norm_eps);
  s.residual = static_cast<float>(cfg_.residual_multiplier);
  s.scale = layers_.empty() ? 1.0f : layers_[0].attn.scale;
  s.n_heads = static_cast<int>(cfg_.n_heads);
  s.n_kv_heads = static_cast<int>(cfg_.n_kv_heads);
  s.head_dim = static_cast<int>(cfg_.head_dim);
  return kernels::decode_layers_fused(*a.ctx, s);
}

void LlamaLike::forward(const ForwardArgs& a) {
  const StepBatch& b = *a.batch;
  kernels::Context& ctx = *a.ctx;
  const int64_t n = b.n_tokens(), n_out = b.n_out();
  check(a.kv.size() == layers_.size(), "model", "forward: KV cache has the wrong number of layers");
  if (a.logits.dim(0) != n_out || a.logits.dim(1) != cfg_.vocab_size)
    throw Error("model", "forward: logits must be [n_out, vocab_size], got " + a.logits.shape_str());
  update_dynamic_rope(b);
  Arena& ws = *a.workspace;
  ws.reset();
  std::array<Tensor, kBuffers> t;
  const auto specs = buffer_specs(n, n_out);
  for (size_t i = 0; i < kBuffers; ++i) t[i] = ws.alloc(specs[i].dtype, {specs[i].rows, specs[i].cols});
  Tensor x = t[0], h = t[1], proj = t[6], xo = t[10];
  q_ = t[2], k_ = t[3], v_ = t[4], attn_ = t[5], gate_ = t[7], up_ = t[8], act_ = t[9];
  const float residual = static_cast<float>(cfg_.residual_multiplier);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);

  embed_(ctx, x, b.token_ids);
  if (a.hook) a.hook->on("embed", -1, x);
  if (cfg_.embedding_multiplier != 1.0) kernels::scale(ctx, x, static_cast<float>(cfg_.embedding_multiplier));
  if (a.hook) a.hook->on("decoder_in", -1, x);
  Tensor x_last = x, y_last;  // the residual stream leaving the last layer, and its pending last add
  if (!fused_decode(a, x, t[12])) {
    // Each residual add is fused with the norm that follows it (the next layer's input norm, or this layer's
    // post-attention norm); only the last layer's MLP output is a plain add. With norms_in_projections
    // (decode steps without a hook, kernels::fused_norm_enabled()) the add and norm run inside the projection
    // that reads them (model::Residual: the GEMV's prologue on CUDA); elsewhere add_rms_norm updates x in
    // place. On by default where q/k/v take the rope fold (no q/k norms): H200 1B +1.1 %, 8B +0.0 %; Qwen3's
    // q/k-norm layers (plain q/k/v launch) measured -1.6 % on the 8B shape.
    const bool by_default = x.device.is_cuda() && !layers_.empty() && layers_[0].q_norm.empty();
    Residual res(x, t[11], norms_in_projections(a.hook != nullptr, n, by_default), eps, residual);
    // The norm that produces h, when left to its projection (the first layer's input norm as well).
    const kernels::AddRmsNorm* pre = layers_.empty() ? nullptr : res.norm(ctx, h, layers_[0].in_norm);
    for (size_t i = 0; i < layers_.size(); ++i) {
      Layer& l = layers_[i];
      l.rope = {rope_.inv_freq.data(), cfg_.use_rope[i] ? rope_.rotary_dim : 0, rope_.attention_scaling};
      attention_block(a, l, a.kv[i], h, proj, pre);
      mlp_block(ctx, l, h, proj, res.add_norm(ctx, h, proj, l.post_norm));
      if (i + 1 < layers_.size())
        pre = res.add_norm(ctx, h, proj, layers_[i + 1].in_norm);
      else if (a.hook)  // the hook sees the last layer's output; otherwise head_input adds it
        kernels::add_scaled(ctx, res.x(), proj, residual);
      else
        y_last = proj;
      if (a.hook) a.hook->on("layer", static_cast<int>(i), res.x());
    }
    x_last = res.x();
  }
  const Tensor ho = head_input(ctx, lm_head_, b, x_last, y_last, residual, xo, h, final_norm_, eps);
  if (a.hook) a.hook->on("final_norm", -1, ho);
  lm_head_(ctx, a.logits, ho);
  if (cfg_.logits_scaling != 1.0) kernels::scale(ctx, a.logits, static_cast<float>(1.0 / cfg_.logits_scaling));
  if (a.hook) a.hook->on("logits", -1, a.logits);
}

}  // namespace

std::vector<TensorSpec> llama_like_tensors(const ModelConfig& c) {
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, d}});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    out.push_back({p + ".input_layernorm.weight", {d}});
    if (c.fused_qkv) {
      out.push_back({p + ".self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, d}});
      if (c.attention_bias) out.push_back({p + ".self_attn.qkv_proj.bias", {q_dim + 2 * kv_dim}});
    } else {
      for (auto [name, rows] : {std::pair{"q_proj", q_dim}, {"k_proj", kv_dim}, {"v_proj", kv_dim}}) {
        out.push_back({p + ".self_attn." + name + ".weight", {rows, d}});
        if (c.attention_bias) out.push_back({p + ".self_attn." + name + ".bias", {rows}});
      }
    }
    out.push_back({p + ".self_attn.o_proj.weight", {d, q_dim}});
    if (c.o_proj_bias) out.push_back({p + ".self_attn.o_proj.bias", {d}});
    if (c.qk_norm) {
      out.push_back({p + ".self_attn.q_norm.weight", {hd}});
      out.push_back({p + ".self_attn.k_norm.weight", {hd}});
    }
    out.push_back({p + ".post_attention_layernorm.weight", {d}});
    if (c.fused_gate_up) {
      out.push_back({p + ".mlp.gate_up_proj.weight", {2 * c.d_ff, d}});
      if (c.mlp_bias) out.push_back({p + ".mlp.gate_up_proj.bias", {2 * c.d_ff}});
    } else {
      for (const char* name : {"gate_proj", "up_proj"}) {
        out.push_back({p + ".mlp." + name + ".weight", {c.d_ff, d}});
        if (c.mlp_bias) out.push_back({p + ".mlp." + name + ".bias", {c.d_ff}});
      }
    }
    out.push_back({p + ".mlp.down_proj.weight", {d, c.d_ff}});
    if (c.mlp_bias) out.push_back({p + ".mlp.down_proj.bias", {d}});
  }
  out.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

std::unique_ptr<Model> create_llama_like(const ModelConfig& cfg, WeightStore weights) {
  return std::make_unique<LlamaLike>(cfg, std::move(weights));
}

}  // namespace bunsen::model::arch
