// Host entry points of the fused quantized decode projections: linear_q_multi (q/k/v or any quantized
// matrices sharing x in one tensor-core GEMV launch) and linear_q_swiglu (gate/up with silu(gate) * up or
// gelu_tanh(gate) * up in the store). Not kernels (gemv_qmma.cu) and not validation (dispatch_quant.cpp).
// Invariants: the fused launches run the kernel linear_q runs for each part (same k split for the same
// shapes, f32 accumulation, batch invariant); whatever does not fit it falls back to linear_q per part, or
// for the gated op to the GEMV per matrix into f32 scratch + silu_mul / gelu_tanh_mul (gate and up never
// rounded).
#include "kernels/cuda/gemv_qmma.cuh"
#include "kernels/cuda/linear.cuh"

namespace bunsen::kernels::cuda {
namespace {

QMmaPart qmma_part(const DevQuantPart& p, void* out, int64_t out_stride) {
  return {quant_view(p.w), out, p.bias, out_stride};
}

// The launch skeleton shared by the parts (x, bits, group, dtypes); parts filled by the caller.
QMmaArgs qmma_base(DevRows x, const DevQuant& w0, DType out_dtype, DType bias_dtype) {
  QMmaArgs q;
  q.x = x.data;
  q.x_stride = x.stride;
  q.m = x.n_rows;
  q.k = x.n_cols;
  q.bits = w0.bits;
  q.group_size = w0.group_size;
  q.x_dtype = x.dtype;
  q.out_dtype = out_dtype;
  q.bias_dtype = bias_dtype;
  return q;
}

// The bias dtype every biased part shares; false when two differ.
bool common_bias_dtype(const DevQuantPart* parts, int n_parts, DType& dtype) {
  dtype = DType::kF32;
  bool have = false;
  for (int p = 0; p < n_parts; ++p) {
    if (parts[p].bias == nullptr) continue;
    if (have && parts[p].bias_dtype != dtype) return false;
    dtype = parts[p].bias_dtype;
    have = true;
  }
  return true;
}

bool same_quant(const DevQuant& a, const DevQuant& b) {
  return a.bits == b.bits && a.group_size == b.group_size && a.sb_dtype == b.sb_dtype && a.cols == b.cols;
}

std::string parts_desc(DevRows x, const DevQuantPart* parts, int n_parts) {
  std::string s = rows_desc("x", x);
  for (int p = 0; p < n_parts; ++p)
    s += strfmt(", w%d [%lld, %lld] %d-bit group %d", p, (long long)parts[p].w.rows, (long long)parts[p].w.cols,
                parts[p].w.bits, parts[p].w.group_size);
  return s;
}

// linear_q_multi's one launch over all parts (m within the GEMV's rows, shared quantization, output and
// bias dtypes, and the tensor-core kernels fit); false when the parts take linear_q each.
bool multi_args(DevRows x, const DevQuantPart* parts, int n_parts, QMmaArgs& q) {
  if (n_parts < 1 || n_parts > kQMmaMaxParts)
    throw Error("cuda", strfmt("linear_q_multi: %d parts (1..%d)", n_parts, kQMmaMaxParts));
  DType bias_dtype = DType::kF32;
  bool fused = x.n_rows <= kGemvMaxM && linear_q_path() == LinearQPath::kAuto &&
               common_bias_dtype(parts, n_parts, bias_dtype);
  for (int p = 0; p < n_parts && fused; ++p)
    fused = same_quant(parts[p].w, parts[0].w) && parts[p].out.dtype == parts[0].out.dtype && parts[p].w.rows > 0;
  if (!fused) return false;
  q = qmma_base(x, parts[0].w, parts[0].out.dtype, bias_dtype);
  for (int p = 0; p < n_parts; ++p) q.part[p] = qmma_part(parts[p], parts[p].out.data, parts[p].out.stride);
  q.n_parts = n_parts;
  return qmma_fits(q);
}

// linear_q_swiglu's gated launch over all of x's rows (checked: gate and up alike).
QMmaArgs swiglu_args(DevRows out, DevRows x, const DevQuantPart& gate, const DevQuantPart& up,
                     bool gelu_tanh) {
  if (!same_quant(gate.w, up.w) || gate.w.rows != up.w.rows ||
      (gate.bias != nullptr && up.bias != nullptr && gate.bias_dtype != up.bias_dtype))
    throw Error("cuda", "linear_q_swiglu: gate and up must share shape, bits, group size and dtypes: " +
                            parts_desc(x, &gate, 1) +
                            strfmt(", up [%lld, %lld] %d-bit group %d", (long long)up.w.rows,
                                   (long long)up.w.cols, up.w.bits, up.w.group_size));
  const DType bias_dtype = gate.bias != nullptr ? gate.bias_dtype : up.bias_dtype;
  QMmaArgs q = qmma_base(x, gate.w, out.dtype, bias_dtype);
  q.part[0] = qmma_part(gate, out.data, out.stride);
  q.part[1] = qmma_part(up, out.data, out.stride);  // unused by the gated store
  q.n_parts = 2;
  q.glu = true;
  q.gelu_tanh = gelu_tanh;
  return q;
}

// The launch q with its x from pre's prologue (gemv_qmma_norm); false, nothing launched, where it does not
// apply.
bool launch_norm(void* stream, const QMmaArgs& q, DevRows x, const DevAddNorm& pre, const char* op) {
  GemvNorm n;
  if (x.n_rows < 1 || x.n_rows > kGemvNormMaxM || linear_q_path() != LinearQPath::kAuto ||
      !gemv_norm_args(pre, x, n) || !gemv_qmma_norm(as_stream(stream), q, n))
    return false;
  check_launch(op, [&] { return rows_desc("x", x) + " (norm prologue)"; });
  return true;
}

}  // namespace

void linear_q_multi(void* stream, DevRows x, const DevQuantPart* parts, int n_parts) {
  QMmaArgs q;
  const bool one = multi_args(x, parts, n_parts, q);  // (checks the part count first)
  if (x.n_rows == 0) return;
  if (one) {
    gemv_qmma(as_stream(stream), q);
    check_launch("linear_q_multi", [&] { return parts_desc(x, parts, n_parts); });
    return;
  }
  for (int p = 0; p < n_parts; ++p)
    linear_q(stream, parts[p].out, x, parts[p].w, parts[p].bias, parts[p].bias_dtype);
}

bool linear_q_multi_norm(void* stream, DevRows x, const DevQuantPart* parts, int n_parts,
                         const DevAddNorm& pre) {
  QMmaArgs q;
  return x.n_rows >= 1 && multi_args(x, parts, n_parts, q) &&
         launch_norm(stream, q, x, pre, "linear_q_multi");
}

bool linear_q_swiglu_norm(void* stream, DevRows out, DevRows x, const DevQuantPart& gate,
                          const DevQuantPart& up, bool gelu_tanh, const DevAddNorm& pre) {
  if (x.n_rows < 1 || gate.w.rows == 0) return false;
  const QMmaArgs q = swiglu_args(out, x, gate, up, gelu_tanh);
  return gate.w.cols > 0 && qmma_fits(q) && launch_norm(stream, q, x, pre, "linear_q_swiglu");
}

void linear_q_swiglu(void* stream, DevRows out, DevRows x, const DevQuantPart& gate, const DevQuantPart& up,
                     bool gelu_tanh) {
  const int64_t m = x.n_rows, f = gate.w.rows;
  if (m == 0 || f == 0) return;
  cudaStream_t s = as_stream(stream);
  const QMmaArgs q = swiglu_args(out, x, gate, up, gelu_tanh);
  const int64_t x_elem = dtype_size(x.dtype), out_elem = dtype_size(out.dtype);
  QMmaArgs first = q;
  first.m = m < kGemvMaxM ? m : kGemvMaxM;
  if (linear_q_path() == LinearQPath::kAuto && gate.w.cols > 0 && qmma_fits(first)) {
    for (int64_t i0 = 0; i0 < m; i0 += kGemvMaxM) {  // every chunk has first's alignment
      QMmaArgs c = q;
      c.m = m - i0 < kGemvMaxM ? m - i0 : kGemvMaxM;
      c.x = static_cast<const char*>(x.data) + i0 * x.stride * x_elem;
      c.part[0].out = c.part[1].out = static_cast<char*>(out.data) + i0 * out.stride * out_elem;
      gemv_qmma(s, c);
    }
    check_launch("linear_q_swiglu", [&] { return rows_desc("out", out) + ", " + parts_desc(x, &gate, 1); });
    return;
  }
  const size_t bytes = align_up(static_cast<size_t>(m * f) * sizeof(float), 256);
  char* base = static_cast<char*>(scratch(stream, 2 * bytes, "linear_q_swiglu"));
  const DevRows g{base, DType::kF32, m, f, f}, u{base + bytes, DType::kF32, m, f, f};
  linear_q_gemv(s, g, x, gate.w, gate.bias, gate.bias_dtype);
  linear_q_gemv(s, u, x, up.w, up.bias, up.bias_dtype);
  gelu_tanh ? gelu_tanh_mul(stream, out, g, u) : silu_mul(stream, out, g, u);
}

}  // namespace bunsen::kernels::cuda
