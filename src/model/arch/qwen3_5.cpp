// Qwen3.5 / Qwen3-Next hybrid decoder: pre-norm blocks
//   x += mixer(rms_norm(x)); x += mlp(rms_norm(x))   (every norm zero-centred: weight + norm_offset)
// where mixer is a gated DeltaNet (in_proj -> causal conv1d + SiLU with per-sequence conv state -> l2-normed
// q/k, gated delta rule with per-sequence recurrent state -> gated RMSNorm with z -> out_proj) or gated full
// attention (q_proj gives per-head query and gate; q/k RMSNorm; partial rotary; paged attention; * sigmoid
// (gate); o_proj). Linear layers keep no paged KV: kv_layout() marks them kLinear with their state sizes and
// forward() reads/writes the state slots the Runner passes (ForwardArgs::state, StepBatch::state_slots).
// On CUDA, steps of <= 2 tokens (batch-1 decode) run the DeltaNet's conv, delta rule and gated norm as one
// launch (kernels::deltanet_decode_fused; BUNSEN_DELTANET_FUSED=0: the three ops).
// On the CPU every activation is f32; on CUDA the residual stream and logit rows are f32, the rest bf16.
// BUNSEN_FUSED_NORM=1 (kernels::fused_norm_enabled): on CUDA decode steps the residual add + norm before each
// mixer and dense MLP runs in the prologue of its first projection (same bits as add_rms_norm first).
#include "model/arch/qwen3_5.h"

#include <array>
#include <cmath>

#include "core/status.h"
#include "model/arch/qwen3_5_parts.h"
#include "model/residual.h"

namespace bunsen::model::arch {
namespace {

using namespace qwen3_5;

// [n, heads * dim] rows (any row stride) viewed as [n, heads, dim].
Tensor split_heads(Tensor t, int64_t heads, int64_t dim) {
  Tensor v = t;
  v.ndim = 3;
  v.shape[0] = t.shape[0];
  v.shape[1] = heads;
  v.shape[2] = dim;
  v.strides[0] = t.strides[0];
  v.strides[1] = dim;
  v.strides[2] = 1;
  return v;
}

class Hybrid final : public Model {
 public:
  Hybrid(const ModelConfig& cfg, WeightStore weights)
      : cfg_(cfg),
        hp_(parse_hybrid(cfg)),
        weights_(std::move(weights)),
        act_dtype_(weights_.device().is_cuda() ? DType::kBF16 : DType::kF32),
        w_(load_hybrid(weights_, cfg_, hp_)),
        rope_(compute_rope(cfg_, 0)),
        rope_params_{rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling} {}

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return weights_.device(); }

  std::vector<KvLayerSpec> kv_layout() const override { return qwen3_5_kv_layout(cfg_); }

  size_t workspace_bytes(int64_t max_tokens, int64_t max_out) const override {
    return model::workspace_bytes(buffer_specs(max_tokens, max_out));
  }

  size_t weight_bytes_per_token() const override {
    size_t total = w_.final_norm.nbytes() + w_.lm_head.bytes() + w_.embed.row_bytes();
    for (const Layer& l : w_.layers) {
      total += l.in_norm.nbytes() + l.post_norm.nbytes();
      if (l.linear) {
        const DeltaNet& d = l.dn;
        for (const Linear* p : {&d.qkv, &d.z, &d.b, &d.a, &d.out}) total += p->bytes();
        total += d.conv_w.nbytes() + d.a_log.nbytes() + d.dt_bias.nbytes() + d.norm.nbytes();
      } else {
        const GatedAttention& a = l.at;
        for (const Linear* p : {&a.q, &a.k, &a.v, &a.o}) total += p->bytes();
        total += a.q_norm.nbytes() + a.k_norm.nbytes();
      }
      for (const Linear* p : {&l.mlp.gate, &l.mlp.up, &l.mlp.down, &l.shared_gate}) total += p->bytes();
      if (l.moe) total += l.moe->active_bytes();
    }
    return total;
  }

  void forward(const ForwardArgs& a) override;

 private:
  // x, h, proj, qg, k, v, attn, qkv, conv, z, b, a, core, gate, up, act, xo, shared, shared gate, x_alt
  // (the residual's second buffer when the norms run in the projections' prologues); then the MoE buffers
  // (qwen3_next)
  static constexpr size_t kBuffers = 20;
  std::vector<WorkspaceSpec> buffer_specs(int64_t n, int64_t n_out) const {
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim, q_dim = cfg_.n_heads * hd, kv_dim = cfg_.n_kv_heads * hd;
    const int64_t f = std::max(cfg_.d_ff, hp_.d_shared);
    const DType a = act_dtype_, f32 = DType::kF32;
    // The DeltaNet intermediates (qkv, conv, z, b, a, core) stay f32 on CUDA too: the recurrence compounds
    // their rounding (HF keeps them in the model dtype; f32 is closer to its f32 goldens). So do the MLP's
    // gate and up of prefill steps, as the fused decode launch keeps them: rounded to bf16 before the SiLU
    // they put Qwen3-Next's prompt rows at cosine 0.995 against 0.9995 for its decode rows (H200).
    std::vector<WorkspaceSpec> s = {{f32, n, d},
                                    {a, n, d},
                                    {a, n, d},
                                    {a, n, 2 * q_dim},
                                    {a, n, kv_dim},
                                    {a, n, kv_dim},
                                    {a, n, q_dim},
                                    {f32, n, hp_.conv_dim()},
                                    {f32, n, hp_.conv_dim()},
                                    {f32, n, hp_.value_dim()},
                                    {f32, n, hp_.n_v},
                                    {f32, n, hp_.n_v},
                                    {f32, n, hp_.value_dim()},
                                    {f32, n, f},
                                    {f32, n, f},
                                    {a, n, f},
                                    {f32, n_out, d},
                                    {a, n, d},
                                    {a, n, 1},
                                    {f32, n, d}};
    if (hp_.n_experts > 0) append_moe_workspace(s, hp_.moe_spec(d), n);
    return s;
  }

  // pre (optional): the residual add + norm that produce h (kernels::AddRmsNorm), run inside the first
  // projection's GEMV where it applies, else add_rms_norm first; null: h is ready.
  void attention(const ForwardArgs& a, const GatedAttention& l, const kernels::PagedKv& kv, Tensor h,
                 Tensor out, const kernels::AddRmsNorm* pre);
  void deltanet(const ForwardArgs& a, const DeltaNet& l, const kernels::LinearState& st, Tensor h, Tensor out,
                const kernels::AddRmsNorm* pre);
  void mlp(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out, const kernels::AddRmsNorm* pre);

  ModelConfig cfg_;
  HybridParams hp_;
  WeightStore weights_;
  DType act_dtype_;
  HybridWeights w_;
  RopeTable rope_;
  kernels::RopeParams rope_params_;
  // Step scratch, from the workspace in forward().
  Tensor qg_, k_, v_, attn_, qkv_, conv_, z_, b_, a_, core_, gate_, up_, act_, shared_, shared_gate_;
  MoeBuffers moe_buf_;
};

void Hybrid::attention(const ForwardArgs& a, const GatedAttention& l, const kernels::PagedKv& kv, Tensor h,
                       Tensor out, const kernels::AddRmsNorm* pre) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), hd = cfg_.head_dim, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const float eps = static_cast<float>(cfg_.rms_norm_eps), off = w_.norm_offset;
  project(ctx, h, {{&l.q, qg_}, {&l.k, k_}, {&l.v, v_}}, pre);
  const Tensor qg3 = qg_.reshape({n, H, 2 * hd});
  Tensor q3 = qg3.slice(2, 0, hd), gate3 = qg3.slice(2, hd, 2 * hd);
  Tensor k3 = k_.reshape({n, Hkv, hd}), v3 = v_.reshape({n, Hkv, hd}), o3 = attn_.reshape({n, H, hd});
  kernels::rms_norm(ctx, q3, q3, l.q_norm, eps, off);
  kernels::rms_norm(ctx, k3, k3, l.k_norm, eps, off);
  kernels::rope_kv_write(ctx, q3, k3, v3, kv, b.positions, b.slot_mapping, rope_params_);
  kernels::AttentionParams p;
  p.scale = cfg_.attention_scale();
  const int64_t nd = b.n_single;
  if (device().is_cuda() && nd > 0 && nd < n) {  // decode rows and prefill chunks take different kernels
    auto rows = [](const Tensor& t, int64_t lo, int64_t hi) { return t.slice(0, lo, hi); };
    const kernels::AttentionMeta md{rows(b.positions, 0, nd), rows(b.seq_index, 0, nd), b.block_tables,
                                    rows(b.slot_mapping, 0, nd)};
    const kernels::AttentionMeta mp{rows(b.positions, nd, n), rows(b.seq_index, nd, n), b.block_tables,
                                    rows(b.slot_mapping, nd, n)};
    kernels::paged_attention(ctx, rows(o3, 0, nd), rows(q3, 0, nd), kv, md, p);
    kernels::paged_attention(ctx, rows(o3, nd, n), rows(q3, nd, n), kv, mp, p);
  } else {
    const kernels::AttentionMeta meta{b.positions, b.seq_index, b.block_tables, b.slot_mapping};
    kernels::paged_attention(ctx, o3, q3, kv, meta, p);
  }
  kernels::sigmoid_mul(ctx, o3, o3, gate3);
  l.o(ctx, out, attn_);
}

void Hybrid::deltanet(const ForwardArgs& a, const DeltaNet& l, const kernels::LinearState& st, Tensor h,
                      Tensor out, const kernels::AddRmsNorm* pre) {
  kernels::Context& ctx = *a.ctx;
  const StepBatch& b = *a.batch;
  const int64_t n = b.n_tokens(), kd = hp_.key_dim();
  project(ctx, h, {{&l.qkv, qkv_}, {&l.z, z_}, {&l.b, b_}, {&l.a, a_}}, pre);
  const kernels::StateMeta meta{b.seq_starts, b.state_slots, b.positions};
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(hp_.dk)), eps = static_cast<float>(cfg_.rms_norm_eps);
  if (device().is_cuda()) {  // decode steps: conv, delta rule and gated norm in one launch where it applies
    kernels::DeltaNetFusedInputs f;
    f.qkv = qkv_;
    f.z = z_;
    f.a = a_;
    f.b = b_;
    f.conv_w = l.conv_w;
    f.a_log = l.a_log;
    f.dt_bias = l.dt_bias;
    f.norm_w = l.norm;
    f.n_k_heads = hp_.n_k;
    f.n_v_heads = hp_.n_v;
    f.k_head_dim = hp_.dk;
    f.v_head_dim = hp_.dv;
    f.q_scale = q_scale;
    f.eps = eps;
    if (kernels::deltanet_decode_fused(ctx, core_, f, st, meta)) {
      l.out(ctx, out, core_);
      return;
    }
  }
  kernels::causal_conv1d(ctx, conv_, qkv_, l.conv_w, st.conv, meta);
  kernels::DeltaRuleInputs in;
  in.q = split_heads(conv_.slice(1, 0, kd), hp_.n_k, hp_.dk);
  in.k = split_heads(conv_.slice(1, kd, 2 * kd), hp_.n_k, hp_.dk);
  in.v = split_heads(conv_.slice(1, 2 * kd, hp_.conv_dim()), hp_.n_v, hp_.dv);
  in.a = a_;
  in.b = b_;
  in.a_log = l.a_log;
  in.dt_bias = l.dt_bias;
  Tensor core3 = core_.reshape({n, hp_.n_v, hp_.dv});
  kernels::gated_delta_rule(ctx, core3, in, st.recurrent, meta, q_scale);
  Tensor core2 = core_.reshape({n * hp_.n_v, hp_.dv}), z2 = z_.reshape({n * hp_.n_v, hp_.dv});
  kernels::rms_norm_gated(ctx, core2, core2, z2, l.norm, eps);
  l.out(ctx, out, core_);
}

// Dense SwiGLU MLP; on MoE layers the routed experts plus sigmoid(shared_expert_gate(h)) * shared_expert(h)
// (h itself is read there: a pre runs as add_rms_norm first).
void Hybrid::mlp(kernels::Context& ctx, const Layer& l, Tensor h, Tensor out,
                 const kernels::AddRmsNorm* pre) {
  const int64_t f = l.mlp.gate.out_features();
  Tensor gate = gate_.slice(1, 0, f), up = up_.slice(1, 0, f), act = act_.slice(1, 0, f);
  const Tensor dense_out = l.moe ? shared_ : out;
  if (l.moe && pre != nullptr) {
    kernels::add_rms_norm(ctx, h, *pre);
    pre = nullptr;
  }
  gated_mlp(ctx, l.mlp.gate, l.mlp.up, l.mlp.down, h, dense_out, act, gate, up, kernels::GluAct::kSilu, pre);
  if (!l.moe) return;
  moe_forward(ctx, *l.moe, out, h, moe_buf_);
  // [n, 1]: on CUDA a narrow output stays on the GEMV for any n (gemv.cu). It once ran as [1, n] = w . h^T
  // with h passed as the GEMV's weights, which the GEMV prefetches before its programmatic-dependent-launch
  // wait: h could be read before the kernel writing it had finished (wrong gates in Qwen3-Next on the H200).
  l.shared_gate(ctx, shared_gate_, h);
  kernels::sigmoid_mul(ctx, shared_, shared_, shared_gate_);
  kernels::add_scaled(ctx, out, shared_, 1.0f);
}

void Hybrid::forward(const ForwardArgs& a) {
  const StepBatch& b = *a.batch;
  kernels::Context& ctx = *a.ctx;
  const int64_t n = b.n_tokens(), n_out = b.n_out();
  check(a.kv.size() == w_.layers.size() && a.state.size() == w_.layers.size(), "model",
        "forward: KV cache / linear-attention state have the wrong number of layers");
  if (a.logits.dim(0) != n_out || a.logits.dim(1) != cfg_.vocab_size)
    throw Error("model", "forward: logits must be [n_out, vocab_size], got " + a.logits.shape_str());
  Arena& ws = *a.workspace;
  ws.reset();
  std::array<Tensor, kBuffers> t;
  const auto specs = buffer_specs(n, n_out);
  for (size_t i = 0; i < kBuffers; ++i) t[i] = ws.alloc(specs[i].dtype, {specs[i].rows, specs[i].cols});
  if (hp_.n_experts > 0) moe_buf_ = alloc_moe_buffers(ws, hp_.moe_spec(cfg_.d_model), n);  // after the above
  Tensor x = t[0], h = t[1], proj = t[2], xo = t[16];
  qg_ = t[3], k_ = t[4], v_ = t[5], attn_ = t[6], qkv_ = t[7], conv_ = t[8], z_ = t[9], b_ = t[10], a_ = t[11];
  core_ = t[12], gate_ = t[13], up_ = t[14], act_ = t[15], shared_ = t[17], shared_gate_ = t[18];
  const float eps = static_cast<float>(cfg_.rms_norm_eps), off = w_.norm_offset;

  w_.embed(ctx, x, b.token_ids);
  if (a.hook) a.hook->on("embed", -1, x);
  if (a.hook) a.hook->on("decoder_in", -1, x);
  // Each residual add is fused with the norm that follows it. With norms_in_projections (decode steps without
  // a hook, kernels::fused_norm_enabled()) the add and norm run inside the projection that reads them
  // (model::Residual, the GEMV's prologue on CUDA), as in llama.cpp's forward; elsewhere add_rms_norm updates
  // x in place.
  // On by default on CUDA: H200 Qwen3.5-4B shape 340.3 vs 333.2 tok/s.
  Residual res(x, t[19], norms_in_projections(a.hook != nullptr, n, x.device.is_cuda()), eps, 1.0f, off);
  if (!w_.layers.empty()) kernels::rms_norm(ctx, h, x, w_.layers[0].in_norm, eps, off);
  const kernels::AddRmsNorm* pre = nullptr;  // the norm that produces h, when left to its projection
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const Layer& l = w_.layers[i];
    if (l.linear)
      deltanet(a, l.dn, a.state[i], h, proj, pre);
    else
      attention(a, l.at, a.kv[i], h, proj, pre);
    mlp(ctx, l, h, proj, res.add_norm(ctx, h, proj, l.post_norm));
    if (l.moe) hook_routing(a.hook, static_cast<int>(i), moe_buf_);
    if (i + 1 < w_.layers.size())
      pre = res.add_norm(ctx, h, proj, w_.layers[i + 1].in_norm);
    else if (a.hook)  // the hook sees the last layer's output; otherwise head_input adds it
      kernels::add_scaled(ctx, res.x(), proj, 1.0f);
    if (a.hook) a.hook->on("layer", static_cast<int>(i), res.x());
  }
  const Tensor y_last = a.hook || w_.layers.empty() ? Tensor{} : proj;
  const Tensor ho = head_input(ctx, w_.lm_head, b, res.x(), y_last, 1.0f, xo, h, w_.final_norm, eps, off);
  if (a.hook) a.hook->on("final_norm", -1, ho);
  w_.lm_head(ctx, a.logits, ho);
  if (a.hook) a.hook->on("logits", -1, a.logits);
}

}  // namespace

std::unique_ptr<Model> create_qwen3_5(const ModelConfig& cfg, WeightStore weights) {
  return std::make_unique<Hybrid>(cfg, std::move(weights));
}

std::vector<KvLayerSpec> qwen3_5_kv_layout(const ModelConfig& cfg) {
  const qwen3_5::HybridParams hp = qwen3_5::parse_hybrid(cfg);
  std::vector<KvLayerSpec> out;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    KvLayerSpec s;
    if (hp.linear[static_cast<size_t>(i)]) {
      s.kind = KvLayerSpec::Kind::kLinear;
      s.conv_channels = hp.conv_dim();
      s.conv_len = hp.conv_kernel - 1;
      s.state_heads = hp.n_v;
      s.state_k = hp.dk;
      s.state_v = hp.dv;
    } else {
      s.n_kv_heads = cfg.n_kv_heads;
      s.head_dim = cfg.head_dim;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<TensorSpec> qwen3_5_tensors(const ModelConfig& cfg) {
  return qwen3_5::hybrid_tensors(cfg, qwen3_5::parse_hybrid(cfg));
}

}  // namespace bunsen::model::arch
