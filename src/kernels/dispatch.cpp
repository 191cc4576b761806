// ops.h entry points: validate dtypes, shapes, devices and (on CPU) index contents, then route CPU
// tensors to cpu:: (or ref:: when BUNSEN_KERNELS=ref, read once) and CUDA tensors to cuda_route::
// (dispatch_cuda.cpp; "CUDA backend not built" without it). Not a kernel: no math here. Invariants:
// every error is Error("kernels", "<op>: ...") naming the op and the offending tensors' shapes; CPU
// kernels never see an index that is out of range; on CUDA, where index tensors live on the device,
// only their dtypes and shapes are checked (the CUDA kernels never dereference a bad index).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"  // plain C++: limits only
#include "kernels/dispatch_cuda.h"
#include "kernels/dispatch_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels {
namespace {

using detail::desc;
using detail::fail;
using detail::on_cuda;
using detail::pool_of;
using detail::rows_overlap;
using detail::use_ref;

void need_dtype(const char* op, const char* name, const Tensor& t, DType d) {
  if (t.dtype != d) fail(op, desc(name, t) + " must be " + dtype_name(d));
}

void need_float(const char* op, const char* name, const Tensor& t) {
  if (!is_float(t.dtype)) fail(op, desc(name, t) + " must be f32, f16 or bf16");
}

void need_ndim(const char* op, const char* name, const Tensor& t, int ndim) {
  if (t.ndim != ndim) fail(op, desc(name, t) + strfmt(" must have %d dims", ndim));
}

void need_data(const char* op, const char* name, const Tensor& t) {
  if (t.data == nullptr && t.numel() > 0) fail(op, desc(name, t) + " has no data");
}

// An activation: f32 on the CPU, f32 or bf16 on CUDA.
void need_act(const char* op, const char* name, const Tensor& t, bool gpu) {
  if (!gpu) return need_dtype(op, name, t, DType::kF32);
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) fail(op, desc(name, t) + " must be f32 or bf16");
}

// An activation walked as rows (>= 1 dim, last dim contiguous, leading dims collapsible).
void need_rows(const char* op, const char* name, const Tensor& t, bool gpu) {
  need_act(op, name, t, gpu);
  if (t.ndim < 1 || !rows_ok(t))
    fail(op, desc(name, t) + " must have a contiguous last dim and row-strided leading dims");
  need_data(op, name, t);
}

// A 1-D contiguous index or parameter vector of length n (n < 0: any length).
void need_vector(const char* op, const char* name, const Tensor& t, int64_t n) {
  need_ndim(op, name, t, 1);
  if (t.shape[0] > 1 && t.strides[0] != 1) fail(op, desc(name, t) + " must be contiguous");
  if (n >= 0 && t.shape[0] != n) fail(op, desc(name, t) + strfmt(" must have %lld elements", (long long)n));
  need_data(op, name, t);
}

void need_same_shape(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  if (!same_shape(a, b)) fail(op, desc(na, a) + " and " + desc(nb, b) + " must have the same shape");
}

// [n_tokens, heads, head_dim] activation with a contiguous last dim (other strides free).
void need_heads(const char* op, const char* name, const Tensor& t, bool gpu) {
  need_act(op, name, t, gpu);
  need_ndim(op, name, t, 3);
  if (t.shape[2] > 1 && t.strides[2] != 1) fail(op, desc(name, t) + " must have a contiguous last dim");
  need_data(op, name, t);
}

// The (scale, bias) tensor of a quantized cache: f32 [n_blocks, block_size, n_kv_heads, 2 * groups].
void need_kv_params(const char* op, const char* name, const Tensor& t, const PagedKv& c) {
  const int64_t groups = c.head_dim() / c.group_size;
  if (t.ndim != 4 || t.dtype != DType::kF32 || t.shape[0] != c.k.shape[0] || t.shape[1] != c.k.shape[1] ||
      t.shape[2] != c.k.shape[2] || t.shape[3] != 2 * groups || (t.shape[3] > 1 && t.strides[3] != 1))
    fail(op, desc(name, t) + strfmt(" must be f32 [n_blocks, block_size, n_kv_heads, %lld] to match ",
                                    (long long)(2 * groups)) +
                 desc("cache.k", c.k));
  need_data(op, name, t);
}

void need_quant_cache(const char* op, const PagedKv& c) {
  if (c.bits != 4 && c.bits != 8)
    fail(op, strfmt("quantized KV cache: bits %d must be 4 or 8", c.bits));
  if (c.fp8 && c.bits != 8) fail(op, strfmt("quantized KV cache: fp8 (e4m3) needs bits 8, got %d", c.bits));
  for (const Tensor* t : {&c.k, &c.v}) need_dtype(op, t == &c.k ? "cache.k" : "cache.v", *t, DType::kU8);
  const int64_t head_dim = c.head_dim();
  if (c.group_size <= 0 || head_dim % c.group_size != 0 || (c.group_size * c.bits) % 8 != 0 ||
      (c.k.shape[3] * 8) % c.bits != 0)
    fail(op, desc("cache.k", c.k) + strfmt(": group_size %d must divide head_dim %lld (and hold whole bytes)",
                                           c.group_size, (long long)head_dim));
  need_kv_params(op, "cache.k_params", c.k_params, c);
  need_kv_params(op, "cache.v_params", c.v_params, c);
}

void need_cache(const char* op, const PagedKv& c) {
  for (const Tensor* t : {&c.k, &c.v}) {
    const char* name = t == &c.k ? "cache.k" : "cache.v";
    need_ndim(op, name, *t, 4);
    if (c.bits == 0 && t->dtype != DType::kF32 && t->dtype != DType::kBF16)
      fail(op, desc(name, *t) + " must be f32 or bf16");
    if (t->shape[3] > 1 && t->strides[3] != 1) fail(op, desc(name, *t) + " must have a contiguous last dim");
    need_data(op, name, *t);
  }
  if (!same_shape(c.k, c.v) || c.k.dtype != c.v.dtype)
    fail(op, desc("cache.k", c.k) + " and " + desc("cache.v", c.v) + " must match");
  if (c.k.shape[1] < 1) fail(op, desc("cache.k", c.k) + " has block_size 0");
  if (c.bits != 0) need_quant_cache(op, c);
}

}  // namespace

void detail::check_paged_kv(const char* op, const PagedKv& cache) {
  need_cache(op, cache);
}

const char* cpu_backend_name() {
  return use_ref() ? "ref" : cpu::isa_name(cpu::active_isa());
}

void embedding(Context& ctx, Tensor out, Tensor table, Tensor ids, float scale) {
  const char* op = "embedding";
  const bool gpu = on_cuda(op, {&out, &table, &ids});
  need_rows(op, "out", out, gpu);
  need_ndim(op, "out", out, 2);
  need_float(op, "table", table);
  need_ndim(op, "table", table, 2);
  if (!rows_ok(table)) fail(op, desc("table", table) + " must have a contiguous last dim");
  need_dtype(op, "ids", ids, DType::kI32);
  need_vector(op, "ids", ids, out.shape[0]);
  if (out.shape[1] != table.shape[1])
    fail(op, desc("out", out) + " and " + desc("table", table) + " disagree on d");
  if (gpu) return cuda_route::embedding(ctx, out, table, ids, scale);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < ids.shape[0]; ++i)
    if (id[i] < 0 || id[i] >= table.shape[0])
      fail(op, strfmt("id %d at %lld is out of range for ", id[i], (long long)i) + desc("table", table));
  use_ref() ? ref::embedding(out, table, ids, scale) : cpu::embedding(pool_of(ctx), out, table, ids, scale);
}

void rms_norm(Context& ctx, Tensor out, Tensor x, Tensor w, float eps, float w_offset) {
  const char* op = "rms_norm";
  const bool gpu = on_cuda(op, {&out, &x, &w});
  need_rows(op, "x", x, gpu);
  need_rows(op, "out", out, gpu);
  need_same_shape(op, "out", out, "x", x);
  need_float(op, "w", w);
  need_vector(op, "w", w, -1);
  if (w.shape[0] != x.dim(-1)) fail(op, desc("x", x) + " and " + desc("w", w) + " disagree on d");
  if (gpu && out.data == x.data && (out.dtype != x.dtype || as_rows(out).stride != as_rows(x).stride))
    fail(op, desc("out", out) + " aliases " + desc("x", x) + " with another dtype or row stride");
  if (gpu) return cuda_route::rms_norm(ctx, out, x, w, eps, w_offset);
  use_ref() ? ref::rms_norm(out, x, w, eps, w_offset) : cpu::rms_norm(pool_of(ctx), out, x, w, eps, w_offset);
}

void add_scaled(Context& ctx, Tensor x, Tensor y, float scale) {
  const char* op = "add_scaled";
  const bool gpu = on_cuda(op, {&x, &y});
  need_rows(op, "x", x, gpu);
  need_rows(op, "y", y, gpu);
  need_same_shape(op, "x", x, "y", y);
  if (gpu) return cuda_route::add_scaled(ctx, x, y, scale);
  use_ref() ? ref::add_scaled(x, y, scale) : cpu::add_scaled(pool_of(ctx), x, y, scale);
}

void add_rms_norm(Context& ctx, Tensor out, Tensor x, Tensor y, Tensor w, float eps, float y_scale,
                  float w_offset, Tensor x_in) {
  const char* op = "add_rms_norm";
  const bool gpu = on_cuda(op, {&out, &x, &y, &w, &x_in});
  need_rows(op, "x", x, gpu);
  need_rows(op, "y", y, gpu);
  need_rows(op, "out", out, gpu);
  need_same_shape(op, "x", x, "y", y);
  need_same_shape(op, "out", out, "x", x);
  need_float(op, "w", w);
  need_vector(op, "w", w, -1);
  if (w.shape[0] != x.dim(-1)) fail(op, desc("x", x) + " and " + desc("w", w) + " disagree on d");
  if (out.data == x.data || out.data == y.data) fail(op, desc("out", out) + " must not alias x or y");
  if (!x_in.empty()) {
    need_rows(op, "x_in", x_in, gpu);
    need_same_shape(op, "x_in", x_in, "x", x);
    if (x_in.dtype != x.dtype || as_rows(x_in).stride != as_rows(x).stride)
      fail(op, desc("x_in", x_in) + " must have the dtype and row stride of " + desc("x", x));
  }
  const bool copy_in = !x_in.empty() && x_in.data != x.data;  // else in place
  if (copy_in && rows_overlap(x_in, x)) fail(op, desc("x_in", x_in) + " overlaps " + desc("x", x));
  if (gpu) return cuda_route::add_rms_norm(ctx, out, x, y, w, eps, y_scale, w_offset, copy_in ? x_in : x);
  if (copy_in) {  // x = x_in, row by row (same dtype and stride)
    const Rows xi = as_rows(x_in), xo = as_rows(x);
    const size_t row_bytes = static_cast<size_t>(xo.n_cols) * dtype_size(xo.dtype);
    for (int64_t r = 0; r < xo.n_rows; ++r) std::memcpy(xo.row<char>(r), xi.row<char>(r), row_bytes);
  }
  add_scaled(ctx, x, y, y_scale);
  rms_norm(ctx, out, x, w, eps, w_offset);
}

void scale(Context& ctx, Tensor x, float s) {
  const char* op = "scale";
  const bool gpu = on_cuda(op, {&x});
  need_rows(op, "x", x, gpu);
  if (gpu) return cuda_route::scale(ctx, x, s);
  use_ref() ? ref::scale(x, s) : cpu::scale(pool_of(ctx), x, s);
}

void linear(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor bias) {
  const char* op = "linear";
  const bool gpu = on_cuda(op, {&out, &x, &w, &bias});
  need_rows(op, "x", x, gpu);
  need_rows(op, "out", out, gpu);
  need_float(op, "w", w);
  need_ndim(op, "w", w, 2);
  if (!rows_ok(w)) fail(op, desc("w", w) + " must have a contiguous last dim");
  need_data(op, "w", w);
  if (x.dim(-1) != w.shape[1]) fail(op, desc("x", x) + " and " + desc("w", w) + " disagree on k");
  if (out.dim(-1) != w.shape[0]) fail(op, desc("out", out) + " and " + desc("w", w) + " disagree on n");
  if (as_rows(out).n_rows != as_rows(x).n_rows)
    fail(op, desc("out", out) + " and " + desc("x", x) + " disagree on m");
  if (!bias.empty()) {
    need_float(op, "bias", bias);
    need_vector(op, "bias", bias, w.shape[0]);
  }
  if (gpu) return cuda_route::linear(ctx, out, x, w, bias);
  use_ref() ? ref::linear(out, x, w, bias) : cpu::linear(pool_of(ctx), out, x, w, bias);
}

void rope(Context& ctx, Tensor x, Tensor positions, const RopeParams& p) {
  const char* op = "rope";
  const bool gpu = on_cuda(op, {&x, &positions});
  need_heads(op, "x", x, gpu);
  need_dtype(op, "positions", positions, DType::kI32);
  need_vector(op, "positions", positions, x.shape[0]);
  if (p.inv_freq == nullptr || p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > x.shape[2])
    fail(op, strfmt("rotary_dim %d must be even, > 0 and <= head_dim of ", p.rotary_dim) + desc("x", x) +
                 (p.inv_freq ? "" : ", and inv_freq must be set"));
  if (gpu && p.rotary_dim > cuda::kMaxRotaryDim)
    fail(op, strfmt("rotary_dim %d is above the CUDA limit %d", p.rotary_dim, cuda::kMaxRotaryDim));
  if (gpu) return cuda_route::rope(ctx, x, positions, p);
  use_ref() ? ref::rope(x, positions, p) : cpu::rope(pool_of(ctx), x, positions, p);
}

void kv_write(Context& ctx, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  const char* op = "kv_write";
  const bool gpu = on_cuda(op, {&cache.k, &cache.v, &cache.k_params, &cache.v_params, &k, &v, &slot_mapping});
  need_cache(op, cache);
  need_heads(op, "k", k, gpu);
  need_heads(op, "v", v, gpu);
  need_same_shape(op, "k", k, "v", v);
  if (k.shape[1] != cache.k.shape[2] || k.shape[2] != cache.head_dim())
    fail(op, desc("k", k) + " and " + desc("cache.k", cache.k) + " disagree on n_kv_heads or head_dim");
  need_dtype(op, "slot_mapping", slot_mapping, DType::kI64);
  need_vector(op, "slot_mapping", slot_mapping, k.shape[0]);
  if (gpu) return cuda_route::kv_write(ctx, cache, k, v, slot_mapping);
  const int64_t n_slots = cache.k.shape[0] * cache.k.shape[1];
  const int64_t* slots = slot_mapping.ptr<int64_t>();
  for (int64_t t = 0; t < k.shape[0]; ++t)
    if (slots[t] >= n_slots)
      fail(op, strfmt("slot %lld of token %lld is past the end of ", (long long)slots[t], (long long)t) +
                   desc("cache.k", cache.k));
  use_ref() ? ref::kv_write(cache, k, v, slot_mapping)
            : cpu::kv_write(pool_of(ctx), cache, k, v, slot_mapping);
}

namespace {

// Every block a query of tokens [t0, t1) (one sequence) can see must be a valid block id.
void check_visible_blocks(const char* op, const PagedKv& cache, const AttentionMeta& meta, int sliding_window,
                          int64_t t0, int64_t t1) {
  const int32_t* positions = meta.positions.ptr<int32_t>();
  const int64_t seq = meta.seq_index.ptr<int32_t>()[t0], block_size = cache.k.shape[1];
  int64_t lo = positions[t0], hi = positions[t0];
  for (int64_t t = t0; t < t1; ++t) {
    if (positions[t] < 0) fail(op, strfmt("token %lld has negative position %d", (long long)t, positions[t]));
    const int64_t first = first_visible(positions[t], sliding_window);
    lo = first < lo ? first : lo;
    hi = positions[t] > hi ? positions[t] : hi;
  }
  if (hi / block_size >= meta.block_tables.shape[1])
    fail(op, strfmt("position %lld of sequence %lld is past the end of ", (long long)hi, (long long)seq) +
                 desc("block_tables", meta.block_tables));
  const int32_t* table = meta.block_tables.ptr<int32_t>() + seq * meta.block_tables.strides[0];
  for (int64_t b = lo / block_size; b <= hi / block_size; ++b)
    if (table[b] < 0 || table[b] >= cache.k.shape[0])
      fail(op, strfmt("sequence %lld maps visible block %lld to %d, outside ", (long long)seq, (long long)b,
                      table[b]) +
                   desc("cache.k", cache.k));
}

// Dtypes and shapes always; the index contents only on the CPU (on CUDA they live on the device).
void check_attention_meta(const char* op, const Tensor& q, const PagedKv& cache, const AttentionMeta& meta,
                          const AttentionParams& p, bool gpu) {
  const int64_t n_tokens = q.shape[0];
  need_dtype(op, "positions", meta.positions, DType::kI32);
  need_vector(op, "positions", meta.positions, n_tokens);
  need_dtype(op, "seq_index", meta.seq_index, DType::kI32);
  need_vector(op, "seq_index", meta.seq_index, n_tokens);
  need_dtype(op, "block_tables", meta.block_tables, DType::kI32);
  need_ndim(op, "block_tables", meta.block_tables, 2);
  if (!rows_ok(meta.block_tables))
    fail(op, desc("block_tables", meta.block_tables) + " must have contiguous rows");
  need_data(op, "block_tables", meta.block_tables);
  if (p.sliding_window < 0 || !(p.softcap >= 0.0f))
    fail(op, strfmt("sliding_window %d and softcap %g must be >= 0", p.sliding_window, p.softcap));
  if (gpu) return;
  const int32_t* seq = meta.seq_index.ptr<int32_t>();
  for (int64_t t0 = 0, t1; t0 < n_tokens; t0 = t1) {  // runs of tokens of one sequence
    if (seq[t0] < 0 || seq[t0] >= meta.block_tables.shape[0])
      fail(op, strfmt("seq_index %d of token %lld is outside ", seq[t0], (long long)t0) +
                   desc("block_tables", meta.block_tables));
    for (t1 = t0 + 1; t1 < n_tokens && seq[t1] == seq[t0];) ++t1;
    check_visible_blocks(op, cache, meta, p.sliding_window, t0, t1);
  }
}

}  // namespace

void paged_attention(Context& ctx, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p) {
  const char* op = "paged_attention";
  const bool gpu = on_cuda(op, {&out, &q, &cache.k, &cache.v, &cache.k_params, &cache.v_params, &meta.positions,
                                &meta.seq_index, &meta.block_tables});
  need_cache(op, cache);
  need_heads(op, "q", q, gpu);
  need_heads(op, "out", out, gpu);
  need_same_shape(op, "out", out, "q", q);
  if (out.data == q.data && q.numel() > 0) fail(op, desc("out", out) + " must not alias q");
  if (q.shape[2] != cache.head_dim() || cache.k.shape[2] < 1 || q.shape[1] % cache.k.shape[2] != 0)
    fail(op, desc("q", q) + " and " + desc("cache.k", cache.k) +
                 " disagree on head_dim or n_heads is not a multiple of n_kv_heads");
  check_attention_meta(op, q, cache, meta, p, gpu);
  if (gpu && q.shape[2] > cuda::kMaxHeadDim)
    fail(op, desc("q", q) + strfmt(": head_dim is above the CUDA limit %d", cuda::kMaxHeadDim));
  if (gpu) return cuda_route::paged_attention(ctx, out, q, cache, meta, p);
  use_ref() ? ref::paged_attention(out, q, cache, meta, p)
            : cpu::paged_attention(pool_of(ctx), out, q, cache, meta, p);
}

void silu_mul(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  const char* op = "silu_mul";
  const bool gpu = on_cuda(op, {&out, &gate, &up});
  need_rows(op, "out", out, gpu);
  need_rows(op, "gate", gate, gpu);
  need_rows(op, "up", up, gpu);
  need_same_shape(op, "gate", gate, "up", up);
  need_same_shape(op, "out", out, "gate", gate);
  if (gpu) return cuda_route::silu_mul(ctx, out, gate, up);
  use_ref() ? ref::silu_mul(out, gate, up) : cpu::silu_mul(pool_of(ctx), out, gate, up);
}

void gelu_tanh_mul(Context& ctx, Tensor out, Tensor gate, Tensor up) {
  const char* op = "gelu_tanh_mul";
  const bool gpu = on_cuda(op, {&out, &gate, &up});
  need_rows(op, "out", out, gpu);
  need_rows(op, "gate", gate, gpu);
  need_rows(op, "up", up, gpu);
  need_same_shape(op, "gate", gate, "up", up);
  need_same_shape(op, "out", out, "gate", gate);
  if (gpu) return cuda_route::gelu_tanh_mul(ctx, out, gate, up);
  use_ref() ? ref::gelu_tanh_mul(out, gate, up) : cpu::gelu_tanh_mul(pool_of(ctx), out, gate, up);
}

void softcap(Context& ctx, Tensor x, float cap) {
  const char* op = "softcap";
  const bool gpu = on_cuda(op, {&x});
  need_rows(op, "x", x, gpu);
  if (!(cap > 0.0f) || !std::isfinite(cap)) fail(op, strfmt("cap %g must be finite and > 0", cap));
  if (gpu) return cuda_route::softcap(ctx, x, cap);
  use_ref() ? ref::softcap(x, cap) : cpu::softcap(pool_of(ctx), x, cap);
}

void softmax(Context& ctx, Tensor x) {
  const char* op = "softmax";
  const bool gpu = on_cuda(op, {&x});
  need_rows(op, "x", x, gpu);
  if (gpu) return cuda_route::softmax(ctx, x);
  use_ref() ? ref::softmax(x) : cpu::softmax(pool_of(ctx), x);
}

void argmax(Context& ctx, Tensor out, Tensor x, int32_t* host_out) {
  const char* op = "argmax";
  const bool gpu = on_cuda(op, {&out, &x});
  need_rows(op, "x", x, gpu);
  if (x.dim(-1) < 1) fail(op, desc("x", x) + " has empty rows");
  need_dtype(op, "out", out, DType::kI32);
  need_vector(op, "out", out, as_rows(x).n_rows);
  if (gpu) return cuda_route::argmax(ctx, out, x, host_out);
  use_ref() ? ref::argmax(out, x) : cpu::argmax(pool_of(ctx), out, x);
  if (host_out != nullptr) std::copy_n(out.ptr<int32_t>(), out.numel(), host_out);
}

void sample(Context& ctx, Tensor out, Tensor x, std::span<const SampleSpec> rows) {
  const char* op = "sample";
  const bool gpu = on_cuda(op, {&out, &x});
  need_rows(op, "x", x, gpu);
  need_dtype(op, "x", x, DType::kF32);
  if (x.dim(-1) < 1) fail(op, desc("x", x) + " has empty rows");
  need_dtype(op, "out", out, DType::kI32);
  const int64_t n_rows = as_rows(x).n_rows;
  need_vector(op, "out", out, n_rows);
  if (static_cast<int64_t>(rows.size()) != n_rows)
    fail(op, strfmt("%zu sampling specs for %lld rows", rows.size(), (long long)n_rows));
  for (const SampleSpec& r : rows) {
    if (!(r.temperature > 0.0f) || !std::isfinite(r.temperature) || r.top_k < 0 || r.top_k == 1)
      fail(op, strfmt("temperature %g, top_k %d: greedy rows take argmax (here temperature > 0, top_k != 1)",
                      r.temperature, r.top_k));
    const bool p_ok = r.top_p > 0.0f && r.top_p <= 1.0f, min_p_ok = r.min_p >= 0.0f && r.min_p <= 1.0f;
    if (!p_ok || !min_p_ok || !(r.u >= 0.0 && r.u < 1.0))
      fail(op, strfmt("top_p %g must be in (0, 1], min_p %g in [0, 1], u %g in [0, 1)", r.top_p, r.min_p,
                      r.u));
  }
  if (gpu) return cuda_route::sample(ctx, out, x, rows);
  ref::sample(out, x, rows);
}

void gather_rows(Context& ctx, Tensor out, Tensor x, Tensor rows) {
  const char* op = "gather_rows";
  const bool gpu = on_cuda(op, {&out, &x, &rows});
  need_rows(op, "out", out, gpu);
  need_ndim(op, "out", out, 2);
  need_rows(op, "x", x, gpu);
  need_ndim(op, "x", x, 2);
  if (out.shape[1] != x.shape[1]) fail(op, desc("out", out) + " and " + desc("x", x) + " disagree on d");
  need_dtype(op, "rows", rows, DType::kI32);
  need_vector(op, "rows", rows, out.shape[0]);
  if (gpu) return cuda_route::gather_rows(ctx, out, x, rows);
  const int32_t* r = rows.ptr<int32_t>();
  for (int64_t i = 0; i < rows.shape[0]; ++i)
    if (r[i] < 0 || r[i] >= x.shape[0])
      fail(op, strfmt("row %d at %lld is out of range for ", r[i], (long long)i) + desc("x", x));
  use_ref() ? ref::gather_rows(out, x, rows) : cpu::gather_rows(pool_of(ctx), out, x, rows);
}

}  // namespace bunsen::kernels
