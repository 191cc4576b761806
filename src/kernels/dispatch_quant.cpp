// ops.h entry points of the quantized ops (linear_q, the fused linear_q_multi / linear_q_swiglu, embedding_q,
// dequantize): validate the QuantWeight (bits, group size, u32 packed width, scales/biases shapes and
// dtypes), the activations and (on the CPU) index contents, then route CPU tensors to cpu:: (or ref:: with
// BUNSEN_KERNELS=ref) and CUDA tensors to cuda/quant_ops.h. Not a kernel. Invariants: errors are Error("kernels", "<op>: ...") naming the tensors;
// all tensors of a call live on one device; on CUDA activations may be f32 or bf16 and ids (device memory)
// are checked for dtype and shape only (the kernels write a NaN row for an out-of-range id).
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/dispatch_cuda.h"
#include "kernels/dispatch_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/quant_ops.h"
#endif

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::on_cuda;
using detail::pool_of;
using detail::use_ref;

// An activation walked as rows: f32 on the CPU, f32 or bf16 on CUDA.
void need_rows(const char* op, const char* name, const Tensor& t, bool gpu) {
  if (t.dtype != DType::kF32 && !(gpu && t.dtype == DType::kBF16))
    fail(op, desc(name, t) + (gpu ? " must be f32 or bf16" : " must be f32"));
  if (t.ndim < 1 || !rows_ok(t))
    fail(op, desc(name, t) + " must have a contiguous last dim and row-strided leading dims");
  if (t.data == nullptr && t.numel() > 0) fail(op, desc(name, t) + " has no data");
}

void need_quant(const char* op, const QuantWeight& w) {
  const bool bits_ok = w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8;
  const bool group_ok = w.group_size == 32 || w.group_size == 64 || w.group_size == 128;
  if (!bits_ok || !group_ok)
    fail(op, strfmt("unsupported quantization bits=%d group_size=%d", w.bits, w.group_size));
  if (w.packed.dtype != DType::kU32 || w.packed.ndim != 2 || !rows_ok(w.packed) || w.packed.data == nullptr)
    fail(op, desc("w.packed", w.packed) + " must be a 2-D u32 tensor with contiguous rows");
  const int64_t n = w.packed.shape[0], k = w.cols();
  if ((w.packed.shape[1] * 32) % w.bits != 0 || k % w.group_size != 0)
    fail(op, desc("w.packed", w.packed) +
                 strfmt(" does not hold whole groups of %d %d-bit codes", w.group_size, w.bits));
  for (const Tensor* t : {&w.scales, &w.biases}) {
    const char* name = t == &w.scales ? "w.scales" : "w.biases";
    if (!is_float(t->dtype) || t->ndim != 2 || !rows_ok(*t) || t->data == nullptr)
      fail(op, desc(name, *t) + " must be a 2-D f32, f16 or bf16 tensor with contiguous rows");
    if (t->shape[0] != n || t->shape[1] != k / w.group_size)
      fail(op, desc(name, *t) +
                   strfmt(" must be [%lld, %lld] for ", (long long)n, (long long)(k / w.group_size)) +
                   desc("w.packed", w.packed));
  }
  if (w.scales.dtype != w.biases.dtype || w.scales.strides[0] != w.biases.strides[0])
    fail(op,
         desc("w.scales", w.scales) + " and " + desc("w.biases", w.biases) + " must share dtype and layout");
}

// ids [n] i32, contiguous; on the CPU every id must index a row of the table (device ids are not read).
void check_ids(const char* op, const Tensor& ids, int64_t n, int64_t vocab, bool gpu) {
  if (ids.dtype != DType::kI32 || ids.ndim != 1 || ids.shape[0] != n || (n > 1 && ids.strides[0] != 1))
    fail(op, desc("ids", ids) + strfmt(" must be a contiguous i32 vector of %lld elements", (long long)n));
  if (gpu) return;
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= vocab)
      fail(op, strfmt("id %d at %lld is out of range for a table of %lld rows", id[i], (long long)i,
                      (long long)vocab));
}

#ifdef BUNSEN_HAVE_CUDA
// The CUDA calls go to the current device; a tensor of another device would be a wrong pointer there.
void need_current_device(const char* op, const Tensor& t) {
  const int dev = cuda::current_device();
  if (t.device.index != dev)
    fail(op, strfmt("tensors are on cuda:%d but the current CUDA device is cuda:%d", t.device.index, dev));
}

cuda::DevRows dev_rows(const Tensor& t) {
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}

cuda::DevQuant dev_quant(const QuantWeight& w) {
  cuda::DevQuant d;
  d.packed = w.packed.ptr<uint32_t>();
  d.packed_stride = w.packed.strides[0];
  d.scales = w.scales.data;
  d.biases = w.biases.data;
  d.sb_dtype = w.scales.dtype;
  d.sb_stride = w.scales.strides[0];
  d.rows = w.rows();
  d.cols = w.cols();
  d.bits = w.bits;
  d.group_size = w.group_size;
  return d;
}
#endif

// out [m, n] = x [m, k] · dequant(w [n, k])ᵀ + bias [n]: the checks of linear_q (and of each fused part).
void check_linear_q(const char* op, const Tensor& out, const Tensor& x, const QuantWeight& w, const Tensor& bias,
                    bool gpu) {
  need_quant(op, w);
  need_rows(op, "x", x, gpu);
  need_rows(op, "out", out, gpu);
  if (x.dim(-1) != w.cols())
    fail(op,
         desc("x", x) + strfmt(" and a quantized weight of %lld columns disagree on k", (long long)w.cols()));
  if (out.dim(-1) != w.rows())
    fail(op, desc("out", out) + " and " + desc("w.packed", w.packed) + " disagree on n");
  if (as_rows(out).n_rows != as_rows(x).n_rows)
    fail(op, desc("out", out) + " and " + desc("x", x) + " disagree on m");
  if (!bias.empty() && (!is_float(bias.dtype) || bias.ndim != 1 || bias.shape[0] != w.rows() ||
                        (bias.shape[0] > 1 && bias.strides[0] != 1)))
    fail(op, desc("bias", bias) +
                 strfmt(" must be a contiguous float vector of %lld elements", (long long)w.rows()));
}

#ifdef BUNSEN_HAVE_CUDA
cuda::DevQuantPart dev_qpart(const Tensor& out, const QuantWeight& w, const Tensor& bias) {
  return {dev_rows(out), dev_quant(w), bias.empty() ? nullptr : bias.data, bias.empty() ? DType::kF32 : bias.dtype};
}
#endif

}  // namespace

void linear_q(Context& ctx, Tensor out, Tensor x, const QuantWeight& w, Tensor bias) {
  const char* op = "linear_q";
  const bool gpu = on_cuda(op, {&out, &x, &w.packed, &w.scales, &w.biases, &bias});
  check_linear_q(op, out, x, w, bias, gpu);
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, x);
    return cuda::linear_q(ctx.cuda_stream, dev_rows(out), dev_rows(x), dev_quant(w),
                          bias.empty() ? nullptr : bias.data, bias.dtype);
  }
#endif
  use_ref() ? ref::linear_q(out, x, w, bias) : cpu::linear_q(pool_of(ctx), out, x, w, bias);
}

void linear_q_multi(Context& ctx, Tensor x, std::span<const QuantLinearPart> parts, const AddRmsNorm* pre) {
  const char* op = "linear_q_multi";
  if (parts.empty() || parts.size() > 4) fail(op, strfmt("%zu parts (1..4)", parts.size()));
  const AddRmsNorm none;
  const AddRmsNorm& pn = pre != nullptr ? *pre : none;
  bool gpu = on_cuda(op, {&x, &pn.x_in, &pn.y, &pn.x_out, &pn.w});
  for (const QuantLinearPart& p : parts)
    gpu = on_cuda(op, {&x, &p.out, &p.w.packed, &p.w.scales, &p.w.biases, &p.bias}) || gpu;
  if (!gpu) {
    if (pre != nullptr) add_rms_norm(ctx, x, pn);
    for (const QuantLinearPart& p : parts) linear_q(ctx, p.out, x, p.w, p.bias);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  need_current_device(op, x);
  cuda::DevQuantPart dev[4];
  for (size_t i = 0; i < parts.size(); ++i) {
    check_linear_q(op, parts[i].out, x, parts[i].w, parts[i].bias, true);
    dev[i] = dev_qpart(parts[i].out, parts[i].w, parts[i].bias);
  }
  const int n = static_cast<int>(parts.size());
  if (pre != nullptr && cuda_route::pre_in_prologue(ctx, op, x, pn, [&](const cuda::DevAddNorm& dp) {
        return cuda::linear_q_multi_norm(ctx.cuda_stream, dev_rows(x), dev, n, dp);
      }))
    return;
  cuda::linear_q_multi(ctx.cuda_stream, dev_rows(x), dev, n);
#endif
}

void linear_q_swiglu(Context& ctx, Tensor out, Tensor x, const QuantWeight& w_gate, const QuantWeight& w_up,
                     Tensor b_gate, Tensor b_up, GluAct act, const AddRmsNorm* pre) {
  const char* op = "linear_q_swiglu";
  const AddRmsNorm none;
  const AddRmsNorm& pn = pre != nullptr ? *pre : none;
  const bool gpu =
      on_cuda(op, {&out, &x, &w_gate.packed, &w_gate.scales, &w_gate.biases, &w_up.packed, &w_up.scales,
                   &w_up.biases, &b_gate, &b_up, &pn.x_in, &pn.y, &pn.x_out, &pn.w});
  check_linear_q(op, out, x, w_gate, b_gate, gpu);
  check_linear_q(op, out, x, w_up, b_up, gpu);
  if (w_gate.bits != w_up.bits || w_gate.group_size != w_up.group_size || w_gate.rows() != w_up.rows() ||
      w_gate.scales.dtype != w_up.scales.dtype)
    fail(op, desc("w_gate.packed", w_gate.packed) + " and " + desc("w_up.packed", w_up.packed) +
                 strfmt(" must share shape, bits (%d vs %d), group size (%d vs %d) and scale dtype", w_gate.bits,
                        w_up.bits, w_gate.group_size, w_up.group_size));
  if (!b_gate.empty() && !b_up.empty() && b_gate.dtype != b_up.dtype)
    fail(op, desc("b_gate", b_gate) + " and " + desc("b_up", b_up) + " must have one dtype");
  const int64_t m = as_rows(x).n_rows, f = w_gate.rows();
  if (!gpu) {
    if (pre != nullptr) add_rms_norm(ctx, x, pn);
    std::vector<float> gate(static_cast<size_t>(m * f)), up(static_cast<size_t>(m * f));
    Tensor g = Tensor::view(gate.data(), DType::kF32, {m, f}), u = Tensor::view(up.data(), DType::kF32, {m, f});
    linear_q(ctx, g, x, w_gate, b_gate);
    linear_q(ctx, u, x, w_up, b_up);
    act == GluAct::kGeluTanh ? gelu_tanh_mul(ctx, out, g, u) : silu_mul(ctx, out, g, u);
    return;
  }
#ifdef BUNSEN_HAVE_CUDA
  need_current_device(op, x);
  const cuda::DevQuantPart gate = dev_qpart(out, w_gate, b_gate), up = dev_qpart(out, w_up, b_up);
  const bool gelu = act == GluAct::kGeluTanh;
  if (pre != nullptr && cuda_route::pre_in_prologue(ctx, op, x, pn, [&](const cuda::DevAddNorm& dp) {
        return cuda::linear_q_swiglu_norm(ctx.cuda_stream, dev_rows(out), dev_rows(x), gate, up, gelu, dp);
      }))
    return;
  cuda::linear_q_swiglu(ctx.cuda_stream, dev_rows(out), dev_rows(x), gate, up, gelu);
#endif
}

void embedding_q(Context& ctx, Tensor out, const QuantWeight& table, Tensor ids, float scale) {
  const char* op = "embedding_q";
  const bool gpu = on_cuda(op, {&out, &table.packed, &table.scales, &table.biases, &ids});
  need_quant(op, table);
  need_rows(op, "out", out, gpu);
  if (out.ndim != 2 || out.shape[1] != table.cols())
    fail(op, desc("out", out) + strfmt(" must be [n, %lld]", (long long)table.cols()));
  check_ids(op, ids, out.shape[0], table.rows(), gpu);
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, out);
    return cuda::embedding_q(ctx.cuda_stream, dev_rows(out), dev_quant(table), ids.ptr<int32_t>(), scale);
  }
#endif
  use_ref() ? ref::embedding_q(out, table, ids, scale)
            : cpu::embedding_q(pool_of(ctx), out, table, ids, scale);
}

void dequantize(Context& ctx, Tensor out, const QuantWeight& w) {
  const char* op = "dequantize";
  const bool gpu = on_cuda(op, {&out, &w.packed, &w.scales, &w.biases});
  need_quant(op, w);
  need_rows(op, "out", out, gpu);
  if (out.ndim != 2 || out.shape[0] != w.rows() || out.shape[1] != w.cols())
    fail(op, desc("out", out) + strfmt(" must be [%lld, %lld]", (long long)w.rows(), (long long)w.cols()));
#ifdef BUNSEN_HAVE_CUDA
  if (gpu) {
    need_current_device(op, out);
    return cuda::dequantize(ctx.cuda_stream, dev_rows(out), dev_quant(w));
  }
#endif
  use_ref() ? ref::dequantize(out, w) : cpu::dequantize(pool_of(ctx), out, w);
}

}  // namespace bunsen::kernels
