// Loading the Qwen3.5 / Qwen3-Next hybrid: hyper-parameters from hparams_json, the text model's prefix
// (HF text checkpoints "model.", the qwen3_5 wrapper's "model.language_model.", mlx-vlm's
// "language_model.model."), the conv1d weight in HF [C, 1, K] or MLX [C, K, 1] layout (same memory), the
// zero-centred norms (stored as w in HF checkpoints, as 1 + w after mlx-lm's sanitize: mlx-lm shifts them
// when the checkpoint has mtp.* tensors or an HF-layout conv1d, so the same rule tells which we have), and
// Qwen3-Next's fused in_proj_qkvz / in_proj_ba (grouped per key head) rearranged once into the qkv|z|b|a
// row order of Qwen3.5 (an owned copy of those two matrices; everything else is a view).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "core/status.h"
#include "kernels/device.h"
#include "model/arch/qwen3_5_parts.h"

namespace bunsen::model::arch::qwen3_5 {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, int64_t def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  check(j.at(key).is_number_integer() && j.at(key).get<int64_t>() >= 0, "config",
        std::string("'") + key + "' must be a non-negative integer");
  return j.at(key).get<int64_t>();
}

std::string lp(const HybridWeights& w, int64_t i) { return w.root + "layers." + std::to_string(i) + "."; }

// Rows `order` of `src` (float or quantized) as a new owned matrix on the weights' device.
Tensor gather_rows_owned(const Tensor& src, const std::vector<int64_t>& order, HybridWeights& hw) {
  const size_t row_bytes = static_cast<size_t>(src.shape[1]) * dtype_size(src.dtype);
  const Device dev = src.device;
  auto mem = std::make_shared<kernels::DeviceMemory>(
      kernels::DeviceMemory::allocate(dev, std::max<size_t>(row_bytes * order.size(), 1)));
  char* dst = static_cast<char*>(mem->data());
  const char* base = static_cast<const char*>(src.data);
  const size_t stride = static_cast<size_t>(src.strides[0]) * dtype_size(src.dtype);
  kernels::Context ctx;
  for (size_t r = 0; r < order.size(); ++r) {
    const char* from = base + static_cast<size_t>(order[r]) * stride;
    if (dev.is_cuda()) kernels::copy_async(ctx, dst + r * row_bytes, from, row_bytes);
    else std::memcpy(dst + r * row_bytes, from, row_bytes);
  }
  if (dev.is_cuda()) kernels::synchronize(ctx);
  hw.owned.push_back(mem);
  return Tensor::view(dst, src.dtype, {static_cast<int64_t>(order.size()), src.shape[1]}, dev);
}

Linear gather_linear(const Linear& l, const std::vector<int64_t>& order, HybridWeights& hw) {
  Linear out;
  if (l.quantized()) {
    out.q = l.q;
    out.q.packed = gather_rows_owned(l.q.packed, order, hw);
    out.q.scales = gather_rows_owned(l.q.scales, order, hw);
    out.q.biases = gather_rows_owned(l.q.biases, order, hw);
  } else {
    out.w = gather_rows_owned(l.w, order, hw);
  }
  if (!l.b.empty()) throw Error("weights", "fused DeltaNet projections with a bias are not supported");
  return out;
}

// Qwen3-Next's in_proj_qkvz [n_k * (2 dk + 2 r dv), d] (per key head: q, k, r v heads, r z heads) and
// in_proj_ba [n_k * 2 r, d] (per key head: r b, r a) -> qkv, z, b, a in Qwen3.5's row order.
void split_fused(const WeightStore& ws, const ModelConfig& c, const HybridParams& hp, const std::string& p,
                 DeltaNet& dn, HybridWeights& hw) {
  const int64_t r = hp.n_v / hp.n_k, group = 2 * hp.dk + 2 * r * hp.dv;
  Linear qkvz = load_linear(ws, c, p + "in_proj_qkvz", hp.n_k * group, c.d_model, false);
  Linear ba = load_linear(ws, c, p + "in_proj_ba", 2 * hp.n_v, c.d_model, false);
  std::vector<int64_t> qkv, z, b, a;
  auto rows = [](std::vector<int64_t>& v, int64_t from, int64_t n) {
    for (int64_t i = 0; i < n; ++i) v.push_back(from + i);
  };
  for (int64_t g = 0; g < hp.n_k; ++g) rows(qkv, g * group, hp.dk);                          // q
  for (int64_t g = 0; g < hp.n_k; ++g) rows(qkv, g * group + hp.dk, hp.dk);                  // k
  for (int64_t g = 0; g < hp.n_k; ++g) rows(qkv, g * group + 2 * hp.dk, r * hp.dv);          // v
  for (int64_t g = 0; g < hp.n_k; ++g) rows(z, g * group + 2 * hp.dk + r * hp.dv, r * hp.dv);  // z
  for (int64_t g = 0; g < hp.n_k; ++g) rows(b, g * 2 * r, r);
  for (int64_t g = 0; g < hp.n_k; ++g) rows(a, g * 2 * r + r, r);
  dn.qkv = gather_linear(qkvz, qkv, hw);
  dn.z = gather_linear(qkvz, z, hw);
  dn.b = gather_linear(ba, b, hw);
  dn.a = gather_linear(ba, a, hw);
}

DeltaNet load_deltanet(const WeightStore& ws, const ModelConfig& c, const HybridParams& hp, const std::string& p,
                       HybridWeights& hw) {
  DeltaNet dn;
  const int64_t d = c.d_model;
  if (hp.fused_in_proj) {
    split_fused(ws, c, hp, p, dn, hw);
  } else {
    dn.qkv = load_linear(ws, c, p + "in_proj_qkv", hp.conv_dim(), d, false);
    dn.z = load_linear(ws, c, p + "in_proj_z", hp.value_dim(), d, false);
    dn.b = load_linear(ws, c, p + "in_proj_b", hp.n_v, d, false);
    dn.a = load_linear(ws, c, p + "in_proj_a", hp.n_v, d, false);
  }
  dn.out = load_linear(ws, c, p + "out_proj", d, hp.value_dim(), false);
  const std::string cw = p + "conv1d.weight";
  const Tensor conv = ws.get(cw);
  const bool hf = conv.ndim == 3 && conv.shape[1] == 1 && conv.shape[2] == hp.conv_kernel;
  const bool mlx = conv.ndim == 3 && conv.shape[1] == hp.conv_kernel && conv.shape[2] == 1;
  if (conv.shape[0] != hp.conv_dim() || !(hf || mlx) || !is_float(conv.dtype) || !conv.is_contiguous())
    throw Error("weights", "tensor '" + cw + "' has shape " + conv.shape_str() +
                               strfmt(", expected [%lld, 1, %lld] (or MLX's [%lld, %lld, 1])",
                                      (long long)hp.conv_dim(), (long long)hp.conv_kernel,
                                      (long long)hp.conv_dim(), (long long)hp.conv_kernel));
  dn.conv_w = conv.reshape({hp.conv_dim(), hp.conv_kernel});
  dn.a_log = float_weight(ws, p + "A_log", {hp.n_v});
  dn.dt_bias = float_weight(ws, p + "dt_bias", {hp.n_v});
  dn.norm = float_weight(ws, p + "norm.weight", {hp.dv});
  return dn;
}

GatedAttention load_attention(const WeightStore& ws, const ModelConfig& c, const HybridParams& hp,
                              const std::string& p) {
  GatedAttention at;
  const bool bias = hp.attention_bias;
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  at.q = load_linear(ws, c, p + "q_proj", 2 * q_dim, d, bias);
  at.k = load_linear(ws, c, p + "k_proj", kv_dim, d, bias);
  at.v = load_linear(ws, c, p + "v_proj", kv_dim, d, bias);
  at.o = load_linear(ws, c, p + "o_proj", d, q_dim, bias);
  at.q_norm = float_weight(ws, p + "q_norm.weight", {hd});
  at.k_norm = float_weight(ws, p + "k_norm.weight", {hd});
  return at;
}

Mlp load_mlp(const WeightStore& ws, const ModelConfig& c, const std::string& p, int64_t f) {
  return {load_linear(ws, c, p + "gate_proj", f, c.d_model, false),
          load_linear(ws, c, p + "up_proj", f, c.d_model, false),
          load_linear(ws, c, p + "down_proj", c.d_model, f, false)};
}

// mlx-lm's rule: a checkpoint with mtp.* tensors or an HF-layout conv1d holds raw zero-centred norms.
float norm_offset(const WeightStore& ws, const HybridWeights& hw, const HybridParams& hp) {
  for (const std::string& n : ws.names())
    if (n.find("mtp.") != std::string::npos) return 1.0f;
  for (size_t i = 0; i < hp.linear.size(); ++i) {
    if (!hp.linear[i]) continue;
    const Tensor conv = ws.get(lp(hw, static_cast<int64_t>(i)) + "linear_attn.conv1d.weight");
    return conv.ndim == 3 && conv.shape[2] != 1 ? 1.0f : 0.0f;
  }
  return 1.0f;
}

}  // namespace

bool HybridParams::moe_layer(int64_t i) const {
  if (n_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end()) return false;
  return sparse_step > 0 && (i + 1) % sparse_step == 0;
}

MoeSpec HybridParams::moe_spec(int64_t d_model) const {
  MoeSpec s;
  s.n_experts = n_experts;
  s.top_k = top_k;
  s.d_model = d_model;
  s.d_expert = d_expert;
  s.scoring = kernels::MoeScoring::kSoftmax;
  s.norm_topk = norm_topk;
  s.act = kernels::MoeActivation::kSilu;
  return s;
}

HybridParams parse_hybrid(const ModelConfig& cfg) {
  const json j = json::parse(cfg.hparams_json);
  HybridParams hp;
  hp.linear.assign(static_cast<size_t>(cfg.n_layers), false);
  check(j.contains("layer_types") && j.at("layer_types").is_array() &&
            j.at("layer_types").size() == hp.linear.size(),
        "config", cfg.model_type + ": 'layer_types' must list num_hidden_layers layer kinds");
  for (size_t i = 0; i < hp.linear.size(); ++i) hp.linear[i] = j.at("layer_types")[i] == "linear_attention";
  hp.conv_kernel = get_int(j, "linear_conv_kernel_dim", 4);
  hp.n_k = get_int(j, "linear_num_key_heads", 16);
  hp.n_v = get_int(j, "linear_num_value_heads", 32);
  hp.dk = get_int(j, "linear_key_head_dim", 128);
  hp.dv = get_int(j, "linear_value_head_dim", 128);
  hp.attention_bias = j.contains("attention_bias") && j.at("attention_bias") == true;
  check(hp.n_k > 0 && hp.n_v % hp.n_k == 0 && hp.dk > 0 && hp.dv > 0 && hp.conv_kernel >= 2 && hp.conv_kernel <= 8,
        "config", cfg.model_type + ": linear attention needs linear_num_value_heads a multiple of "
                                   "linear_num_key_heads, positive head dims and a conv kernel in [2, 8]");
  if (cfg.model_type == "qwen3_next") {
    hp.fused_in_proj = true;
    hp.n_experts = get_int(j, "num_experts", 512);
    hp.top_k = get_int(j, "num_experts_per_tok", 10);
    hp.d_expert = get_int(j, "moe_intermediate_size", 512);
    hp.d_shared = get_int(j, "shared_expert_intermediate_size", 512);
    hp.sparse_step = get_int(j, "decoder_sparse_step", 1);
    hp.norm_topk = !j.contains("norm_topk_prob") || j.at("norm_topk_prob") != false;
    if (j.contains("mlp_only_layers") && j.at("mlp_only_layers").is_array())
      for (const auto& v : j.at("mlp_only_layers")) hp.mlp_only_layers.push_back(v.get<int64_t>());
    check(hp.n_experts == 0 || (hp.top_k >= 1 && hp.top_k <= hp.n_experts && hp.d_expert > 0 && hp.d_shared > 0),
          "config", "qwen3_next: num_experts_per_tok must be in [1, num_experts] and the expert sizes > 0");
  }
  return hp;
}

HybridWeights load_hybrid(const WeightStore& ws, const ModelConfig& c, const HybridParams& hp) {
  HybridWeights hw;
  std::string lm_head = "lm_head";
  for (const char* root : {"model.language_model.", "language_model.model.", "model."})
    if (ws.has(std::string(root) + "embed_tokens.weight") || ws.has(std::string(root) + "embed_tokens.scales")) {
      hw.root = root;
      if (hw.root == "language_model.model.") lm_head = "language_model.lm_head";
      break;
    }
  if (hw.root.empty()) throw Error("weights", "no embed_tokens.weight under model., model.language_model. or "
                                              "language_model.model.: not a Qwen3.5 / Qwen3-Next checkpoint");
  const int64_t d = c.d_model;
  hw.embed = load_embedding(ws, c, hw.root + "embed_tokens", c.vocab_size, d);
  hw.final_norm = float_weight(ws, hw.root + "norm.weight", {d});
  hw.lm_head = c.tie_word_embeddings ? hw.embed.as_linear() : load_linear(ws, c, lm_head, c.vocab_size, d, false);
  hw.norm_offset = norm_offset(ws, hw, hp);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = lp(hw, i);
    Layer l;
    l.linear = hp.linear[static_cast<size_t>(i)];
    l.in_norm = float_weight(ws, p + "input_layernorm.weight", {d});
    l.post_norm = float_weight(ws, p + "post_attention_layernorm.weight", {d});
    if (l.linear) l.dn = load_deltanet(ws, c, hp, p + "linear_attn.", hw);
    else l.at = load_attention(ws, c, hp, p + "self_attn.");
    if (hp.moe_layer(i)) {
      l.moe = std::make_shared<MoeLayer>(load_moe(ws, c, p + "mlp", hp.moe_spec(d)));
      l.mlp = load_mlp(ws, c, p + "mlp.shared_expert.", hp.d_shared);
      l.shared_gate = load_linear(ws, c, p + "mlp.shared_expert_gate", 1, d, false);
    } else {
      l.mlp = load_mlp(ws, c, p + "mlp.", c.d_ff);
    }
    hw.layers.push_back(std::move(l));
  }
  return hw;
}

std::vector<TensorSpec> hybrid_tensors(const ModelConfig& c, const HybridParams& hp) {
  const std::string root = c.model_type == "qwen3_5" ? "model.language_model." : "model.";
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  std::vector<TensorSpec> out;
  out.push_back({root + "embed_tokens.weight", {c.vocab_size, d}});
  auto mlp = [&](const std::string& p, int64_t f) {
    out.push_back({p + "gate_proj.weight", {f, d}});
    out.push_back({p + "up_proj.weight", {f, d}});
    out.push_back({p + "down_proj.weight", {d, f}});
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    if (hp.linear[static_cast<size_t>(i)]) {
      const std::string a = p + "linear_attn.";
      if (hp.fused_in_proj) {
        out.push_back({a + "in_proj_qkvz.weight", {hp.conv_dim() + hp.value_dim(), d}});
        out.push_back({a + "in_proj_ba.weight", {2 * hp.n_v, d}});
      } else {
        out.push_back({a + "in_proj_qkv.weight", {hp.conv_dim(), d}});
        out.push_back({a + "in_proj_z.weight", {hp.value_dim(), d}});
        out.push_back({a + "in_proj_b.weight", {hp.n_v, d}});
        out.push_back({a + "in_proj_a.weight", {hp.n_v, d}});
      }
      out.push_back({a + "conv1d.weight", {hp.conv_dim(), 1, hp.conv_kernel}});
      out.push_back({a + "A_log", {hp.n_v}});
      out.push_back({a + "dt_bias", {hp.n_v}});
      out.push_back({a + "norm.weight", {hp.dv}});
      out.push_back({a + "out_proj.weight", {d, hp.value_dim()}});
    } else {
      const std::string a = p + "self_attn.";
      for (auto [name, rows, cols] : {std::tuple{"q_proj", 2 * q_dim, d}, {"k_proj", kv_dim, d},
                                      {"v_proj", kv_dim, d}, {"o_proj", d, q_dim}}) {
        out.push_back({a + name + ".weight", {rows, cols}});
        if (hp.attention_bias) out.push_back({a + name + ".bias", {rows}});
      }
      out.push_back({a + "q_norm.weight", {hd}});
      out.push_back({a + "k_norm.weight", {hd}});
    }
    if (hp.moe_layer(i)) {
      append_moe_tensors(out, p + "mlp", hp.moe_spec(d));
      mlp(p + "mlp.shared_expert.", hp.d_shared);
      out.push_back({p + "mlp.shared_expert_gate.weight", {1, d}});
    } else {
      mlp(p + "mlp.", c.d_ff);
    }
  }
  out.push_back({root + "norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

}  // namespace bunsen::model::arch::qwen3_5
