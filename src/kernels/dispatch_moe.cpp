// ops.h entry points of the MoE ops (moe_route, moe_experts): validate shapes, dtypes, devices, the expert
// address tables and (on the CPU) the ids, then route to cpu:: (ref:: with BUNSEN_KERNELS=ref) or to
// cuda/moe_ops.h. Not a kernel. Invariants: errors are Error("kernels", "<op>: ...") naming the tensors;
// on CUDA, ids, weights and address tables are device memory and only their dtypes and shapes are checked.
#include <initializer_list>
#include <string>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/dispatch_util.h"
#include "kernels/moe_row.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/moe_ops.h"
#endif

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::pool_of;
using detail::use_ref;

// True when the (non-empty) tensors are on CUDA (then all on the current device), false when all on the CPU.
bool on_cuda(const char* op, std::initializer_list<const Tensor*> ts) {
  bool cuda = false, cpu = false;
  for (const Tensor* t : ts)
    if (!t->empty()) (t->device.is_cuda() ? cuda : cpu) = true;
  if (cuda && cpu) fail(op, "tensors are on different devices (cpu and cuda)");
  if (!cuda) return false;
#ifdef BUNSEN_HAVE_CUDA
  const int dev = cuda::current_device();
  for (const Tensor* t : ts)
    if (!(t->empty() || t->device.index == dev))
      fail(op, desc("a tensor", *t) + " is on " + t->device.str() +
                   strfmt(", not the current device cuda:%d", dev));
  return true;
#else
  fail(op, "CUDA backend not built");
#endif
}

// An activation matrix [n, cols]: f32 on the CPU, f32|bf16 on CUDA, contiguous last dim.
void need_act(const char* op, const char* name, const Tensor& t, int64_t n, int64_t cols, bool gpu) {
  const bool dt = t.dtype == DType::kF32 || (gpu && t.dtype == DType::kBF16);
  if (!dt) fail(op, desc(name, t) + (gpu ? " must be f32 or bf16" : " must be f32"));
  if (!(t.ndim == 2 && rows_ok(t) && (t.data != nullptr || t.numel() == 0)))
    fail(op, desc(name, t) + " must be 2-D with a contiguous last dim");
  if (!((n < 0 || t.shape[0] == n) && t.shape[1] == cols))
    fail(op, desc(name, t) +
                 strfmt(" must be [%lld, %lld]", (long long)(n < 0 ? t.shape[0] : n), (long long)cols));
}

// A contiguous [n, k] tensor of dtype dt.
void need_pairs(const char* op, const char* name, const Tensor& t, DType dt, int64_t n, int64_t k) {
  if (!(t.dtype == dt && t.ndim == 2 && t.shape[0] == n && t.shape[1] == k && t.is_contiguous() &&
        (t.data != nullptr || t.numel() == 0)))
    fail(op, desc(name, t) +
                 strfmt(" must be a contiguous %s [%lld, %lld]", dtype_name(dt), (long long)n, (long long)k));
}

// Table `table` ("ptrs", "scale_ptrs", "bias_ptrs") of the expert weights `name`; the two are joined only for
// a failure's message.
void need_table(const char* op, const char* name, const char* table, const Tensor& t, int64_t n_experts,
                bool gpu) {
  if (!(t.dtype == DType::kI64 && t.ndim == 1 && t.shape[0] == n_experts &&
        (n_experts <= 1 || t.strides[0] == 1) && t.data != nullptr))
    fail(op, desc((std::string(name) + "." + table).c_str(), t) +
                 strfmt(" must be a contiguous i64 address table of %lld experts", (long long)n_experts));
  if (gpu) return;
  for (int64_t e = 0; e < n_experts; ++e)
    if (t.ptr<int64_t>()[e] == 0)
      fail(op, strfmt("%s.%s: expert %lld has a null address", name, table, (long long)e));
}

void need_expert_weights(const char* op, const char* name, const ExpertWeights& w, int64_t rows, int64_t cols,
                         int64_t n_experts, bool gpu) {
  if (!(w.rows == rows && w.cols == cols))
    fail(op, strfmt("%s is [%lld, %lld] per expert, expected [%lld, %lld]", name, (long long)w.rows,
                    (long long)w.cols, (long long)rows, (long long)cols));
  if (!is_float(w.dtype))
    fail(op, strfmt("%s: dtype %s must be f32, f16 or bf16", name, dtype_name(w.dtype)));
  need_table(op, name, "ptrs", w.ptrs, n_experts, gpu);
  if (!w.quantized()) return;
  const bool bits_ok = w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8;
  const bool group_ok = w.group_size == 32 || w.group_size == 64 || w.group_size == 128;
  if (!(bits_ok && group_ok && cols % w.group_size == 0))
    fail(op, strfmt("%s: unsupported quantization bits=%d group_size=%d for %lld columns", name, w.bits,
                    w.group_size, (long long)cols));
  need_table(op, name, "scale_ptrs", w.scale_ptrs, n_experts, gpu);
  need_table(op, name, "bias_ptrs", w.bias_ptrs, n_experts, gpu);
}

#ifdef BUNSEN_HAVE_CUDA
cuda::DevRows dev_rows(const Tensor& t) {
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}

cuda::DevExpertWeights dev_experts(const ExpertWeights& w) {
  cuda::DevExpertWeights d;
  d.ptrs = w.ptrs.ptr<int64_t>();
  d.scale_ptrs = w.quantized() ? w.scale_ptrs.ptr<int64_t>() : nullptr;
  d.bias_ptrs = w.quantized() ? w.bias_ptrs.ptr<int64_t>() : nullptr;
  d.dtype = w.dtype;
  d.rows = w.rows;
  d.cols = w.cols;
  d.bits = w.bits;
  d.group_size = w.group_size;
  return d;
}
#endif

}  // namespace

void moe_route(Context& ctx, Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p) {
  const char* op = "moe_route";
  const bool gpu = on_cuda(op, {&ids, &weights, &logits, &p.expert_scale});
  if (logits.ndim != 2) fail(op, desc("logits", logits) + " must be [n_tokens, n_experts]");
  const int64_t n = logits.shape[0], n_experts = logits.shape[1];
  need_act(op, "logits", logits, n, n_experts, gpu);
  if (!(n_experts >= 1 && n_experts <= kMoeMaxExperts && p.top_k >= 1 && p.top_k <= n_experts &&
        p.top_k <= kMoeMaxTopK))
    fail(op, strfmt("top_k %d must be in [1, n_experts %lld] (limits: %lld experts, top_k %lld)", p.top_k,
                    (long long)n_experts, (long long)kMoeMaxExperts, (long long)kMoeMaxTopK));
  need_pairs(op, "ids", ids, DType::kI32, n, p.top_k);
  need_pairs(op, "weights", weights, DType::kF32, n, p.top_k);
  const Tensor& es = p.expert_scale;
  if (!(es.empty() || (is_float(es.dtype) && es.ndim == 1 && es.shape[0] == n_experts && es.is_contiguous())))
    fail(op, desc("expert_scale", es) +
                 strfmt(" must be a contiguous float vector of %lld", (long long)n_experts));
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    cuda::DevMoeRoute a;
    a.logits = dev_rows(logits);
    a.ids = ids.ptr<int32_t>();
    a.weights = weights.ptr<float>();
    a.top_k = p.top_k;
    a.sigmoid = p.scoring == MoeScoring::kSigmoid;
    a.norm_topk = p.norm_topk;
    a.scale = p.scale;
    a.expert_scale = es.empty() ? nullptr : es.data;
    a.expert_scale_dtype = es.dtype;
    return cuda::moe_route(ctx.cuda_stream, a);
  }
#endif
  use_ref() ? ref::moe_route(ids, weights, logits, p) : cpu::moe_route(pool_of(ctx), ids, weights, logits, p);
}

void moe_experts(Context& ctx, Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& e) {
  const char* op = "moe_experts";
  const bool gpu = on_cuda(op, {&out, &x, &ids, &weights, &e.gate.ptrs, &e.up.ptrs, &e.down.ptrs,
                                &e.gate.scale_ptrs, &e.gate.bias_ptrs, &e.up.scale_ptrs, &e.up.bias_ptrs,
                                &e.down.scale_ptrs, &e.down.bias_ptrs});
  if (!(x.ndim == 2 && ids.ndim == 2)) fail(op, desc("x", x) + " and " + desc("ids", ids) + " must be 2-D");
  const int64_t n = x.shape[0], d = x.shape[1], k = ids.shape[1], f = e.gate.rows, n_experts = e.gate.n_experts();
  need_act(op, "x", x, n, d, gpu);
  need_act(op, "out", out, n, d, gpu);
  if (!(out.data != x.data || n * d == 0)) fail(op, desc("out", out) + " must not alias x");
  if (!(n_experts >= 1 && n_experts <= kMoeMaxExperts && k >= 1 && k <= kMoeMaxTopK))
    fail(op, strfmt("%lld experts and top_k %lld must be in [1, %lld] and [1, %lld]", (long long)n_experts,
                    (long long)k, (long long)kMoeMaxExperts, (long long)kMoeMaxTopK));
  need_pairs(op, "ids", ids, DType::kI32, n, k);
  need_pairs(op, "weights", weights, DType::kF32, n, k);
  need_expert_weights(op, "gate", e.gate, f, d, n_experts, gpu);
  need_expert_weights(op, "up", e.up, f, d, n_experts, gpu);
  need_expert_weights(op, "down", e.down, d, f, n_experts, gpu);
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    cuda::DevMoeExperts a;
    a.out = dev_rows(out);
    a.x = dev_rows(x);
    a.ids = ids.ptr<int32_t>();
    a.weights = weights.ptr<float>();
    a.top_k = static_cast<int>(k);
    a.n_experts = n_experts;
    a.gate = dev_experts(e.gate);
    a.up = dev_experts(e.up);
    a.down = dev_experts(e.down);
    a.gelu_tanh = e.act == MoeActivation::kGeluTanh;
    return cuda::moe_experts(ctx.cuda_stream, a);
  }
#endif
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n * k; ++i)
    if (!(id[i] >= 0 && id[i] < n_experts))
      fail(op, strfmt("id %d at [%lld, %lld] is outside the %lld experts", id[i], (long long)(i / k),
                      (long long)(i % k), (long long)n_experts));
  use_ref() ? ref::moe_experts(out, x, ids, weights, e) : cpu::moe_experts(pool_of(ctx), out, x, ids, weights, e);
}

}  // namespace bunsen::kernels
