// Gemma 4 text decoder, as transformers 5.17's Gemma4TextModel computes it. Per layer (plain-w RMSNorms):
//   x += post_attn_norm(attn(in_norm(x)));  r = x
//   f  = post_ffw_norm_1(mlp(pre_ffw_norm(r))) + post_ffw_norm_2(experts(pre_ffw_norm_2(r)))   (MoE layers)
//   f  = mlp(pre_ffw_norm(r))                                                                  (dense layers)
//   x += post_ffw_norm(f);  x += post_ple_norm(ple_proj(gelu_tanh(ple_gate(x)) * ple_input[layer]));
//   x *= scalar
// Attention: q/k RMSNorm over head_dim, v RMSNorm without weight, scale 1, per-layer head_dim and KV heads,
// K=V layers (v is the raw k projection), KV-shared layers (attend over an earlier layer's cache, write none).
// Sliding layers (and the KV-shared layers of a sliding source) use StepBatch::slots_for/tables_for(window).
// Row-wise chains run fused (kernels::rms_norm_qkv; kernels::post_norm_residual, whose last call of a layer
// also applies the layer scalar and the next layer's in_norm into h); BUNSEN_GEMMA4_FUSED_NORMS=0 selects the
// unfused op sequence, which gives bit-identical results on the CPU. With the fused norms, float projections
// and norms_in_projections (decode steps, BUNSEN_FUSED_NORM=1), the two post_norm_residual calls that produce
// h for a projection (the feed-forward's gate/up; the next layer's q/k/v) run in that projection's GEMV
// prologue instead (model::Residual::add_post_norm; the residual alternates between x and x_alt).
// Not the checkpoint-name resolution or the manifest (gemma4_tensors.cpp) or the layer plan (gemma4_params.cpp).
#include "model/arch/gemma4.h"

#include <array>
#include <cmath>
#include <span>
#include <utility>

#include "core/env.h"
#include "core/status.h"
#include "kernels/device.h"
#include "model/arch/gemma4_weights.h"
#include "model/residual.h"

namespace bunsen::model::arch {
namespace {

// Workspace tensors of one step (x and xo f32, the rest in the activation dtype).
struct StepBuffers {
  Tensor x;                       // [n, d] f32 residual stream
  Tensor h, proj;                 // [n, d]
  Tensor q, attn;                 // [n, max n_heads * head_dim]
  Tensor k, v;                    // [n, max n_kv_heads * head_dim]
  Tensor gate, up, act;           // [n, max d_ff]
  Tensor xo;                      // [n_out, d] f32
  Tensor ple, ple_tok;            // [n, n_layers * ple_dim] (PLE only)
  Tensor ple_gate, ple_act;       // [n, ple_dim] (PLE only)
  Tensor moe_in, router_in, moe;  // [n, d] (MoE only)
  Tensor x_alt;                   // [n, d] f32: the residual's second buffer (model::Residual)
  MoeBuffers moe_buf;
};

// BUNSEN_GEMMA4_FUSED_NORMS=0: the unfused norm sequence (A/B runs, bisection); read once per model.
bool fused_norms_from_env() {
  return env_flag("BUNSEN_GEMMA4_FUSED_NORMS", true);
}

// Whether every projection that would take a norm's pre (q/k/v, gate/up) has float weights; a quantized one
// runs the pre as an op of its own (a copy more than the in-place path), so quantized models keep that path.
bool float_projections(const Gemma4Weights& w) {
  for (const Gemma4LayerWeights& l : w.layers)
    for (const Linear* p : {&l.q, &l.k, &l.v, &l.gate, &l.up})
      if (p->quantized()) return false;
  return true;
}

// A contiguous [rows, cols] view over the start of a wider buffer (per-layer widths differ).
Tensor narrow(const Tensor& buf, int64_t cols) {
  return Tensor::view(buf.data, buf.dtype, {buf.dim(0), cols}, buf.device);
}

class Gemma4 final : public Model {
 public:
  Gemma4(const ModelConfig& cfg, WeightStore weights)
      : cfg_(cfg),
        p_(gemma4_params(cfg)),
        weights_(std::move(weights)),
        act_dtype_(weights_.device().is_cuda() ? DType::kBF16 : DType::kF32),
        w_(load_gemma4_weights(weights_, cfg_, p_)),
        fused_norms_(fused_norms_from_env()),
        float_projections_(float_projections(w_)) {}

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return weights_.device(); }

  std::vector<KvLayerSpec> kv_layout() const override { return gemma4_kv_layout(p_); }

  size_t workspace_bytes(int64_t max_tokens, int64_t max_out) const override {
    std::vector<WorkspaceSpec> specs;
    plan(max_tokens, max_out, [&](DType dt, int64_t r, int64_t c) {
      specs.push_back({dt, r, c});
      return Tensor{};
    });
    if (p_.moe) append_moe_workspace(specs, w_.layers[0].moe.spec, max_tokens);
    return model::workspace_bytes(specs);
  }

  size_t weight_bytes_per_token() const override { return gemma4_weight_bytes_per_token(w_); }

  void forward(const ForwardArgs& a) override;

 private:
  // Calls take(dtype, rows, cols) once per workspace tensor, in allocation order.
  template <typename Take>
  StepBuffers plan(int64_t n, int64_t n_out, Take take) const;
  void embed(kernels::Context& ctx, const StepBatch& b, const StepBuffers& s, ActivationHook* hook);
  // pre (optional): the norm that produces s.h, left to the first projection (model::Residual).
  void attention(const ForwardArgs& a, size_t i, const StepBuffers& s, const kernels::AddRmsNorm* pre);
  void feed_forward(kernels::Context& ctx, size_t i, const StepBuffers& s, const kernels::AddRmsNorm* pre);
  void per_layer_input(kernels::Context& ctx, size_t i, const StepBuffers& s);
  void qkv_norms(kernels::Context& ctx, size_t i, const Tensor& q, const Tensor& k, const Tensor& v);

  ModelConfig cfg_;
  Gemma4Params p_;
  WeightStore weights_;
  DType act_dtype_;  // f32 on the CPU, bf16 on CUDA
  Gemma4Weights w_;
  bool fused_norms_;        // see fused_norms_from_env
  bool float_projections_;  // every q/k/v and gate/up float: a pre can run in their GEMV prologues
};

template <typename Take>
StepBuffers Gemma4::plan(int64_t n, int64_t n_out, Take take) const {
  const DType a = act_dtype_, f32 = DType::kF32;
  int64_t max_kv = 0, max_ff = 0;
  for (const Gemma4Layer& l : p_.layers) {
    max_kv = std::max(max_kv, l.n_kv_heads * l.head_dim);
    max_ff = std::max(max_ff, l.d_ff);
  }
  const int64_t d = cfg_.d_model, max_q = p_.max_q_dim();
  StepBuffers s;
  s.x = take(f32, n, d);
  s.h = take(a, n, d);
  s.proj = take(a, n, d);
  s.q = take(a, n, max_q);
  s.attn = take(a, n, max_q);
  s.k = take(a, n, max_kv);
  s.v = take(a, n, max_kv);
  s.gate = take(a, n, max_ff);
  s.up = take(a, n, max_ff);
  s.act = take(a, n, max_ff);
  s.xo = take(f32, n_out, d);
  if (p_.ple_dim > 0) {
    s.ple = take(a, n, cfg_.n_layers * p_.ple_dim);
    s.ple_tok = take(a, n, cfg_.n_layers * p_.ple_dim);
    s.ple_gate = take(a, n, p_.ple_dim);
    s.ple_act = take(a, n, p_.ple_dim);
  }
  if (p_.moe) {
    s.moe_in = take(a, n, d);
    s.router_in = take(a, n, d);
    s.moe = take(a, n, d);
  }
  s.x_alt = take(f32, n, d);
  return s;
}

// Token embeddings (scaled by sqrt(d_model)) and, with PLE, every layer's per-layer input:
//   ple = (rms_norm(proj(x) * d^-0.5) + embed_per_layer(ids) * sqrt(ple_dim)) * 2^-0.5.
void Gemma4::embed(kernels::Context& ctx, const StepBatch& b, const StepBuffers& s, ActivationHook* hook) {
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  w_.embed(ctx, s.x, b.token_ids, std::sqrt(static_cast<float>(cfg_.d_model)));
  if (hook) hook->on("embed", -1, s.x);
  if (hook) hook->on("decoder_in", -1, s.x);
  if (p_.ple_dim == 0) return;
  const int64_t n = b.n_tokens();
  w_.embed_ple(ctx, s.ple_tok, b.token_ids, std::sqrt(static_cast<float>(p_.ple_dim)));
  w_.ple_model_proj(ctx, s.ple, s.x);
  kernels::scale(ctx, s.ple, static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.d_model))));
  Tensor per_layer = s.ple.reshape({n * cfg_.n_layers, p_.ple_dim});
  kernels::rms_norm(ctx, per_layer, per_layer, w_.ple_proj_norm, eps);
  kernels::add_scaled(ctx, s.ple, s.ple_tok);
  kernels::scale(ctx, s.ple, static_cast<float>(1.0 / std::sqrt(2.0)));
}

// Head norms of layer i, in place over head_dim rows: q_norm(q), and unless the layer is KV-shared, k_norm(k)
// and the weightless v norm of v (K=V layers: of the raw k projection, read before k is normalised).
void Gemma4::qkv_norms(kernels::Context& ctx, size_t i, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Gemma4Layer& pl = p_.layers[i];
  const Gemma4LayerWeights& l = w_.layers[i];
  const int64_t hd = pl.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const Tensor q_heads = q.reshape({q.dim(0) * q.dim(1) / hd, hd});
  const bool own_kv = pl.kv_source < 0;
  const Tensor k_heads = own_kv ? k.reshape({k.dim(0) * k.dim(1) / hd, hd}) : Tensor{};
  const Tensor v_heads = own_kv ? v.reshape({v.dim(0) * v.dim(1) / hd, hd}) : Tensor{};
  if (fused_norms_) {
    kernels::QkvNorm qn;
    qn.q = q_heads;
    qn.q_w = l.q_norm;
    qn.k = k_heads;
    qn.k_w = own_kv ? l.k_norm : Tensor{};
    qn.v = v_heads;  // v_w empty: v_norm has no weight
    qn.v_from_k = own_kv && pl.k_eq_v;
    kernels::rms_norm_qkv(ctx, qn, eps);
    return;
  }
  kernels::rms_norm(ctx, q_heads, q_heads, l.q_norm, eps);
  if (!own_kv) return;
  const Tensor ones = w_.ones.slice(0, 0, hd);  // v_norm has no weight
  if (pl.k_eq_v) kernels::rms_norm(ctx, v_heads, k_heads, ones, eps);  // v = the raw k projection
  else kernels::rms_norm(ctx, v_heads, v_heads, ones, eps);
  kernels::rms_norm(ctx, k_heads, k_heads, l.k_norm, eps);
}

void Gemma4::attention(const ForwardArgs& a, size_t i, const StepBuffers& s, const kernels::AddRmsNorm* pre) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const Gemma4Layer& pl = p_.layers[i];
  const Gemma4LayerWeights& l = w_.layers[i];
  const int64_t n = b.n_tokens(), hd = pl.head_dim, nh = cfg_.n_heads, nkv = pl.n_kv_heads;
  const kernels::RopeParams rope{l.inv_freq.data(), static_cast<int>(hd), 1.0f};
  Tensor q = narrow(s.q, nh * hd), o = narrow(s.attn, nh * hd);
  Tensor k = narrow(s.k, nkv * hd), v = narrow(s.v, nkv * hd);
  if (pl.kv_source >= 0)
    project(ctx, s.h, {{&l.q, q}}, pre);
  else if (pl.k_eq_v)
    project(ctx, s.h, {{&l.q, q}, {&l.k, k}}, pre);
  else
    project(ctx, s.h, {{&l.q, q}, {&l.k, k}, {&l.v, v}}, pre);
  qkv_norms(ctx, i, q, k, v);
  Tensor q3 = q.reshape({n, nh, hd}), o3 = o.reshape({n, nh, hd});
  // A KV-shared layer reads its source layer's cache (already holding this step's keys and values).
  const kernels::PagedKv& kv = a.kv[static_cast<size_t>(pl.kv_source >= 0 ? pl.kv_source : static_cast<int>(i))];
  if (pl.kv_source >= 0) {
    kernels::rope(ctx, q3, b.positions, rope);
  } else {
    kernels::rope_kv_write(ctx, q3, k.reshape({n, nkv, hd}), v.reshape({n, nkv, hd}), kv, b.positions,
                           b.slots_for(pl.window), rope);
  }
  const kernels::AttentionParams ap{1.0f, pl.window, 0.0f, {}};
  const int64_t nd = b.n_single;
  if (device().is_cuda() && nd > 0 && nd < n) {
    // Mixed step on CUDA: decode rows and prefill chunks take different kernels (as in llama.cpp's arch).
    auto rows = [](const Tensor& t, int64_t from, int64_t to) { return t.slice(0, from, to); };
    const kernels::AttentionMeta md{rows(b.positions, 0, nd), rows(b.seq_index, 0, nd), b.tables_for(pl.window),
                                    rows(b.slots_for(pl.window), 0, nd)};
    const kernels::AttentionMeta mp{rows(b.positions, nd, n), rows(b.seq_index, nd, n), b.tables_for(pl.window),
                                    rows(b.slots_for(pl.window), nd, n)};
    kernels::paged_attention(ctx, rows(o3, 0, nd), rows(q3, 0, nd), kv, md, ap);
    kernels::paged_attention(ctx, rows(o3, nd, n), rows(q3, nd, n), kv, mp, ap);
  } else {
    const kernels::AttentionMeta meta{b.positions, b.seq_index, b.tables_for(pl.window), b.slots_for(pl.window)};
    kernels::paged_attention(ctx, o3, q3, kv, meta, ap);
  }
  l.o(ctx, s.proj, o);
}

// Dense GeGLU MLP on s.h (= pre_ffw_norm(x)), plus the MoE branch on the residual x; result in s.proj.
void Gemma4::feed_forward(kernels::Context& ctx, size_t i, const StepBuffers& s,
                          const kernels::AddRmsNorm* pre) {
  const Gemma4LayerWeights& l = w_.layers[i];
  const int64_t ff = p_.layers[i].d_ff;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor gate = narrow(s.gate, ff), up = narrow(s.up, ff), act = narrow(s.act, ff);
  gated_mlp(ctx, l.gate, l.up, l.down, s.h, s.proj, act, gate, up, kernels::GluAct::kGeluTanh, pre);
  if (!p_.moe) return;
  kernels::rms_norm(ctx, s.proj, s.proj, l.post_ffw_norm_1, eps);
  // Router input: rms_norm(x) * router.scale * d^-0.5; expert input: pre_ffw_norm_2(x).
  kernels::rms_norm(ctx, s.router_in, s.x, l.router_scale, eps);
  kernels::scale(ctx, s.router_in, static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.d_model))));
  kernels::rms_norm(ctx, s.moe_in, s.x, l.pre_ffw_norm_2, eps);
  moe_forward(ctx, l.moe, s.moe, s.moe_in, s.moe_buf, s.router_in);
  kernels::rms_norm(ctx, s.moe, s.moe, l.post_ffw_norm_2, eps);
  kernels::add_scaled(ctx, s.proj, s.moe);
}

// The per-layer input branch into s.proj: ple_proj(gelu_tanh(ple_gate(x)) * ple[:, layer]) (the forward adds
// post_ple_norm of it to x).
void Gemma4::per_layer_input(kernels::Context& ctx, size_t i, const StepBuffers& s) {
  const Gemma4LayerWeights& l = w_.layers[i];
  const int64_t pd = p_.ple_dim;
  l.ple_gate(ctx, s.ple_gate, s.x);
  const Tensor ple_i = s.ple.slice(1, static_cast<int64_t>(i) * pd, static_cast<int64_t>(i + 1) * pd);
  kernels::gelu_tanh_mul(ctx, s.ple_act, s.ple_gate, ple_i);
  l.ple_proj(ctx, s.proj, s.ple_act);
}

void Gemma4::forward(const ForwardArgs& a) {
  const StepBatch& b = *a.batch;
  kernels::Context& ctx = *a.ctx;
  const int64_t n = b.n_tokens(), n_out = b.n_out();
  check(a.kv.size() == w_.layers.size(), "model", "forward: KV cache has the wrong number of layers");
  if (a.logits.dim(0) != n_out || a.logits.dim(1) != cfg_.vocab_size)
    throw Error("model", "forward: logits must be [n_out, vocab_size], got " + a.logits.shape_str());
  Arena& ws = *a.workspace;
  ws.reset();
  StepBuffers s = plan(n, n_out, [&](DType dt, int64_t r, int64_t c) { return ws.alloc(dt, {r, c}); });
  if (p_.moe) s.moe_buf = alloc_moe_buffers(ws, w_.layers[0].moe.spec, n);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  embed(ctx, b, s, a.hook);
  // Fused: each layer's last op leaves h = the next layer's in_norm(x), so only layer 0 norms here.
  if (fused_norms_ && !w_.layers.empty()) kernels::rms_norm(ctx, s.h, s.x, w_.layers[0].in_norm, eps);
  // With the norms in the projections, the post-norms that produce h go to the projections reading h; s.x
  // follows the residual's current buffer.
  // Off by default: H200 e4b 219.7 vs 232.5 tok/s with it (the post-norm prologue: two reductions per block).
  Residual res(s.x, s.x_alt,
               fused_norms_ && float_projections_ && norms_in_projections(a.hook != nullptr, n, false), eps);
  auto post_into_h = [&](Tensor w_post, Tensor w_next, float x_scale) {
    const kernels::AddRmsNorm* pre = res.add_post_norm(ctx, s.h, s.proj, w_post, w_next, x_scale);
    s.x = res.x();
    return pre;
  };
  const kernels::AddRmsNorm* pre_attn = nullptr;  // h's norm, when left to the q/k/v projection
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const Gemma4LayerWeights& l = w_.layers[i];
    const Tensor next_in = i + 1 < w_.layers.size() ? w_.layers[i + 1].in_norm : Tensor{};
    if (!fused_norms_) kernels::rms_norm(ctx, s.h, s.x, l.in_norm, eps);
    attention(a, i, s, pre_attn);
    pre_attn = nullptr;
    const kernels::AddRmsNorm* pre_ffw = nullptr;
    if (fused_norms_) {
      pre_ffw = post_into_h(l.post_attn_norm, l.pre_ffw_norm, 1.0f);
    } else {
      kernels::rms_norm(ctx, s.proj, s.proj, l.post_attn_norm, eps);
      kernels::add_rms_norm(ctx, s.h, s.x, s.proj, l.pre_ffw_norm, eps);
    }
    feed_forward(ctx, i, s, pre_ffw);
    if (p_.moe) hook_routing(a.hook, static_cast<int>(i), s.moe_buf);
    // x += post_norm(s.proj); the layer's last such step also scales x by the layer scalar and, fused, leaves
    // h = the next layer's in_norm(x) (or its pre).
    auto add_post = [&](Tensor w_post, bool last) {
      const float x_scale = last ? l.layer_scalar : 1.0f;
      if (fused_norms_ && last && !next_in.empty()) {
        pre_attn = post_into_h(w_post, next_in, x_scale);
      } else if (fused_norms_) {
        kernels::post_norm_residual(ctx, {.x = s.x, .y = s.proj, .w_post = w_post, .x_scale = x_scale}, eps);
      } else {
        kernels::rms_norm(ctx, s.proj, s.proj, w_post, eps);
        kernels::add_scaled(ctx, s.x, s.proj);
      }
    };
    add_post(l.post_ffw_norm, p_.ple_dim == 0);  // without PLE the ffw residual is the layer's last op
    if (p_.ple_dim > 0) {
      per_layer_input(ctx, i, s);
      add_post(l.post_ple_norm, true);
    }
    if (!fused_norms_ && l.layer_scalar != 1.0f) kernels::scale(ctx, s.x, l.layer_scalar);
    if (a.hook) a.hook->on("layer", static_cast<int>(i), s.x);
  }
  const Tensor ho = head_input(ctx, w_.lm_head, b, s.x, Tensor{}, 1.0f, s.xo, s.h, w_.final_norm, eps);
  if (a.hook) a.hook->on("final_norm", -1, ho);
  w_.lm_head(ctx, a.logits, ho);
  if (p_.final_softcap > 0.0f) kernels::softcap(ctx, a.logits, p_.final_softcap);
  if (a.hook) a.hook->on("logits", -1, a.logits);
}

}  // namespace

std::unique_ptr<Model> create_gemma4(const ModelConfig& cfg, WeightStore weights) {
  return std::make_unique<Gemma4>(cfg, std::move(weights));
}

}  // namespace bunsen::model::arch
