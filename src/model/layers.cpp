// Weight-fetching helpers for arch/ files: float and MLX affine-quantized Linear/Embedding modules, and the
// fused-projection helper (project) the decoders share.
#include "model/layers.h"

#include <array>

#include "core/env.h"
#include "core/status.h"

namespace bunsen::model {
namespace {

[[noreturn]] void quant_fail(const std::string& prefix, const std::string& msg) {
  throw Error("weights", "quantized module '" + prefix + "': " + msg);
}

std::string shape_of(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

// The module is stored quantized: it has scales, or its weight is u32 (then scales must exist too).
bool stored_quantized(const WeightStore& ws, const std::string& prefix) {
  const std::string w = prefix + ".weight";
  return ws.has(prefix + ".scales") || (ws.has(w) && ws.get(w).dtype == DType::kU32);
}

void check_group_tensor(const WeightStore& ws, const std::string& prefix, const char* what, int64_t out,
                        int64_t groups) {
  const std::string name = prefix + "." + what;
  if (!ws.has(name)) quant_fail(prefix, "missing tensor '" + name + "'");
  const Tensor t = ws.get(name);
  if (!is_float(t.dtype))
    quant_fail(prefix, name + " has dtype " + dtype_name(t.dtype) + ", expected f32, f16 or bf16");
  if (t.ndim != 2 || t.shape[0] != out || t.shape[1] != groups)
    quant_fail(prefix, name + " has shape " + shape_of(t) +
                           strfmt(", expected [%lld, %lld]", (long long)out, (long long)groups));
}

// A float module whose checkpoint stores it quantized (or the reverse) is a config/checkpoint mismatch.
Tensor float_module_weight(const WeightStore& ws, const std::string& prefix, int64_t out, int64_t in) {
  if (stored_quantized(ws, prefix))
    throw Error("weights", "module '" + prefix +
                               "' is stored quantized (u32 weight / scales) but config.json " +
                               "does not quantize it");
  return float_weight(ws, prefix + ".weight", {out, in});
}

}  // namespace

size_t Linear::bytes() const {
  size_t total = b.empty() ? 0 : b.nbytes();
  if (quantized()) return total + q.packed.nbytes() + q.scales.nbytes() + q.biases.nbytes();
  return total + w.nbytes();
}

size_t Embedding::row_bytes() const {
  if (!quantized()) return static_cast<size_t>(table.dim(1)) * dtype_size(table.dtype);
  return static_cast<size_t>(q.packed.dim(1)) * 4 +
         static_cast<size_t>(q.scales.dim(1)) * 2 * dtype_size(q.scales.dtype);
}

Tensor float_weight(const WeightStore& ws, const std::string& name, std::initializer_list<int64_t> shape) {
  Tensor t = ws.get(name, shape);
  if (!is_float(t.dtype))
    throw Error("weights", "tensor '" + name + "' in " + ws.source_of(name) + " has dtype " +
                               dtype_name(t.dtype) + ", expected f32, f16 or bf16");
  return t;
}

Linear load_linear(const WeightStore& ws, const std::string& prefix, int64_t out, int64_t in, bool bias) {
  Linear l;
  l.w = float_weight(ws, prefix + ".weight", {out, in});
  if (bias) l.b = float_weight(ws, prefix + ".bias", {out});
  return l;
}

kernels::QuantWeight load_quant_weight(const WeightStore& ws, const std::string& prefix, int64_t out,
                                       int64_t in, QuantSpec spec) {
  if (!is_supported(spec))
    quant_fail(prefix, strfmt("unsupported bits=%d group_size=%d", spec.bits, spec.group_size));
  if (in % spec.group_size != 0)
    quant_fail(prefix, strfmt("group_size %d does not divide the input dimension %lld", spec.group_size,
                              (long long)in));
  const std::string wname = prefix + ".weight";
  if (!ws.has(wname)) quant_fail(prefix, "missing tensor '" + wname + "'");
  const Tensor w = ws.get(wname);
  const int64_t words = in * spec.bits / 32, groups = in / spec.group_size;
  if (w.dtype != DType::kU32)
    quant_fail(prefix, wname + " has dtype " + dtype_name(w.dtype) + ", expected u32");
  if (w.ndim != 2 || w.shape[0] != out || w.shape[1] != words)
    quant_fail(prefix, wname + " has shape " + shape_of(w) +
                           strfmt(", expected [%lld, %lld] (%lld inputs at %d bits)", (long long)out,
                                  (long long)words, (long long)in, spec.bits));
  check_group_tensor(ws, prefix, "scales", out, groups);
  check_group_tensor(ws, prefix, "biases", out, groups);
  const Tensor s = ws.get(prefix + ".scales"), b = ws.get(prefix + ".biases");
  if (s.dtype != b.dtype)
    quant_fail(prefix, std::string("scales (") + dtype_name(s.dtype) + ") and biases (" +
                           dtype_name(b.dtype) + ") have different dtypes");
  return kernels::QuantWeight{w, s, b, spec.bits, spec.group_size};
}

Linear load_linear(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix, int64_t out,
                   int64_t in, bool bias) {
  const std::optional<QuantSpec> spec = cfg.quant_spec(prefix);
  Linear l;
  if (spec && stored_quantized(ws, prefix))
    l.q = load_quant_weight(ws, prefix, out, in, *spec);
  else
    l.w = float_module_weight(ws, prefix, out, in);
  if (bias) l.b = float_weight(ws, prefix + ".bias", {out});
  return l;
}

Embedding load_embedding(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix,
                         int64_t vocab, int64_t d) {
  const std::optional<QuantSpec> spec = cfg.quant_spec(prefix);
  Embedding e;
  if (spec && stored_quantized(ws, prefix))
    e.q = load_quant_weight(ws, prefix, vocab, d, *spec);
  else
    e.table = float_module_weight(ws, prefix, vocab, d);
  return e;
}

Linear slice_rows(const Linear& l, int64_t begin, int64_t end) {
  Linear s;
  if (l.quantized())
    s.q = l.q.slice_rows(begin, end);
  else
    s.w = l.w.slice(0, begin, end);
  if (!l.b.empty()) s.b = l.b.slice(0, begin, end);
  return s;
}

size_t workspace_bytes(std::span<const WorkspaceSpec> specs) {
  size_t total = 0;
  for (const WorkspaceSpec& s : specs) {
    size_t bytes = static_cast<size_t>(s.rows * s.cols) * dtype_size(s.dtype);
    total += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  return total;
}

void project(kernels::Context& ctx, Tensor x, std::initializer_list<std::pair<const Linear*, Tensor>> parts,
             const kernels::AddRmsNorm* pre) {
  constexpr size_t kMax = 4;
  bool all_float = parts.size() >= 1 && parts.size() <= kMax, all_quant = all_float;
  for (const auto& [l, out] : parts) {
    all_float = all_float && !l->quantized();
    all_quant = all_quant && l->quantized();
  }
  if (all_float) {
    std::array<kernels::LinearPart, kMax> lp;
    size_t n = 0;
    for (const auto& [l, out] : parts) lp[n++] = {out, l->w, l->b};
    return kernels::linear_multi(ctx, x, std::span<const kernels::LinearPart>(lp.data(), n), pre);
  }
  if (all_quant) {
    std::array<kernels::QuantLinearPart, kMax> qp;
    size_t n = 0;
    for (const auto& [l, out] : parts) qp[n++] = {out, l->q, l->b};
    return kernels::linear_q_multi(ctx, x, std::span<const kernels::QuantLinearPart>(qp.data(), n), pre);
  }
  if (pre != nullptr) kernels::add_rms_norm(ctx, x, *pre);
  for (const auto& [l, out] : parts) (*l)(ctx, out, x);
}

bool fusable_q_swiglu(const Linear& gate, const Linear& up) {
  if (!gate.quantized() || !up.quantized()) return false;
  const kernels::QuantWeight &g = gate.q, &u = up.q;
  return (g.bits == 4 || g.bits == 8) && g.bits == u.bits && g.group_size == u.group_size &&
         g.rows() == u.rows() && g.cols() == u.cols() && g.scales.dtype == u.scales.dtype &&
         (gate.b.empty() || up.b.empty() || gate.b.dtype == up.b.dtype);
}

namespace {
bool fused_glu_enabled() {
  static const bool on = env_flag("BUNSEN_FUSED_GLU", true);
  return on;
}

// Where the final norm writes: bf16_buf's first rows for a quantized head on CUDA (final_norm), else xo.
Tensor head_input_buffer(const Linear& head, Tensor xo, Tensor bf16_buf) {
  const int64_t n_out = xo.dim(0);
  static const bool f32_head = env_flag("BUNSEN_HEAD_F32", false);  // 1: keep f32 x (A/B runs)
  if (!f32_head && head.quantized() && xo.device.is_cuda() && bf16_buf.dtype == DType::kBF16 &&
      bf16_buf.dim(0) >= n_out && bf16_buf.dim(1) == xo.dim(1))
    return bf16_buf.slice(0, 0, n_out);
  return xo;
}
}  // namespace

Tensor final_norm(kernels::Context& ctx, const Linear& head, Tensor xo, Tensor bf16_buf, Tensor w, float eps,
                  float w_offset) {
  const Tensor ho = head_input_buffer(head, xo, bf16_buf);
  kernels::rms_norm(ctx, ho, xo, w, eps, w_offset);
  return ho;
}

Tensor head_input(kernels::Context& ctx, const Linear& head, const StepBatch& b, Tensor x, Tensor y,
                  float y_scale, Tensor xo, Tensor bf16_buf, Tensor w, float eps, float w_offset) {
  static const bool fused = env_flag("BUNSEN_FUSED_TAIL", true);
  const int64_t n = b.n_tokens();
  if (fused && x.device.is_cuda() && b.n_single == n && b.n_out() == n && x.dim(0) == n) {
    const Tensor ho = head_input_buffer(head, xo, bf16_buf);
    if (y.empty())
      kernels::rms_norm(ctx, ho, x, w, eps, w_offset);
    else
      kernels::add_rms_norm(ctx, ho, x, y, w, eps, y_scale, w_offset);
    return ho;
  }
  if (!y.empty()) kernels::add_scaled(ctx, x, y, y_scale);
  kernels::gather_rows(ctx, xo, x, b.logit_rows);
  return final_norm(ctx, head, xo, bf16_buf, w, eps, w_offset);
}

void gated_mlp(kernels::Context& ctx, const Linear& gate, const Linear& up, const Linear& down, Tensor h,
               Tensor out, Tensor act, Tensor gate_buf, Tensor up_buf, kernels::GluAct kind,
               const kernels::AddRmsNorm* pre) {
  const bool decode = h.device.is_cuda() && h.dim(0) <= kernels::kFusedDecodeMaxTokens && fused_glu_enabled();
  if (decode && !gate.quantized() && !up.quantized() && gate.w.dtype == up.w.dtype) {
    kernels::linear_swiglu(ctx, act, h, gate.w, up.w, gate.b, up.b, kind, pre);
    down(ctx, out, act);
    return;
  }
  if (decode && fusable_q_swiglu(gate, up)) {
    kernels::linear_q_swiglu(ctx, act, h, gate.q, up.q, gate.b, up.b, kind, pre);
  } else {
    project(ctx, h, {{&gate, gate_buf}, {&up, up_buf}}, pre);
    kind == kernels::GluAct::kGeluTanh ? kernels::gelu_tanh_mul(ctx, act, gate_buf, up_buf)
                                       : kernels::silu_mul(ctx, act, gate_buf, up_buf);
  }
  down(ctx, out, act);
}

}  // namespace bunsen::model
