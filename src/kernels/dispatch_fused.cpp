// ops.h entry points of the fused decode ops (linear_multi, linear_swiglu with silu or gelu_tanh gating,
// rope_kv_write, linear_qkv_rope_kv). On the CPU each is the unfused op sequence it replaces (those ops
// validate and compute, so results are bit-identical); on CUDA it checks dtypes, shapes and devices, then
// launches the fused kernels (cuda/linear_fused.cu, cuda/rope_kv.cu), or runs the unfused ops where a fused
// kernel does not apply. Not a kernel.
// Invariants: errors are Error("kernels", "<op>: ...") naming the tensors; CUDA index tensors are checked
// for dtype and shape only (their contents live on the device, as in dispatch.cpp).
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "kernels/device.h"
#include "kernels/dispatch_cuda.h"
#include "kernels/dispatch_util.h"
#include "kernels/ops.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::rows_overlap;

#ifdef BUNSEN_HAVE_CUDA
static_assert(kFusedDecodeMaxTokens == cuda::kGemvMaxM, "the fused decode limit is the GEMV's row limit");
#endif

// True when any (non-empty) tensor is on CUDA; then all must be on the current CUDA device.
bool on_cuda(const char* op, std::initializer_list<const Tensor*> ts) {
  bool cuda = false;
  for (const Tensor* t : ts) cuda = cuda || (!t->empty() && t->device.is_cuda());
  if (!cuda) return false;
#ifdef BUNSEN_HAVE_CUDA
  const int dev = cuda::current_device();
  for (const Tensor* t : ts)
    if (!t->empty() && (!t->device.is_cuda() || t->device.index != dev))
      fail(op, desc("a tensor", *t) + " is on " + t->device.str() +
                   strfmt(", not on the current CUDA device cuda:%d with the others", dev));
  return true;
#else
  fail(op, "CUDA backend not built");
#endif
}

bool is_act(const Tensor& t) { return t.dtype == DType::kF32 || t.dtype == DType::kBF16; }

// A CUDA activation walked as rows: f32|bf16, contiguous last dim, collapsible leading dims, data.
void need_act_rows(const char* op, const char* name, const Tensor& t) {
  if (!(is_act(t) && t.ndim >= 1 && rows_ok(t) && (t.data != nullptr || t.numel() == 0)))
    fail(op, desc(name, t) +
                 " must be an f32 or bf16 tensor with a contiguous last dim and row-strided leading dims");
}

void need_weight(const char* op, const char* name, const Tensor& w) {
  if (!(is_float(w.dtype) && w.ndim == 2 && rows_ok(w) && (w.data != nullptr || w.numel() == 0)))
    fail(op, desc(name, w) + " must be a 2-D f32, f16 or bf16 tensor with a contiguous last dim");
}

void need_bias(const char* op, const char* name, const Tensor& b, int64_t n) {
  if (b.empty()) return;
  if (!(is_float(b.dtype) && b.ndim == 1 && b.shape[0] == n && (n <= 1 || b.strides[0] == 1)))
    fail(op, desc(name, b) + strfmt(" must be a contiguous float vector of %lld elements", (long long)n));
}

// out [m, n] = x [m, k] · w [n, k]ᵀ shapes (CUDA side of linear's checks).
void need_linear_shapes(const char* op, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  need_act_rows(op, "x", x);
  need_act_rows(op, "out", out);
  need_weight(op, "w", w);
  if (x.dim(-1) != w.shape[1]) fail(op, desc("x", x) + " and " + desc("w", w) + " disagree on k");
  if (out.dim(-1) != w.shape[0]) fail(op, desc("out", out) + " and " + desc("w", w) + " disagree on n");
  if (!(as_rows(out).n_rows == as_rows(x).n_rows))
    fail(op, desc("out", out) + " and " + desc("x", x) + " disagree on m");
  need_bias(op, "bias", bias, w.shape[0]);
}

// [n_tokens, heads, head_dim], f32|bf16, contiguous last dim.
void need_heads(const char* op, const char* name, const Tensor& t) {
  if (!(is_act(t) && t.ndim == 3 && (t.shape[2] <= 1 || t.strides[2] == 1) &&
        (t.data != nullptr || t.numel() == 0)))
    fail(op, desc(name, t) +
                 " must be an f32 or bf16 [n_tokens, heads, head_dim] tensor with a contiguous last dim");
}

void need_index(const char* op, const char* name, const Tensor& t, DType dtype, int64_t n) {
  if (!(t.dtype == dtype && t.ndim == 1 && t.shape[0] == n && (n <= 1 || t.strides[0] == 1) &&
        (t.data != nullptr || n == 0)))
    fail(op, desc(name, t) +
                 strfmt(" must be a contiguous %s vector of %lld elements", dtype_name(dtype), (long long)n));
}

#ifdef BUNSEN_HAVE_CUDA
// pre against x, the projection's input (add_rms_norm's checks, for the fused launch that skips that op).
void need_pre(const char* op, const Tensor& x, const AddRmsNorm& p) {
  const Rows xr = as_rows(x);
  const std::pair<const char*, const Tensor*> ts[] = {
      {"pre.x_in", &p.x_in}, {"pre.y", &p.y}, {"pre.x_out", &p.x_out}};
  for (const auto& [name, t] : ts) {
    need_act_rows(op, name, *t);
    const Rows r = as_rows(*t);
    if (!(r.n_rows == xr.n_rows && r.n_cols == xr.n_cols))
      fail(op, desc(name, *t) + " and " + desc("x", x) + " disagree on [m, d]");
  }
  if (!(is_float(p.w.dtype) && p.w.ndim == 1 && p.w.shape[0] == xr.n_cols &&
        (p.w.shape[0] <= 1 || p.w.strides[0] == 1) && p.w.data != nullptr))
    fail(op, desc("pre.w", p.w) +
                 strfmt(" must be a contiguous float vector of %lld elements", (long long)xr.n_cols));
  if (!(!rows_overlap(p.x_in, p.x_out) && !rows_overlap(p.y, p.x_out)))
    fail(op, desc("pre.x_out", p.x_out) + " must not overlap pre.x_in or pre.y");
  if (p.y_w.empty()) return;
  if (!(is_float(p.y_w.dtype) && p.y_w.ndim == 1 && p.y_w.shape[0] == xr.n_cols &&
        (p.y_w.shape[0] <= 1 || p.y_w.strides[0] == 1) && p.y_w.data != nullptr && p.y_scale == 1.0f))
    fail(op, desc("pre.y_w", p.y_w) +
                 strfmt(" must be a contiguous float vector of %lld elements", (long long)xr.n_cols) +
                 strfmt(" (y_scale %g must be 1 in the post-norm form)", p.y_scale));
}

cuda::DevRows dev_rows(const Tensor& t) {
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}

cuda::DevHeads dev_heads(const Tensor& t) {
  return {t.data, t.dtype, t.shape[0], t.shape[1], t.shape[2], t.strides[0], t.strides[1]};
}

cuda::DevLinearPart dev_part(const Tensor& out, const Tensor& w, const Tensor& bias) {
  return {dev_rows(out), dev_rows(w), bias.empty() ? nullptr : bias.data, bias.empty() ? DType::kF32 : bias.dtype};
}

cuda::DevAddNorm dev_pre(const AddRmsNorm& p) {
  cuda::DevAddNorm d{dev_rows(p.x_in), dev_rows(p.y), dev_rows(p.x_out), p.w.data,
                     p.w.dtype,        p.eps,         p.y_scale,         p.w_offset};
  d.y_w = p.y_w.empty() ? nullptr : p.y_w.data;
  d.y_w_dtype = p.y_w.empty() ? DType::kF32 : p.y_w.dtype;
  d.x_scale = p.x_scale;
  return d;
}

#endif

}  // namespace

#ifdef BUNSEN_HAVE_CUDA
bool cuda_route::pre_in_prologue(Context& ctx, const char* op, Tensor x, const AddRmsNorm& p,
                                 const std::function<bool(const cuda::DevAddNorm&)>& fused) {
  need_pre(op, x, p);
  if (fused_norm_enabled(true) && fused(dev_pre(p))) return true;
  add_rms_norm(ctx, x, p);
  return false;
}
using cuda_route::pre_in_prologue;
#endif

void linear_multi(Context& ctx, Tensor x, std::span<const LinearPart> parts, const AddRmsNorm* pre) {
  const char* op = "linear_multi";
  if (!(!parts.empty() && parts.size() <= 4)) fail(op, strfmt("%zu parts (1..4)", parts.size()));
  const AddRmsNorm none;
  const AddRmsNorm& pn = pre != nullptr ? *pre : none;
  std::vector<const Tensor*> ts{&x, &pn.x_in, &pn.y, &pn.x_out, &pn.w};
  for (const LinearPart& p : parts) ts.insert(ts.end(), {&p.out, &p.w, &p.bias});
  bool gpu = false;
  for (const Tensor* t : ts) gpu = on_cuda(op, {&x, t}) || gpu;
  if (!gpu) {
    if (pre != nullptr) add_rms_norm(ctx, x, pn);
    for (const LinearPart& p : parts) linear(ctx, p.out, x, p.w, p.bias);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  cuda::DevLinearPart dev[4];
  for (size_t i = 0; i < parts.size(); ++i) {
    need_linear_shapes(op, parts[i].out, x, parts[i].w, parts[i].bias);
    dev[i] = dev_part(parts[i].out, parts[i].w, parts[i].bias);
  }
  const int n = static_cast<int>(parts.size());
  if (pre != nullptr && pre_in_prologue(ctx, op, x, pn, [&](const cuda::DevAddNorm& dp) {
        return cuda::linear_multi_norm(ctx.cuda_stream, dev_rows(x), dev, n, dp);
      }))
    return;
  cuda::linear_multi(ctx.cuda_stream, dev_rows(x), dev, n);
#endif
}

void linear_swiglu(Context& ctx, Tensor out, Tensor x, Tensor w_gate, Tensor w_up, Tensor b_gate, Tensor b_up,
                   GluAct act, const AddRmsNorm* pre) {
  const char* op = "linear_swiglu";
  const AddRmsNorm none;
  const AddRmsNorm& p = pre != nullptr ? *pre : none;
  const bool gpu = on_cuda(op, {&out, &x, &w_gate, &w_up, &b_gate, &b_up, &p.x_in, &p.y, &p.x_out, &p.w});
  if (!(x.ndim >= 1 && rows_ok(x) && w_gate.ndim == 2))
    fail(op, desc("x", x) + " must be row-strided and " + desc("w_gate", w_gate) + " 2-D");
  const int64_t m = as_rows(x).n_rows, f = w_gate.shape[0];
  if (!gpu) {
    if (pre != nullptr) add_rms_norm(ctx, x, p);
    std::vector<float> gate(static_cast<size_t>(m * f)), up(static_cast<size_t>(m * f));
    Tensor g = Tensor::view(gate.data(), DType::kF32, {m, f}), u = Tensor::view(up.data(), DType::kF32, {m, f});
    linear(ctx, g, x, w_gate, b_gate);
    linear(ctx, u, x, w_up, b_up);
    act == GluAct::kGeluTanh ? gelu_tanh_mul(ctx, out, g, u) : silu_mul(ctx, out, g, u);
    return;
  }
  need_linear_shapes(op, out, x, w_gate, b_gate);
  need_linear_shapes(op, out, x, w_up, b_up);
  if (!(w_gate.dtype == w_up.dtype && same_shape(w_gate, w_up)))
    fail(op, desc("w_gate", w_gate) + " and " + desc("w_up", w_up) + " must have one shape and dtype");
  if (!(b_gate.empty() || b_up.empty() || b_gate.dtype == b_up.dtype))
    fail(op, desc("b_gate", b_gate) + " and " + desc("b_up", b_up) + " must have one dtype");
#ifdef BUNSEN_HAVE_CUDA
  const cuda::DevLinearPart gate = dev_part(out, w_gate, b_gate), up = dev_part(out, w_up, b_up);
  const bool gelu = act == GluAct::kGeluTanh;
  if (pre != nullptr && pre_in_prologue(ctx, op, x, p, [&](const cuda::DevAddNorm& dp) {
        return cuda::linear_swiglu_norm(ctx.cuda_stream, dev_rows(out), dev_rows(x), gate, up, gelu, dp);
      }))
    return;
  cuda::linear_swiglu(ctx.cuda_stream, dev_rows(out), dev_rows(x), gate, up, gelu);
#endif
}

#ifdef BUNSEN_HAVE_CUDA
namespace {

// rope_kv_write's checks on CUDA tensors (q and k of one dtype) and its launch arguments.
cuda::DevRopeKv rope_kv_args(const char* op, Tensor q, Tensor k, Tensor v, const PagedKv& cache, Tensor positions,
                             Tensor slot_mapping, const RopeParams& p) {
  need_heads(op, "q", q);
  need_heads(op, "k", k);
  need_heads(op, "v", v);
  if (!(same_shape(k, v) && q.shape[0] == k.shape[0] && q.shape[2] == k.shape[2]))
    fail(op, desc("q", q) + ", " + desc("k", k) + " and " + desc("v", v) +
                 " disagree on n_tokens, heads or head_dim");
  const Tensor &ck = cache.k, &cv = cache.v;
  if (cache.quantized())  // u8 codes + f32 params (dispatch.cpp's checks)
    detail::check_paged_kv(op, cache);
  else if (!(ck.ndim == 4 && is_act(ck) && ck.dtype == cv.dtype && same_shape(ck, cv) && ck.shape[1] >= 1 &&
             (ck.shape[3] <= 1 || (ck.strides[3] == 1 && cv.strides[3] == 1)) && ck.data != nullptr &&
             cv.data != nullptr))
    fail(op,
         desc("cache.k", ck) + " and " + desc("cache.v", cv) +
             " must be one f32|bf16 [n_blocks, block_size, n_kv_heads, head_dim] shape with contiguous rows");
  if (!(k.shape[1] == ck.shape[2] && k.shape[2] == cache.head_dim()))
    fail(op, desc("k", k) + " and " + desc("cache.k", ck) + " disagree on n_kv_heads or head_dim");
  need_index(op, "positions", positions, DType::kI32, q.shape[0]);
  need_index(op, "slot_mapping", slot_mapping, DType::kI64, q.shape[0]);
  const bool rot_ok = p.rotary_dim == 0 || (p.inv_freq != nullptr && p.rotary_dim > 0 && p.rotary_dim % 2 == 0 &&
                                            p.rotary_dim <= q.shape[2]);
  if (!rot_ok)
    fail(op, strfmt("rotary_dim %d must be 0, or even and <= head_dim of ", p.rotary_dim) + desc("q", q) +
                 " with inv_freq set");
  if (p.rotary_dim > cuda::kMaxRotaryDim)
    fail(op, strfmt("rotary_dim %d is above the CUDA limit %d", p.rotary_dim, cuda::kMaxRotaryDim));
  cuda::DevRopeKv a;
  a.q = dev_heads(q);
  a.k = dev_heads(k);
  a.v = dev_heads(v);
  a.cache = cuda_route::cache_view(cache);
  a.positions = positions.ptr<int32_t>();
  a.slot_mapping = slot_mapping.ptr<int64_t>();
  a.inv_freq_host = p.inv_freq;
  a.rotary_dim = p.rotary_dim;
  a.attention_scaling = p.attention_scaling;
  return a;
}

std::atomic<int> g_qkv_rope{-1};

bool qkv_rope_fold() {
  const int mode = g_qkv_rope.load();
  if (mode >= 0) return mode == 1;
  static const bool env_on = env_flag("BUNSEN_QKV_ROPE", true);
  return env_on;
}

}  // namespace
#endif

void rope_kv_write(Context& ctx, Tensor q, Tensor k, Tensor v, const PagedKv& cache, Tensor positions,
                   Tensor slot_mapping, const RopeParams& p) {
  const char* op = "rope_kv_write";
  const bool gpu = on_cuda(op, {&q, &k, &v, &cache.k, &cache.v, &cache.k_params, &cache.v_params, &positions,
                                &slot_mapping});
  if (!gpu || q.dtype != k.dtype) {  // the unfused ops (they validate)
    if (p.rotary_dim != 0) {
      rope(ctx, q, positions, p);
      rope(ctx, k, positions, p);
    }
    kv_write(ctx, cache, k, v, slot_mapping);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  cuda::rope_kv_write(ctx.cuda_stream, rope_kv_args(op, q, k, v, cache, positions, slot_mapping, p));
#endif
}

void add_rms_norm(Context& ctx, Tensor out, const AddRmsNorm& p) {
  if (p.y_w.empty()) return add_rms_norm(ctx, out, p.x_out, p.y, p.w, p.eps, p.y_scale, p.w_offset, p.x_in);
  const char* op = "add_rms_norm";
  if (p.y_scale != 1.0f)
    fail(op, strfmt("the post-norm form (pre.y_w given) takes y_scale 1, not %g", p.y_scale));
  if (!p.x_in.empty()) {  // x_out = x_in, then the sandwich step in place on x_out
    if (!(p.x_in.dtype == DType::kF32 && p.x_out.dtype == DType::kF32 && same_shape(p.x_in, p.x_out) &&
          rows_ok(p.x_in) && rows_ok(p.x_out) && !rows_overlap(p.x_in, p.x_out) &&
          p.x_in.device == p.x_out.device))
      fail(op, desc("pre.x_in", p.x_in) + " and " + desc("pre.x_out", p.x_out) +
                   " must be non-overlapping f32 row-strided tensors of one shape and device");
    const Rows in = as_rows(p.x_in), to = as_rows(p.x_out);
    const size_t width = static_cast<size_t>(in.n_cols) * sizeof(float);
    if (p.x_out.device.is_cuda()) {
      copy_2d_async(ctx, p.x_out.data, static_cast<size_t>(to.stride) * sizeof(float), p.x_in.data,
                    static_cast<size_t>(in.stride) * sizeof(float), width, static_cast<size_t>(in.n_rows));
    } else {
      for (int64_t r = 0; r < in.n_rows && width > 0; ++r)
        std::memcpy(static_cast<float*>(p.x_out.data) + r * to.stride,
                    static_cast<const float*>(p.x_in.data) + r * in.stride, width);
    }
  }
  post_norm_residual(ctx,
                     {.x = p.x_out,
                      .y = p.y,
                      .w_post = p.y_w,
                      .out = out,
                      .w_next = p.w,
                      .x_scale = p.x_scale,
                      .w_offset = p.w_offset},
                     p.eps);
}

namespace {
std::atomic<int> g_fused_norm{-1};  // set_fused_norm_for_testing
}  // namespace

bool fused_norm_enabled(bool fallback) {
  const int mode = g_fused_norm.load();
  if (mode >= 0) return mode == 1;
#ifdef BUNSEN_HAVE_CUDA
  // -1 unset, else BUNSEN_FUSED_NORM's 0 or 1 (read once).
  static const int env_mode =
      env_str("BUNSEN_FUSED_NORM").empty() ? -1 : static_cast<int>(env_flag("BUNSEN_FUSED_NORM", false));
  return env_mode >= 0 ? env_mode == 1 : fallback;
#else
  return false;
#endif
}

void set_fused_norm_for_testing(int mode) {
  g_fused_norm.store(mode);
}

void set_qkv_rope_fold_for_testing(int mode) {
#ifdef BUNSEN_HAVE_CUDA
  g_qkv_rope.store(mode);
#else
  (void)mode;
#endif
}

bool linear_qkv_rope_kv(Context& ctx, Tensor x, std::span<const LinearPart> qkv, Tensor q3, Tensor k3,
                        Tensor v3, const PagedKv& cache, Tensor positions, Tensor slot_mapping,
                        const RopeParams& p, const AddRmsNorm* pre) {
  const char* op = "linear_qkv_rope_kv";
  if (qkv.size() != 3) fail(op, strfmt("%zu parts (q, k, v: 3)", qkv.size()));
  const AddRmsNorm none;
  const AddRmsNorm& pn = pre != nullptr ? *pre : none;
#ifdef BUNSEN_HAVE_CUDA
  const bool gpu = on_cuda(op, {&x, &qkv[0].w, &qkv[1].w, &qkv[2].w, &q3, &k3, &v3, &cache.k, &cache.v,
                                &positions, &slot_mapping, &pn.x_in, &pn.y, &pn.x_out, &pn.w});
  if (gpu && qkv_rope_fold() && !cache.quantized() && cache.k.dtype == DType::kBF16 &&
      q3.dtype == DType::kBF16 && k3.dtype == DType::kBF16 && x.dtype == DType::kBF16 && rows_ok(x) &&
      as_rows(x).n_rows <= kFusedDecodeMaxTokens) {
    cuda::DevLinearPart dev[3];
    for (size_t i = 0; i < 3; ++i) {
      need_linear_shapes(op, qkv[i].out, x, qkv[i].w, qkv[i].bias);
      dev[i] = dev_part(qkv[i].out, qkv[i].w, qkv[i].bias);
    }
    const Tensor* outs[3] = {&q3, &k3, &v3};
    for (size_t i = 0; i < 3; ++i)
      if (!(outs[i]->data == qkv[i].out.data && outs[i]->nbytes() == qkv[i].out.nbytes()))
        fail(op, desc("part out", qkv[i].out) + " must be the memory of its heads view " +
                     desc("heads", *outs[i]));
    const cuda::DevRopeKv a = rope_kv_args(op, q3, k3, v3, cache, positions, slot_mapping, p);
    if (pre != nullptr) {
      if (pre_in_prologue(ctx, op, x, pn, [&](const cuda::DevAddNorm& dp) {
            return cuda::linear_qkv_rope_kv(ctx.cuda_stream, dev_rows(x), dev, a, &dp);
          }))
        return true;
      pre = nullptr;  // add_rms_norm ran
    }
    if (cuda::linear_qkv_rope_kv(ctx.cuda_stream, dev_rows(x), dev, a)) return true;
  }
#endif
  linear_multi(ctx, x, qkv, pre);
  rope_kv_write(ctx, q3, k3, v3, cache, positions, slot_mapping, p);
  return false;
}

}  // namespace bunsen::kernels
