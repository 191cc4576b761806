// Host entry points of the fused decode projections: linear_multi (q/k/v or any matrices sharing x in one
// GEMV launch), linear_qkv_rope_kv (q/k/v with the rope and cache write in the store) and linear_swiglu
// (gate/up GEMV with silu(gate) * up or gelu_tanh(gate) * up in the store).
// Not kernels (gemv.cu, gemv_fused.cu) and not validation (dispatch_fused.cpp). Invariants: linear_multi runs
// the GEMV kernel linear() runs (f32 accumulation, batch invariant) and falls back to one linear() per part
// whenever the parts cannot share a launch or m is GEMM-sized; linear_swiglu never rounds gate or up
// before the gating.
#include "kernels/cuda/linear.cuh"

namespace bunsen::kernels::cuda {
namespace {

std::string parts_desc(DevRows x, const DevLinearPart* parts, int n_parts) {
  std::string s = rows_desc("x", x);
  for (int p = 0; p < n_parts; ++p) s += ", " + rows_desc("w", parts[p].w);
  return s;
}

GemvMultiArgs multi_args(DevRows x, DType w_dtype, DType out_dtype, DType bias_dtype) {
  GemvMultiArgs a;
  a.x = x.data;
  a.x_stride = x.stride;
  a.m = x.n_rows;
  a.k = x.n_cols;
  a.w_dtype = w_dtype;
  a.x_dtype = x.dtype;
  a.out_dtype = out_dtype;
  a.bias_dtype = bias_dtype;
  return a;
}

GemvPart gemv_part(const DevLinearPart& p) {
  return {p.w.data, p.out.data, p.bias, p.w.n_rows, p.w.stride, p.out.stride};
}

// Whether linear_multi's parts take one GEMV launch (one weight and output dtype, one bias dtype, m within
// the GEMV's rows or the path forced); the launch's arguments in a.
bool multi_launch(DevRows x, const DevLinearPart* parts, int n_parts, GemvMultiArgs& a) {
  if (n_parts < 1 || n_parts > kMaxLinearParts)
    throw Error("cuda", strfmt("linear_multi: %d parts (1..%d)", n_parts, kMaxLinearParts));
  const LinearPath path = linear_path();
  bool fused =
      x.n_cols > 0 && path != LinearPath::kGemm && (path == LinearPath::kGemv || x.n_rows <= kGemvMaxM);
  DType bias_dtype = DType::kF32;
  bool have_bias_dtype = false;
  for (int p = 0; p < n_parts; ++p) {
    fused = fused && parts[p].w.dtype == parts[0].w.dtype && parts[p].out.dtype == parts[0].out.dtype;
    if (parts[p].bias == nullptr) continue;
    fused = fused && (!have_bias_dtype || parts[p].bias_dtype == bias_dtype);
    bias_dtype = parts[p].bias_dtype;
    have_bias_dtype = true;
  }
  if (!fused) return false;
  a = multi_args(x, parts[0].w.dtype, parts[0].out.dtype, bias_dtype);
  for (int p = 0; p < n_parts; ++p) a.part[p] = gemv_part(parts[p]);
  a.n_parts = n_parts;
  return true;
}

}  // namespace

bool gemv_norm_args(const DevAddNorm& pre, DevRows x, GemvNorm& n) {
  const bool ok = pre.x_in.dtype == DType::kF32 && pre.x_out.dtype == DType::kF32 &&
                  (pre.y.dtype == DType::kF32 || pre.y.dtype == DType::kBF16) &&
                  (pre.w_dtype == DType::kF32 || pre.w_dtype == DType::kBF16) &&
                  pre.x_in.stride == pre.x_out.stride && pre.x_in.n_rows == x.n_rows &&
                  pre.x_out.n_rows == x.n_rows && pre.y.n_rows == x.n_rows && pre.x_in.n_cols == x.n_cols &&
                  pre.x_out.n_cols == x.n_cols && pre.y.n_cols == x.n_cols && x.dtype == DType::kBF16 &&
                  pre.w != nullptr &&
                  (pre.y_w == nullptr ||
                   ((pre.y_w_dtype == DType::kF32 || pre.y_w_dtype == DType::kBF16) && pre.y_scale == 1.0f));
  if (!ok) return false;
  n.x_in = static_cast<const float*>(pre.x_in.data);
  n.x_out = static_cast<float*>(pre.x_out.data);
  n.y = pre.y.data;
  n.w = pre.w;
  n.x_stride = pre.x_in.stride;
  n.y_stride = pre.y.stride;
  n.y_bf16 = pre.y.dtype == DType::kBF16;
  n.w_bf16 = pre.w_dtype == DType::kBF16;
  n.eps = pre.eps;
  n.y_scale = pre.y_scale;
  n.w_offset = pre.w_offset;
  n.y_w = pre.y_w;
  n.y_w_bf16 = pre.y_w_dtype == DType::kBF16;
  n.x_scale = pre.x_scale;
  return true;
}

void linear_multi(void* stream, DevRows x, const DevLinearPart* parts, int n_parts) {
  GemvMultiArgs a;
  if (!multi_launch(x, parts, n_parts, a)) {
    for (int p = 0; p < n_parts; ++p)
      linear(stream, parts[p].out, x, parts[p].w, parts[p].bias, parts[p].bias_dtype);
    return;
  }
  gemv_multi(as_stream(stream), a);
  check_launch("linear_multi", [&] { return parts_desc(x, parts, n_parts); });
}

bool linear_multi_norm(void* stream, DevRows x, const DevLinearPart* parts, int n_parts,
                       const DevAddNorm& pre) {
  GemvMultiArgs a;
  GemvNorm n;
  if (x.n_rows < 1 || x.n_rows > kGemvMaxM || !multi_launch(x, parts, n_parts, a) ||
      !gemv_norm_args(pre, x, n))
    return false;
  if (!gemv_multi_norm(as_stream(stream), a, n)) return false;
  check_launch("linear_multi", [&] { return parts_desc(x, parts, n_parts); });
  return true;
}

bool linear_qkv_rope_kv(void* stream, DevRows x, const DevLinearPart* parts, const DevRopeKv& r,
                        const DevAddNorm* pre) {
  if (x.n_rows < 1 || x.n_rows > kGemvMaxM || x.n_cols <= 0 || linear_path() == LinearPath::kGemm) return false;
  GemvNorm n;
  if (pre != nullptr && !gemv_norm_args(*pre, x, n)) return false;
  for (int p = 0; p < 3; ++p) {
    const DevLinearPart& q = parts[p];
    if (q.w.dtype != DType::kBF16 || q.out.dtype != DType::kBF16 || q.w.n_cols != x.n_cols ||
        q.out.n_rows != x.n_rows || q.out.n_cols != q.w.n_rows ||
        (q.bias != nullptr && parts[0].bias != nullptr && q.bias_dtype != parts[0].bias_dtype))
      return false;
  }
  GemvMultiArgs a = multi_args(x, DType::kBF16, DType::kBF16,
                               parts[0].bias ? parts[0].bias_dtype : parts[1].bias ? parts[1].bias_dtype : parts[2].bias_dtype);
  for (int p = 0; p < 3; ++p) a.part[p] = gemv_part(parts[p]);
  a.n_parts = 3;
  if (!gemv_rope_kv(as_stream(stream), a, r, pre != nullptr ? &n : nullptr)) return false;
  check_launch("linear_qkv_rope_kv", [&] { return parts_desc(x, parts, 3); });
  return true;
}

namespace {

// linear_swiglu's launch arguments (shapes and dtypes checked).
GemvMultiArgs swiglu_args(DevRows out, DevRows x, const DevLinearPart& gate, const DevLinearPart& up,
                          bool gelu_tanh) {
  if (gate.w.dtype != up.w.dtype || gate.w.n_rows != up.w.n_rows ||
      (gate.bias != nullptr && up.bias != nullptr && gate.bias_dtype != up.bias_dtype))
    throw Error("cuda", "linear_swiglu: gate and up must share shape and dtypes: " + rows_desc("gate", gate.w) +
                            ", " + rows_desc("up", up.w));
  GemvMultiArgs a = multi_args(x, gate.w.dtype, out.dtype, gate.bias != nullptr ? gate.bias_dtype : up.bias_dtype);
  a.part[0] = gemv_part(gate);
  a.part[0].out = out.data;
  a.part[0].out_stride = out.stride;
  a.part[1] = gemv_part(up);
  a.part[1].out = out.data;  // unused by the gated store; keeps the per-chunk offsets in range
  a.part[1].out_stride = out.stride;
  a.n_parts = 2;
  a.glu = true;
  a.gelu_tanh = gelu_tanh;
  return a;
}

std::string swiglu_desc(DevRows out, DevRows x, const DevLinearPart& gate) {
  return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("gate", gate.w);
}

}  // namespace

void linear_swiglu(void* stream, DevRows out, DevRows x, const DevLinearPart& gate, const DevLinearPart& up,
                   bool gelu_tanh) {
  if (x.n_rows == 0 || gate.w.n_rows == 0) return;
  gemv_multi(as_stream(stream), swiglu_args(out, x, gate, up, gelu_tanh));
  check_launch("linear_swiglu", [&] { return swiglu_desc(out, x, gate); });
}

bool linear_swiglu_norm(void* stream, DevRows out, DevRows x, const DevLinearPart& gate,
                        const DevLinearPart& up, bool gelu_tanh, const DevAddNorm& pre) {
  GemvNorm n;
  if (x.n_rows < 1 || x.n_rows > kGemvMaxM || gate.w.n_rows == 0 || linear_path() == LinearPath::kGemm ||
      !gemv_norm_args(pre, x, n))
    return false;
  if (!gemv_multi_norm(as_stream(stream), swiglu_args(out, x, gate, up, gelu_tanh), n)) return false;
  check_launch("linear_swiglu", [&] { return swiglu_desc(out, x, gate); });
  return true;
}

}  // namespace bunsen::kernels::cuda
