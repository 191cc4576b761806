// Tensor -> cuda_ops.h views for CUDA tensors, then the CUDA kernels on ctx.cuda_stream (see
// dispatch_cuda.h). Not validating shapes (dispatch.cpp did); it only checks that the tensors live on
// the current CUDA device. Without BUNSEN_HAVE_CUDA every entry throws "CUDA backend not built".
#include "kernels/dispatch_cuda.h"

#include <vector>

#include "core/status.h"
#include "kernels/rows.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace bunsen::kernels::cuda_route {

#ifdef BUNSEN_HAVE_CUDA
namespace {

// The CUDA calls go to the current device; a tensor of another device would be a wrong pointer there.
void need_current_device(const char* op, const Tensor& t) {
  const int dev = cuda::current_device();
  if (t.device.index != dev)
    throw Error("kernels", strfmt("%s: tensors are on cuda:%d but the current CUDA device is cuda:%d", op,
                                  t.device.index, dev));
}

cuda::DevRows rows(const Tensor& t) {
  const Rows r = as_rows(t);
  return {t.data, t.dtype, r.n_rows, r.n_cols, r.stride};
}

cuda::DevHeads heads(const Tensor& t) {
  return {t.data, t.dtype, t.shape[0], t.shape[1], t.shape[2], t.strides[0], t.strides[1]};
}


}  // namespace

cuda::DevCache cache_view(const PagedKv& c) {
  cuda::DevCache d;
  d.k = c.k.data;
  d.v = c.v.data;
  d.dtype = c.k.dtype;
  d.n_blocks = c.k.shape[0];
  d.block_size = c.k.shape[1];
  d.n_kv_heads = c.k.shape[2];
  d.head_dim = c.head_dim();  // elements (codes: k.shape[3] bytes)
  for (int i = 0; i < 3; ++i) {
    d.k_strides[i] = c.k.strides[i];
    d.v_strides[i] = c.v.strides[i];
  }
  if (c.quantized()) {
    d.k_params = c.k_params.ptr<float>();
    d.v_params = c.v_params.ptr<float>();
    for (int i = 0; i < 3; ++i) {
      d.kp_strides[i] = c.k_params.strides[i];
      d.vp_strides[i] = c.v_params.strides[i];
    }
    d.bits = c.bits;
    d.group_size = c.group_size;
    d.fp8 = c.fp8;
  }
  return d;
}

void embedding(Context& ctx, Tensor out, Tensor table, Tensor ids, float scale) {
  need_current_device("embedding", out);
  cuda::embedding(ctx.cuda_stream, rows(out), rows(table), ids.ptr<int32_t>(), scale);
}

void rms_norm(Context& ctx, Tensor out, Tensor x, Tensor w, float eps, float w_offset) {
  need_current_device("rms_norm", x);
  cuda::rms_norm(ctx.cuda_stream, rows(out), rows(x), w.data, w.dtype, eps, w_offset);
}

void add_scaled(Context& ctx, Tensor x, Tensor y, float scale) {
  need_current_device("add_scaled", x);
  cuda::add_scaled(ctx.cuda_stream, rows(x), rows(y), scale);
}

void add_rms_norm(Context& ctx, Tensor out, Tensor x, Tensor y, Tensor w, float eps, float y_scale,
                  float w_offset, Tensor x_in) {
  need_current_device("add_rms_norm", x);
  cuda::add_rms_norm(ctx.cuda_stream, rows(out), rows(x), rows(y), w.data, w.dtype, eps, y_scale, w_offset,
                     x_in.data);
}

void scale(Context& ctx, Tensor x, float s) {
  need_current_device("scale", x);
  cuda::scale(ctx.cuda_stream, rows(x), s);
}

void linear(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor bias) {
  need_current_device("linear", x);
  cuda::linear(ctx.cuda_stream, rows(out), rows(x), rows(w), bias.empty() ? nullptr : bias.data, bias.dtype);
}

void rope(Context& ctx, Tensor x, Tensor positions, const RopeParams& p) {
  need_current_device("rope", x);
  cuda::rope(ctx.cuda_stream, heads(x), positions.ptr<int32_t>(), p.inv_freq, p.rotary_dim,
             p.attention_scaling);
}

void kv_write(Context& ctx, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  need_current_device("kv_write", k);
  cuda::kv_write(ctx.cuda_stream, cache_view(cache), heads(k), heads(v), slot_mapping.ptr<int64_t>());
}

void paged_attention(Context& ctx, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p) {
  need_current_device("paged_attention", q);
  cuda::DevAttention a;
  a.out = heads(out);
  a.q = heads(q);
  a.cache = cache_view(cache);
  a.meta.positions = meta.positions.ptr<int32_t>();
  a.meta.seq_index = meta.seq_index.ptr<int32_t>();
  a.meta.block_tables = meta.block_tables.ptr<int32_t>();
  a.meta.n_seqs = meta.block_tables.shape[0];
  a.meta.max_blocks = meta.block_tables.shape[1];
  a.meta.table_stride =
      meta.block_tables.shape[0] > 1 ? meta.block_tables.strides[0] : meta.block_tables.shape[1];
  a.scale = p.scale;
  a.sliding_window = p.sliding_window;
  a.softcap = p.softcap;
  if (!p.prefetch_next.empty() && p.prefetch_next.device.is_cuda()) {
    a.prefetch = p.prefetch_next.data;
    a.prefetch_bytes = static_cast<int64_t>(p.prefetch_next.nbytes());
  }
  cuda::paged_attention(ctx.cuda_stream, a);
}

void silu_mul(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  need_current_device("silu_mul", out);
  cuda::silu_mul(ctx.cuda_stream, rows(out), rows(gate), rows(up));
}

void gelu_tanh_mul(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  need_current_device("gelu_tanh_mul", out);
  cuda::gelu_tanh_mul(ctx.cuda_stream, rows(out), rows(gate), rows(up));
}

void softcap(Context& ctx, Tensor x, float cap) {
  need_current_device("softcap", x);
  cuda::softcap(ctx.cuda_stream, rows(x), cap);
}

void softmax(Context& ctx, Tensor x) {
  need_current_device("softmax", x);
  cuda::softmax(ctx.cuda_stream, rows(x));
}

void argmax(Context& ctx, Tensor out, Tensor x, int32_t* host_out) {
  need_current_device("argmax", x);
  cuda::argmax(ctx.cuda_stream, out.ptr<int32_t>(), rows(x), host_out);
}

void sample(Context& ctx, Tensor out, Tensor x, std::span<const SampleSpec> specs) {
  need_current_device("sample", x);
  std::vector<cuda::SampleRow> r(specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    r[i] = {specs[i].temperature, specs[i].top_k, specs[i].top_p, specs[i].min_p, specs[i].u};
  cuda::sample(ctx.cuda_stream, out.ptr<int32_t>(), rows(x), r.data());
}

void gather_rows(Context& ctx, Tensor out, Tensor x, Tensor row_ids) {
  need_current_device("gather_rows", out);
  cuda::gather_rows(ctx.cuda_stream, rows(out), rows(x), row_ids.ptr<int32_t>());
}

#else  // !BUNSEN_HAVE_CUDA: dispatch.cpp rejects CUDA tensors before calling these.

namespace {
[[noreturn]] void not_built(const char* op) {
  throw Error("kernels", std::string(op) + ": CUDA backend not built");
}
}  // namespace

void embedding(Context&, Tensor, Tensor, Tensor, float) {
  not_built("embedding");
}
void rms_norm(Context&, Tensor, Tensor, Tensor, float, float) {
  not_built("rms_norm");
}
void add_scaled(Context&, Tensor, Tensor, float) {
  not_built("add_scaled");
}
void add_rms_norm(Context&, Tensor, Tensor, Tensor, Tensor, float, float, float, Tensor) {
  not_built("add_rms_norm");
}
void scale(Context&, Tensor, float) {
  not_built("scale");
}
void linear(Context&, Tensor, Tensor, Tensor, Tensor) {
  not_built("linear");
}
void rope(Context&, Tensor, Tensor, const RopeParams&) {
  not_built("rope");
}
void kv_write(Context&, const PagedKv&, Tensor, Tensor, Tensor) {
  not_built("kv_write");
}
void paged_attention(Context&, Tensor, Tensor, const PagedKv&, const AttentionMeta&, const AttentionParams&) {
  not_built("paged_attention");
}
void silu_mul(Context&, Tensor, Tensor, Tensor) {
  not_built("silu_mul");
}
void gelu_tanh_mul(Context&, Tensor, Tensor, Tensor) {
  not_built("gelu_tanh_mul");
}
void softcap(Context&, Tensor, float) {
  not_built("softcap");
}
void softmax(Context&, Tensor) {
  not_built("softmax");
}
void argmax(Context&, Tensor, Tensor, int32_t*) {
  not_built("argmax");
}
void sample(Context&, Tensor, Tensor, std::span<const SampleSpec>) {
  not_built("sample");
}
void gather_rows(Context&, Tensor, Tensor, Tensor) {
  not_built("gather_rows");
}

#endif

}  // namespace bunsen::kernels::cuda_route
