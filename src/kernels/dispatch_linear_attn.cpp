// ops.h entry points of the linear-attention ops (causal_conv1d, gated_delta_rule, rms_norm_gated,
// sigmoid_mul, and the fused CUDA decode chain deltanet_decode_fused): validate dtypes, shapes, the state tensors and (on the CPU) the varlen metadata contents,
// then route CPU tensors to cpu:: (ref:: with BUNSEN_KERNELS=ref) and CUDA tensors to
// cuda/linear_attn_ops.h, with the run length from which gated_delta_rule takes its chunked form
// (kDeltaRuleChunkMinTokens, or a form forced by tests). Not a kernel. Invariants: errors are
// Error("kernels", "<op>: ...") naming the tensors; CPU kernels never see a slot or token range out of
// bounds; on CUDA the metadata lives on the device and only its dtypes and shapes are checked (the
// kernels clamp nothing: the Runner builds it).
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "kernels/cpu/linear_attn_ops.h"
#include "kernels/dispatch_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_linear_attn.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/linear_attn_ops.h"
#endif

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::on_cuda;
using detail::pool_of;
using detail::use_ref;

// An activation: f32 on the CPU, f32 or bf16 on CUDA, with data.
void need_act(const char* op, const char* name, const Tensor& t, bool gpu) {
  if (t.dtype != DType::kF32 && !(gpu && t.dtype == DType::kBF16))
    fail(op, desc(name, t) + (gpu ? " must be f32 or bf16" : " must be f32"));
  if (t.data == nullptr && t.numel() > 0) fail(op, desc(name, t) + " has no data");
}

// An activation walked as 2-D rows [n, d].
void need_rows2(const char* op, const char* name, const Tensor& t, bool gpu) {
  need_act(op, name, t, gpu);
  if (t.ndim != 2 || !rows_ok(t)) fail(op, desc(name, t) + " must be 2-D with a contiguous last dim");
}

// An activation walked as rows (any rank, leading dims collapsible into one strided row dim).
void need_rows_any(const char* op, const char* name, const Tensor& t, bool gpu) {
  need_act(op, name, t, gpu);
  if (t.ndim < 1 || !rows_ok(t)) fail(op, desc(name, t) + " must have a contiguous last dim and row-strided leading dims");
}

// [n_tokens, heads, dim] with a contiguous last dim.
void need_heads3(const char* op, const char* name, const Tensor& t, bool gpu) {
  need_act(op, name, t, gpu);
  if (t.ndim != 3 || (t.shape[2] > 1 && t.strides[2] != 1))
    fail(op, desc(name, t) + " must be [n_tokens, heads, dim] with a contiguous last dim");
}

void need_param(const char* op, const char* name, const Tensor& t, int64_t n) {
  if (!is_float(t.dtype) || t.ndim != 1 || t.shape[0] != n || (n > 1 && t.strides[0] != 1) || t.data == nullptr)
    fail(op, desc(name, t) + strfmt(" must be a contiguous float vector of %lld elements", (long long)n));
}

void need_state(const char* op, const Tensor& s, std::initializer_list<int64_t> inner) {
  bool ok = s.dtype == DType::kF32 && s.ndim == static_cast<int>(inner.size()) + 1 && s.is_contiguous() &&
            s.data != nullptr;
  int i = 1;
  for (int64_t d : inner) ok = ok && s.shape[i++] == d;
  if (!ok) {
    std::string want = "[n_slots";
    for (int64_t d : inner) want += strfmt(", %lld", (long long)d);
    fail(op, desc("state", s) + " must be a contiguous f32 tensor " + want + "]");
  }
}

void need_i32(const char* op, const char* name, const Tensor& t, int64_t n) {
  if (t.dtype != DType::kI32 || t.ndim != 1 || t.shape[0] != n || (n > 1 && t.strides[0] != 1) ||
      (t.data == nullptr && n > 0))
    fail(op, desc(name, t) + strfmt(" must be a contiguous i32 vector of %lld elements", (long long)n));
}

// Shapes always; on the CPU also the contents: token ranges that tile [0, n_tokens), slots < n_slots.
void check_meta(const char* op, const StateMeta& m, int64_t n_tokens, int64_t n_slots, bool gpu) {
  const int64_t n_seqs = m.state_slots.numel();
  need_i32(op, "meta.state_slots", m.state_slots, n_seqs);
  need_i32(op, "meta.seq_starts", m.seq_starts, n_seqs + 1);
  need_i32(op, "meta.positions", m.positions, n_tokens);
  if (gpu) return;
  const int32_t* st = m.seq_starts.ptr<int32_t>();
  const int32_t* sl = m.state_slots.ptr<int32_t>();
  if (st[0] != 0 || st[n_seqs] != n_tokens)
    fail(op, strfmt("meta.seq_starts must run from 0 to n_tokens %lld", (long long)n_tokens));
  for (int64_t s = 0; s < n_seqs; ++s) {
    if (st[s + 1] < st[s]) fail(op, strfmt("meta.seq_starts decreases at sequence %lld", (long long)s));
    if (sl[s] >= n_slots) fail(op, strfmt("state slot %d of sequence %lld is outside [0, %lld)", sl[s], (long long)s, (long long)n_slots));
  }
}

std::atomic<DeltaRuleForm> g_delta_form{DeltaRuleForm::kAuto};

// The shortest run of a sequence's tokens that takes the chunked form of gated_delta_rule.
int32_t delta_chunk_min() {
  switch (g_delta_form.load(std::memory_order_relaxed)) {
    case DeltaRuleForm::kRecurrent: return INT32_MAX;
    case DeltaRuleForm::kChunked: return 1;
    default: return kDeltaRuleChunkMinTokens;
  }
}

#ifdef BUNSEN_HAVE_CUDA
cuda::DevRows dev_rows(const Tensor& t) {
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}
cuda::DevHeads dev_heads(const Tensor& t) {
  return {t.data, t.dtype, t.shape[0], t.shape[1], t.shape[2], t.strides[0], t.strides[1]};
}
cuda::DevStateMeta dev_meta(const StateMeta& m) {
  return {m.seq_starts.ptr<int32_t>(), m.state_slots.ptr<int32_t>(), m.positions.ptr<int32_t>(),
          m.state_slots.numel()};
}
void need_current_device(const char* op, const Tensor& t) {
  if (t.device.index != cuda::current_device())
    fail(op, strfmt("tensors are on cuda:%d but the current CUDA device is cuda:%d", t.device.index,
                    cuda::current_device()));
}
#endif

}  // namespace

void causal_conv1d(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta) {
  const char* op = "causal_conv1d";
  const bool gpu = on_cuda(op, {&out, &x, &w, &state, &meta.seq_starts, &meta.state_slots, &meta.positions});
  need_rows2(op, "x", x, gpu);
  need_rows2(op, "out", out, gpu);
  if (!same_shape(out, x)) fail(op, desc("out", out) + " and " + desc("x", x) + " must have the same shape");
  if (out.data == x.data && x.numel() > 0) fail(op, desc("out", out) + " must not alias x");
  if (!is_float(w.dtype) || w.ndim != 2 || !rows_ok(w) || w.shape[0] != x.shape[1] || w.shape[1] < 2 || !w.data)
    fail(op, desc("w", w) + " must be a float [channels, kernel >= 2] matrix matching " + desc("x", x));
  need_state(op, state, {x.shape[1], w.shape[1] - 1});
  check_meta(op, meta, x.shape[0], state.shape[0], gpu);
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, x);
    return cuda::causal_conv1d(ctx.cuda_stream, {dev_rows(out), dev_rows(x), dev_rows(w), state.ptr<float>(), dev_meta(meta)});
  }
#endif
  use_ref() ? ref::causal_conv1d(out, x, w, state, meta) : cpu::causal_conv1d(pool_of(ctx), out, x, w, state, meta);
}

void gated_delta_rule(Context& ctx, Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta,
                      float q_scale) {
  const char* op = "gated_delta_rule";
  const bool gpu = on_cuda(op, {&out, &in.q, &in.k, &in.v, &in.a, &in.b, &in.a_log, &in.dt_bias, &state,
                                &meta.seq_starts, &meta.state_slots, &meta.positions});
  for (const auto& [name, t] : {std::pair{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"out", &out}})
    need_heads3(op, name, *t, gpu);
  const int64_t n = in.q.shape[0], n_k = in.q.shape[1], dk = in.q.shape[2], n_v = in.v.shape[1], dv = in.v.shape[2];
  if (!same_shape(in.q, in.k)) fail(op, desc("q", in.q) + " and " + desc("k", in.k) + " must have the same shape");
  if (in.v.shape[0] != n || n_k < 1 || n_v % n_k != 0)
    fail(op, desc("v", in.v) + " must have q's tokens and a multiple of its heads " + desc("q", in.q));
  if (!same_shape(out, in.v) || !out.is_contiguous()) fail(op, desc("out", out) + " must be contiguous and shaped like " + desc("v", in.v));
  for (const auto& [name, t] : {std::pair{"a", &in.a}, {"b", &in.b}}) {
    need_rows2(op, name, *t, gpu);
    if (t->shape[0] != n || t->shape[1] != n_v) fail(op, desc(name, *t) + strfmt(" must be [%lld, %lld]", (long long)n, (long long)n_v));
  }
  need_param(op, "a_log", in.a_log, n_v);
  need_param(op, "dt_bias", in.dt_bias, n_v);
  need_state(op, state, {n_v, dk, dv});
  check_meta(op, meta, n, state.shape[0], gpu);
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    if (dk > cuda::kMaxDeltaHeadDim || dv > cuda::kMaxDeltaHeadDim)
      fail(op, desc("q", in.q) + " / " + desc("v", in.v) + strfmt(": head dims above the CUDA limit %d", cuda::kMaxDeltaHeadDim));
    need_current_device(op, out);
    cuda::DevDeltaRule d;
    d.out = dev_heads(out);
    d.q = dev_heads(in.q);
    d.k = dev_heads(in.k);
    d.v = dev_heads(in.v);
    d.a = dev_rows(in.a);
    d.b = dev_rows(in.b);
    d.a_log = in.a_log.data;
    d.a_log_dtype = in.a_log.dtype;
    d.dt_bias = in.dt_bias.data;
    d.dt_bias_dtype = in.dt_bias.dtype;
    d.state = state.ptr<float>();
    d.meta = dev_meta(meta);
    d.q_scale = q_scale;
    d.chunk_min = delta_chunk_min();
    return cuda::gated_delta_rule(ctx.cuda_stream, d);
  }
#endif
  use_ref() ? ref::gated_delta_rule(out, in, state, meta, q_scale)
            : cpu::gated_delta_rule(pool_of(ctx), out, in, state, meta, q_scale, delta_chunk_min());
}

void set_delta_rule_form_for_testing(DeltaRuleForm form) { g_delta_form.store(form, std::memory_order_relaxed); }

namespace {
std::atomic<int> g_fused{-1};  // set_deltanet_fused_for_testing: -1 env, 0 off, 1 on

// Tokens per step up to which the fused launch is the default (H200, Qwen3.5-4B DeltaNet layer in a CUDA graph:
// batch 1 three launches 9.6 us vs fused 6.5 us; batch 8 19.3 vs 31.8 us, one cluster per sequence and k-head
// costs more than the three launches' wider grids; the lines cross near 2.4 sequences).
constexpr int64_t kFusedMaxTokens = 2;

// Whether a step of n tokens takes the fused launch: the testing hook forces it on (any n the kernel takes)
// or off; BUNSEN_DELTANET_FUSED=0 turns it off; by default steps of <= kFusedMaxTokens tokens.
bool fused_enabled(int64_t n) {
  const int mode = g_fused.load(std::memory_order_relaxed);
  if (mode >= 0) return mode == 1;
  static const bool env_on = env_flag("BUNSEN_DELTANET_FUSED", true);
  return env_on && n <= kFusedMaxTokens;
}
}  // namespace

bool deltanet_decode_fused(Context& ctx, Tensor out, const DeltaNetFusedInputs& in, const LinearState& state,
                           const StateMeta& meta) {
  const char* op = "deltanet_decode_fused";
#ifdef BUNSEN_HAVE_CUDA
  const int64_t n = in.qkv.ndim == 2 ? in.qkv.shape[0] : -1;
  const int64_t n_k = in.n_k_heads, n_v = in.n_v_heads, dk = in.k_head_dim, dv = in.v_head_dim;
  const int64_t kernel = in.conv_w.ndim == 2 ? in.conv_w.shape[1] : 0;
  // Every run is < the chunked form's minimum when the whole step is: no run can need the chunked kernel.
  if (!out.device.is_cuda() || !fused_enabled(n) || n < 0 || n >= delta_chunk_min() ||
      !cuda::deltanet_fused_fits(n_k, n_v, dk, dv, kernel))
    return false;
  const bool gpu = on_cuda(op, {&out, &in.qkv, &in.z, &in.a, &in.b, &in.conv_w, &in.a_log, &in.dt_bias, &in.norm_w,
                                &state.conv, &state.recurrent, &meta.seq_starts, &meta.state_slots, &meta.positions});
  if (!gpu) fail(op, desc("out", out) + ": every tensor must be on the same CUDA device");
  const int64_t channels = 2 * n_k * dk + n_v * dv;
  need_rows2(op, "qkv", in.qkv, true);
  if (in.qkv.shape[1] != channels)
    fail(op, desc("qkv", in.qkv) + strfmt(" must have 2 * %lld * %lld + %lld * %lld columns", (long long)n_k,
                                          (long long)dk, (long long)n_v, (long long)dv));
  for (const auto& [name, t] : {std::pair{"z", &in.z}, {"out", &out}}) {
    need_rows2(op, name, *t, true);
    if (t->shape[0] != n || t->shape[1] != n_v * dv)
      fail(op, desc(name, *t) + strfmt(" must be [%lld, %lld]", (long long)n, (long long)(n_v * dv)));
  }
  if ((out.data == in.qkv.data || out.data == in.z.data) && out.numel() > 0)
    fail(op, desc("out", out) + " must not alias qkv or z");
  for (const auto& [name, t] : {std::pair{"a", &in.a}, {"b", &in.b}}) {
    need_rows2(op, name, *t, true);
    if (t->shape[0] != n || t->shape[1] != n_v) fail(op, desc(name, *t) + strfmt(" must be [%lld, %lld]", (long long)n, (long long)n_v));
  }
  if (!is_float(in.conv_w.dtype) || !rows_ok(in.conv_w) || in.conv_w.shape[0] != channels || !in.conv_w.data)
    fail(op, desc("conv_w", in.conv_w) + strfmt(" must be a float [%lld, kernel] matrix", (long long)channels));
  need_param(op, "a_log", in.a_log, n_v);
  need_param(op, "dt_bias", in.dt_bias, n_v);
  need_param(op, "norm_w", in.norm_w, dv);
  need_state(op, state.conv, {channels, kernel - 1});
  need_state(op, state.recurrent, {n_v, dk, dv});
  if (state.conv.shape[0] != state.recurrent.shape[0])
    fail(op, desc("conv state", state.conv) + " and " + desc("recurrent state", state.recurrent) +
                 " must have the same slots");
  check_meta(op, meta, n, state.conv.shape[0], true);
  need_current_device(op, out);
  cuda::DevDeltaNetFused d;
  d.out = dev_rows(out);
  d.qkv = dev_rows(in.qkv);
  d.z = dev_rows(in.z);
  d.a = dev_rows(in.a);
  d.b = dev_rows(in.b);
  d.conv_w = dev_rows(in.conv_w);
  d.conv_state = state.conv.ptr<float>();
  d.state = state.recurrent.ptr<float>();
  d.a_log = in.a_log.data;
  d.a_log_dtype = in.a_log.dtype;
  d.dt_bias = in.dt_bias.data;
  d.dt_bias_dtype = in.dt_bias.dtype;
  d.norm_w = in.norm_w.data;
  d.norm_w_dtype = in.norm_w.dtype;
  d.meta = dev_meta(meta);
  d.n_k = static_cast<int>(n_k);
  d.n_v = static_cast<int>(n_v);
  d.dk = static_cast<int>(dk);
  d.dv = static_cast<int>(dv);
  d.q_scale = in.q_scale;
  d.eps = in.eps;
  cuda::deltanet_decode_fused(ctx.cuda_stream, d);
  return true;
#else
  (void)ctx, (void)out, (void)in, (void)state, (void)meta, (void)op;
  return false;
#endif
}

void set_deltanet_fused_for_testing(int mode) { g_fused.store(mode < 0 ? -1 : mode > 0 ? 1 : 0, std::memory_order_relaxed); }

void rms_norm_gated(Context& ctx, Tensor out, Tensor x, Tensor z, Tensor w, float eps) {
  const char* op = "rms_norm_gated";
  const bool gpu = on_cuda(op, {&out, &x, &z, &w});
  need_rows_any(op, "x", x, gpu);
  need_rows_any(op, "z", z, gpu);
  need_rows_any(op, "out", out, gpu);
  if (!same_shape(out, x) || !same_shape(z, x))
    fail(op, desc("out", out) + ", " + desc("x", x) + " and " + desc("z", z) + " must have the same shape");
  need_param(op, "w", w, x.dim(-1));
  if (gpu && out.data == x.data && (out.dtype != x.dtype || as_rows(out).stride != as_rows(x).stride))
    fail(op, desc("out", out) + " aliases " + desc("x", x) + " with another dtype or row stride");
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, x);
    return cuda::rms_norm_gated(ctx.cuda_stream, dev_rows(out), dev_rows(x), dev_rows(z), w.data, w.dtype, eps);
  }
#endif
  use_ref() ? ref::rms_norm_gated(out, x, z, w, eps) : cpu::rms_norm_gated(pool_of(ctx), out, x, z, w, eps);
}

void sigmoid_mul(Context& ctx, Tensor out, Tensor x, Tensor gate) {
  const char* op = "sigmoid_mul";
  const bool gpu = on_cuda(op, {&out, &x, &gate});
  need_rows_any(op, "x", x, gpu);
  need_rows_any(op, "gate", gate, gpu);
  need_rows_any(op, "out", out, gpu);
  const bool broadcast = gate.dim(-1) == 1 && as_rows(gate).n_rows == as_rows(x).n_rows;
  if (!same_shape(out, x) || !(same_shape(gate, x) || broadcast))
    fail(op, desc("out", out) + ", " + desc("x", x) + " and " + desc("gate", gate) +
                 " must have the same shape (gate may have one column per row)");
  if (gpu && out.data == x.data && (out.dtype != x.dtype || as_rows(out).stride != as_rows(x).stride))
    fail(op, desc("out", out) + " aliases " + desc("x", x) + " with another dtype or row stride");
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, x);
    return cuda::sigmoid_mul(ctx.cuda_stream, dev_rows(out), dev_rows(x), dev_rows(gate));
  }
#endif
  use_ref() ? ref::sigmoid_mul(out, x, gate) : cpu::sigmoid_mul(pool_of(ctx), out, x, gate);
}

}  // namespace bunsen::kernels
