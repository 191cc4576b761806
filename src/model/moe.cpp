// The MoE block (moe.h): expert weights resolved from any of the three checkpoint layouts into per-expert
// address tables (no copy of the weights), the router, and the forward (router linear -> moe_route ->
// moe_experts), with the CPU-only routing override between moe_route and moe_experts. Not a decoder layer.
// Invariants: every expert of one projection has the same shape, dtype and quantization (checked at load,
// errors name the tensor); the tables live on the weights' device; without an installed RoutingOverride the
// forward is exactly router -> moe_route -> moe_experts.
#include "model/moe.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/status.h"
#include "kernels/device.h"
#include "kernels/moe_row.h"

namespace bunsen::model {
namespace {

constexpr const char* kComponent = "weights";

thread_local RoutingOverride* t_override = nullptr;  // RoutingOverrideScope's, per thread

// The decoder layer index of a block prefix: the digits after its last "layers." (-1 when there are none).
int layer_of(const std::string& prefix) {
  const size_t at = prefix.rfind("layers.");
  if (at == std::string::npos) return -1;
  size_t i = at + 7;
  int v = -1;
  while (i < prefix.size() && std::isdigit(static_cast<unsigned char>(prefix[i])) && v < 1000000)
    v = (v < 0 ? 0 : v * 10) + (prefix[i++] - '0');
  return v;
}

int64_t address(const Tensor& t, int64_t element_offset = 0) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(static_cast<const char*>(t.data) +
                                                         element_offset * static_cast<int64_t>(dtype_size(t.dtype))));
}

// One projection's host-side description before its tables are placed on the device.
struct HostProjection {
  std::vector<int64_t> ptrs, scale_ptrs, bias_ptrs;  // [n_experts] each (scale/bias: quantized only)
  DType dtype = DType::kBF16;
  int bits = 0, group_size = 0;
  size_t bytes_per_expert = 0;
};

void add_expert(HostProjection& p, const Linear& l, const std::string& name) {
  const bool first = p.ptrs.empty();
  const int bits = l.quantized() ? l.q.bits : 0, group = l.quantized() ? l.q.group_size : 0;
  const DType dt = l.quantized() ? l.q.scales.dtype : l.w.dtype;
  if (!first && (bits != p.bits || group != p.group_size || dt != p.dtype))
    throw Error(kComponent, "expert tensor '" + name + "' is stored differently (dtype or quantization) " +
                                "from the other experts of its projection");
  p.bits = bits, p.group_size = group, p.dtype = dt;
  p.bytes_per_expert = l.bytes();
  if (!l.quantized()) {
    check(l.w.is_contiguous(), kComponent, "expert tensor '" + name + "' is not contiguous");
    p.ptrs.push_back(address(l.w));
    return;
  }
  p.ptrs.push_back(address(l.q.packed));
  p.scale_ptrs.push_back(address(l.q.scales));
  p.bias_ptrs.push_back(address(l.q.biases));
}

// Rows [r0, r0 + rows) of expert e of a stacked [E, R, C] float tensor: a contiguous [rows, C] view.
Linear stacked_slice(const Tensor& t, int64_t e, int64_t r0, int64_t rows) {
  Linear l;
  l.w = Tensor::view(static_cast<char*>(t.data) + (e * t.shape[1] + r0) * t.shape[2] * dtype_size(t.dtype), t.dtype,
                     {rows, t.shape[2]}, t.device);
  return l;
}

Tensor stacked_float(const WeightStore& ws, const std::string& name, int64_t e, int64_t r, int64_t c) {
  Tensor t = ws.get(name, {e, r, c});
  check(is_float(t.dtype) && t.is_contiguous(), kComponent,
        "tensor '" + name + "' in " + ws.source_of(name) + " must be a contiguous f32, f16 or bf16 tensor");
  return t;
}

// transformers 5.x: P.gate_up_proj [E, 2F, D] (gate rows first), P.down_proj [E, D, F].
void load_hf_stacked(const WeightStore& ws, const std::string& p, const MoeSpec& s, HostProjection (&out)[3]) {
  const int64_t e = s.n_experts, d = s.d_model, f = s.d_expert;
  const Tensor gu = stacked_float(ws, p + ".gate_up_proj", e, 2 * f, d);
  const Tensor down = stacked_float(ws, p + ".down_proj", e, d, f);
  for (int64_t i = 0; i < e; ++i) {
    add_expert(out[0], stacked_slice(gu, i, 0, f), p + ".gate_up_proj");
    add_expert(out[1], stacked_slice(gu, i, f, f), p + ".gate_up_proj");
    add_expert(out[2], stacked_slice(down, i, 0, d), p + ".down_proj");
  }
}

// Hub per-expert: P.<e>.{gate,up,down}_proj (float or quantized like any Linear).
void load_per_expert(const WeightStore& ws, const ModelConfig& cfg, const std::string& p, const MoeSpec& s,
                     HostProjection (&out)[3]) {
  const int64_t d = s.d_model, f = s.d_expert;
  for (int64_t i = 0; i < s.n_experts; ++i) {
    const std::string q = p + "." + std::to_string(i);
    add_expert(out[0], load_linear(ws, cfg, q + ".gate_proj", f, d, false), q + ".gate_proj");
    add_expert(out[1], load_linear(ws, cfg, q + ".up_proj", f, d, false), q + ".up_proj");
    add_expert(out[2], load_linear(ws, cfg, q + ".down_proj", d, f, false), q + ".down_proj");
  }
}

// One mlx-lm SwitchLinear P [E, rows, cols]: float, or u32 codes + scales/biases [E, rows, cols / group].
void load_switch_linear(const WeightStore& ws, const ModelConfig& cfg, const std::string& p, int64_t e,
                        int64_t rows, int64_t cols, HostProjection& out) {
  const std::string wname = p + ".weight";
  const std::optional<QuantSpec> spec = cfg.quant_spec(p);
  const bool quantized = ws.has(p + ".scales") || (ws.has(wname) && ws.get(wname).dtype == DType::kU32);
  if (!quantized) {
    const Tensor w = stacked_float(ws, wname, e, rows, cols);
    for (int64_t i = 0; i < e; ++i) add_expert(out, stacked_slice(w, i, 0, rows), wname);
    return;
  }
  if (!spec) throw Error(kComponent, "module '" + p + "' is stored quantized but config.json does not quantize it");
  check(is_supported(*spec) && cols % spec->group_size == 0, kComponent,
        strfmt("quantized module '%s': bits=%d group_size=%d do not fit %lld inputs", p.c_str(), spec->bits,
               spec->group_size, (long long)cols));
  const Tensor w = ws.get(wname, {e, rows, cols * spec->bits / 32});
  const Tensor sc = ws.get(p + ".scales", {e, rows, cols / spec->group_size});
  const Tensor bi = ws.get(p + ".biases", {e, rows, cols / spec->group_size});
  check(w.dtype == DType::kU32 && is_float(sc.dtype) && sc.dtype == bi.dtype && w.is_contiguous() &&
            sc.is_contiguous() && bi.is_contiguous(),
        kComponent, "quantized module '" + p + "': expected u32 weight and contiguous scales/biases of one float dtype");
  for (int64_t i = 0; i < e; ++i) {
    Linear l;
    auto slab = [&](const Tensor& t) {
      return Tensor::view(static_cast<char*>(t.data) + i * t.shape[1] * t.shape[2] * dtype_size(t.dtype), t.dtype,
                          {t.shape[1], t.shape[2]}, t.device);
    };
    l.q = kernels::QuantWeight{slab(w), slab(sc), slab(bi), spec->bits, spec->group_size};
    add_expert(out, l, wname);
  }
}

// Places the address tables on the weights' device and points `w` at them.
void place_tables(MoeLayer& l, const HostProjection (&hp)[3], Device device, int64_t rows[3], int64_t cols[3]) {
  std::vector<int64_t> all;
  for (const HostProjection& p : hp)
    for (const auto* v : {&p.ptrs, &p.scale_ptrs, &p.bias_ptrs}) all.insert(all.end(), v->begin(), v->end());
  const size_t bytes = all.size() * sizeof(int64_t);
  l.tables = std::make_shared<kernels::DeviceMemory>(kernels::DeviceMemory::allocate(device, bytes));
  if (device.is_cpu()) std::memcpy(l.tables->data(), all.data(), bytes);
  else kernels::upload(device, std::vector<kernels::HostToDevice>{{l.tables->data(), all.data(), bytes}}, bytes);
  int64_t* base = static_cast<int64_t*>(l.tables->data());
  kernels::ExpertWeights* dst[3] = {&l.experts.gate, &l.experts.up, &l.experts.down};
  const int64_t n = l.spec.n_experts;
  for (int i = 0; i < 3; ++i) {
    kernels::ExpertWeights& w = *dst[i];
    w.ptrs = Tensor::view(base, DType::kI64, {n}, device);
    base += n;
    if (hp[i].bits > 0) {
      w.scale_ptrs = Tensor::view(base, DType::kI64, {n}, device);
      w.bias_ptrs = Tensor::view(base + n, DType::kI64, {n}, device);
      base += 2 * n;
    }
    w.dtype = hp[i].dtype, w.rows = rows[i], w.cols = cols[i], w.bits = hp[i].bits, w.group_size = hp[i].group_size;
  }
}

}  // namespace

size_t MoeLayer::active_bytes() const {
  const size_t scale = expert_scale.empty() ? 0 : expert_scale.nbytes();  // an empty Tensor has numel 1
  return router.bytes() + static_cast<size_t>(spec.top_k) * expert_bytes + scale;
}

size_t MoeLayer::total_bytes() const {
  const size_t scale = expert_scale.empty() ? 0 : expert_scale.nbytes();
  return router.bytes() + static_cast<size_t>(spec.n_experts) * expert_bytes + scale;
}

MoeLayer load_moe(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix, const MoeSpec& spec,
                  const MoeNames& names) {
  check(spec.n_experts > 0 && spec.top_k > 0 && spec.top_k <= spec.n_experts && spec.d_expert > 0, "model",
        strfmt("MoE block '%s': %lld experts, top_k %lld, d_expert %lld are not a valid configuration",
               prefix.c_str(), (long long)spec.n_experts, (long long)spec.top_k, (long long)spec.d_expert));
  MoeLayer l;
  l.spec = spec;
  l.layer = layer_of(prefix);
  l.experts.act = spec.act;
  l.router = load_linear(ws, cfg, prefix + "." + names.router, spec.n_experts, spec.d_model, false);
  const std::string hf = prefix + "." + names.experts, mlx = prefix + "." + names.mlx;
  HostProjection hp[3];
  if (ws.has(hf + ".gate_up_proj")) {
    load_hf_stacked(ws, hf, spec, hp);
  } else if (ws.has(hf + ".0.gate_proj.weight")) {
    load_per_expert(ws, cfg, hf, spec, hp);
  } else if (ws.has(mlx + ".gate_proj.weight")) {
    const int64_t e = spec.n_experts, d = spec.d_model, f = spec.d_expert;
    load_switch_linear(ws, cfg, mlx + ".gate_proj", e, f, d, hp[0]);
    load_switch_linear(ws, cfg, mlx + ".up_proj", e, f, d, hp[1]);
    load_switch_linear(ws, cfg, mlx + ".down_proj", e, d, f, hp[2]);
  } else {
    throw Error(kComponent, "MoE block '" + prefix + "': no expert weights (looked for " + hf + ".gate_up_proj, " +
                                hf + ".0.gate_proj.weight and " + mlx + ".gate_proj.weight)");
  }
  l.expert_bytes = hp[0].bytes_per_expert + hp[1].bytes_per_expert + hp[2].bytes_per_expert;
  int64_t rows[3] = {spec.d_expert, spec.d_expert, spec.d_model}, cols[3] = {spec.d_model, spec.d_model, spec.d_expert};
  place_tables(l, hp, ws.device(), rows, cols);
  return l;
}

void append_moe_tensors(std::vector<TensorSpec>& out, const std::string& prefix, const MoeSpec& s,
                        const MoeNames& names) {
  out.push_back({prefix + "." + names.router + ".weight", {s.n_experts, s.d_model}});
  out.push_back({prefix + "." + names.experts + ".gate_up_proj", {s.n_experts, 2 * s.d_expert, s.d_model}});
  out.push_back({prefix + "." + names.experts + ".down_proj", {s.n_experts, s.d_model, s.d_expert}});
}

void append_moe_workspace(std::vector<WorkspaceSpec>& out, const MoeSpec& s, int64_t n_tokens) {
  out.push_back({DType::kF32, n_tokens, s.n_experts});
  out.push_back({DType::kI32, n_tokens, s.top_k});
  out.push_back({DType::kF32, n_tokens, s.top_k});
}

MoeBuffers alloc_moe_buffers(Arena& ws, const MoeSpec& s, int64_t n_tokens) {
  MoeBuffers b;
  b.logits = ws.alloc(DType::kF32, {n_tokens, s.n_experts});
  b.ids = ws.alloc(DType::kI32, {n_tokens, s.top_k});
  b.weights = ws.alloc(DType::kF32, {n_tokens, s.top_k});
  return b;
}

void moe_forward(kernels::Context& ctx, const MoeLayer& l, Tensor out, Tensor x, const MoeBuffers& buf,
                 Tensor router_x) {
  l.router(ctx, buf.logits, router_x.empty() ? x : router_x);
  kernels::MoeRouteParams p;
  p.top_k = static_cast<int>(l.spec.top_k);
  p.scoring = l.spec.scoring;
  p.norm_topk = l.spec.norm_topk;
  p.scale = l.spec.routed_scale;
  p.expert_scale = l.expert_scale;
  kernels::moe_route(ctx, buf.ids, buf.weights, buf.logits, p);
  if (t_override != nullptr && buf.ids.device.is_cpu()) t_override->apply(l.layer, buf.ids, buf.weights, buf.logits, p);
  kernels::moe_experts(ctx, out, x, buf.ids, buf.weights, l.experts);
}

RoutingOverrideScope::RoutingOverrideScope(RoutingOverride* o) : previous_(t_override) { t_override = o; }
RoutingOverrideScope::~RoutingOverrideScope() { t_override = previous_; }

void RoutingOverride::apply(int layer, Tensor ids, Tensor weights, const Tensor& logits,
                            const kernels::MoeRouteParams& p) {
  const int64_t n = logits.dim(0), n_experts = logits.dim(1), k = p.top_k;
  check(layer >= 0, "model", "routing override: an MoE block whose prefix names no decoder layer");
  check(logits.dtype == DType::kF32 && ids.dim(0) == n && ids.dim(1) == k && weights.dim(0) == n &&
            weights.dim(1) == k,
        "model", "routing override: logits " + logits.shape_str() + ", ids " + ids.shape_str() + ", weights " +
                     weights.shape_str() + " do not fit top_k " + std::to_string(k));
  if (seen_.size() <= static_cast<size_t>(layer)) seen_.resize(static_cast<size_t>(layer) + 1, 0);
  const int64_t first = seen_[static_cast<size_t>(layer)];
  seen_[static_cast<size_t>(layer)] += n;
  scores_.resize(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < n; ++r) {
    const float* lr = static_cast<const float*>(logits.row_ptr(r));
    int32_t* ir = static_cast<int32_t*>(ids.row_ptr(r));
    if (!choose(layer, first + r, {lr, static_cast<size_t>(n_experts)}, {ir, static_cast<size_t>(k)})) continue;
    for (int64_t j = 0; j < k; ++j)
      check(ir[j] >= 0 && ir[j] < n_experts && std::find(ir, ir + j, ir[j]) == ir + j, "model",
            strfmt("routing override: layer %d token %lld: forced expert %d is out of [0, %lld) or repeated", layer,
                   (long long)(first + r), ir[j], (long long)n_experts));
    kernels::moe_score_row(lr, n_experts, p, scores_.data());
    kernels::moe_weigh_row(scores_.data(), ir, p, static_cast<float*>(weights.row_ptr(r)));
  }
}

}  // namespace bunsen::model
