// ops.h entry points of the fused row-wise norms (rms_norm_qkv, post_norm_residual). On the CPU each runs the
// unfused ops its ops.h comment names, in that order (those ops validate again and compute, so the results
// are bit-identical to the unfused sequence); on CUDA it checks dtypes, shapes, devices and aliasing, then
// makes one launch (cuda/rowwise_fused.cu). Not a kernel. Invariants: errors are Error("kernels", "<op>:
// ...") naming the tensors; no heap allocation per call in steady state (the CPU's ones vector only grows).
#include <vector>

#include "core/status.h"
#include "kernels/dispatch_util.h"
#include "kernels/ops.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/rowwise_fused_ops.h"
#endif

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::rows_overlap;

// An activation walked as rows: f32 (f32|bf16 on CUDA), contiguous last dim, collapsible leading dims, data.
void need_act_rows(const char* op, const char* name, const Tensor& t, bool gpu) {
  const bool dtype_ok = t.dtype == DType::kF32 || (gpu && t.dtype == DType::kBF16);
  if (!(dtype_ok && t.ndim >= 1 && rows_ok(t) && (t.data != nullptr || t.numel() == 0)))
    fail(op, desc(name, t) + (gpu ? " must be f32 or bf16" : " must be f32") +
                 " with a contiguous last dim and row-strided leading dims");
}

// A norm weight: empty (when allowed) or a contiguous float vector of d elements.
void need_norm_weight(const char* op, const char* name, const Tensor& w, int64_t d, bool may_be_empty) {
  if (w.empty() && may_be_empty) return;
  if (!(is_float(w.dtype) && w.ndim == 1 && w.shape[0] == d && (d <= 1 || w.strides[0] == 1) && !w.empty()))
    fail(op, desc(name, w) +
                 strfmt(" must be a contiguous f32, f16 or bf16 vector of %lld elements", (long long)d));
}

// The weight an empty CPU norm weight stands for: n ones (thread-local, only grows).
Tensor cpu_ones(int64_t n) {
  thread_local std::vector<float> ones;
  if (ones.size() < static_cast<size_t>(n)) ones.assign(static_cast<size_t>(n), 1.0f);
  return Tensor::view(ones.data(), DType::kF32, {n});
}

#ifdef BUNSEN_HAVE_CUDA
cuda::DevRows dev_rows(const Tensor& t) {
  if (t.empty()) return {};
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}

cuda::DevNormWeight dev_weight(const Tensor& w) {
  return {w.empty() ? nullptr : w.data, w.empty() ? DType::kF32 : w.dtype};
}

// The launch goes to the current device; a tensor of another device would be a wrong pointer there.
void need_current_device(const char* op, const Tensor& t) {
  const int dev = cuda::current_device();
  if (t.device.index != dev)
    fail(op, strfmt("tensors are on cuda:%d but the current CUDA device is cuda:%d", t.device.index, dev));
}
#endif

}  // namespace

void rms_norm_qkv(Context& ctx, const QkvNorm& a, float eps) {
  const char* op = "rms_norm_qkv";
  const bool gpu = detail::on_cuda(op, {&a.q, &a.k, &a.v, &a.q_w, &a.k_w, &a.v_w});
  const Tensor* xs[3] = {&a.q, &a.k, &a.v};
  const char* names[3] = {"q", "k", "v"};
  int64_t d = -1;
  DType dtype = DType::kF32;
  for (int i = 0; i < 3; ++i) {
    if (xs[i]->empty()) continue;
    need_act_rows(op, names[i], *xs[i], gpu);
    if (d < 0) {
      d = xs[i]->dim(-1);
      dtype = xs[i]->dtype;
    }
    if (!(xs[i]->dim(-1) == d && xs[i]->dtype == dtype))
      fail(op, desc(names[i], *xs[i]) + " must have the head_dim and dtype of the others: " + desc("q", a.q) +
                   ", " + desc("k", a.k) + ", " + desc("v", a.v));
  }
  if (d < 0) return;  // nothing to normalise
  need_norm_weight(op, "q_w", a.q_w, d, true);
  need_norm_weight(op, "k_w", a.k_w, d, true);
  need_norm_weight(op, "v_w", a.v_w, d, true);
  if (a.v_from_k)
    if (!(!a.k.empty() && !a.v.empty() && as_rows(a.k).n_rows == as_rows(a.v).n_rows))
      fail(op, "v_from_k needs k and v with the same rows: " + desc("k", a.k) + ", " + desc("v", a.v));
  if (!(!rows_overlap(a.q, a.k) && !rows_overlap(a.q, a.v) && !rows_overlap(a.k, a.v)))
    fail(op, desc("q", a.q) + ", " + desc("k", a.k) + " and " + desc("v", a.v) + " must not overlap");
  if (!gpu) {
    auto w_or_ones = [&](const Tensor& w) { return w.empty() ? cpu_ones(d) : w; };
    if (!a.v.empty()) rms_norm(ctx, a.v, a.v_from_k ? a.k : a.v, w_or_ones(a.v_w), eps);
    if (!a.k.empty()) rms_norm(ctx, a.k, a.k, w_or_ones(a.k_w), eps);
    if (!a.q.empty()) rms_norm(ctx, a.q, a.q, w_or_ones(a.q_w), eps);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  need_current_device(op, !a.q.empty() ? a.q : !a.k.empty() ? a.k : a.v);
  cuda::DevQkvNorm c;
  c.q = dev_rows(a.q);
  c.k = dev_rows(a.k);
  c.v = dev_rows(a.v);
  c.q_w = dev_weight(a.q_w);
  c.k_w = dev_weight(a.k_w);
  c.v_w = dev_weight(a.v_w);
  c.v_from_k = a.v_from_k;
  c.eps = eps;
  cuda::rms_norm_qkv(ctx.cuda_stream, c);
#endif
}

void post_norm_residual(Context& ctx, const PostNormResidual& a, float eps) {
  const char* op = "post_norm_residual";
  const bool gpu = detail::on_cuda(op, {&a.x, &a.y, &a.w_post, &a.out, &a.w_next});
  need_act_rows(op, "x", a.x, gpu);
  need_act_rows(op, "y", a.y, gpu);
  if (!same_shape(a.x, a.y))
    fail(op, desc("x", a.x) + " and " + desc("y", a.y) + " must have the same shape");
  const int64_t d = a.x.dim(-1);
  need_norm_weight(op, "w_post", a.w_post, d, false);
  if (!(a.out.empty() == a.w_next.empty()))
    fail(op, desc("out", a.out) + " and " + desc("w_next", a.w_next) + " must be given together");
  if (rows_overlap(a.x, a.y)) fail(op, desc("x", a.x) + " and " + desc("y", a.y) + " must not overlap");
  if (!a.out.empty()) {
    need_act_rows(op, "out", a.out, gpu);
    if (!same_shape(a.out, a.x))
      fail(op, desc("out", a.out) + " and " + desc("x", a.x) + " must have the same shape");
    need_norm_weight(op, "w_next", a.w_next, d, false);
    if (!(!rows_overlap(a.out, a.x) && !rows_overlap(a.out, a.y)))
      fail(op, desc("out", a.out) + " must not overlap x or y");
  }
  if (!gpu) {
    rms_norm(ctx, a.y, a.y, a.w_post, eps, a.w_offset);
    add_scaled(ctx, a.x, a.y);
    if (a.x_scale != 1.0f) scale(ctx, a.x, a.x_scale);
    if (!a.out.empty()) rms_norm(ctx, a.out, a.x, a.w_next, eps, a.w_offset);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  need_current_device(op, a.x);
  cuda::DevPostNormResidual c;
  c.x = dev_rows(a.x);
  c.y = dev_rows(a.y);
  c.out = dev_rows(a.out);
  c.w_post = dev_weight(a.w_post);
  c.w_next = dev_weight(a.w_next);
  c.x_scale = a.x_scale;
  c.w_offset = a.w_offset;
  c.eps = eps;
  cuda::post_norm_residual(ctx.cuda_stream, c);
#endif
}

}  // namespace bunsen::kernels
