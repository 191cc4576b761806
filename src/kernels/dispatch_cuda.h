// The CUDA half of dispatch.cpp: ops on tensors that already passed ops.h's checks (with the CUDA
// dtype rules) are turned into cuda_ops.h's plain views and run on ctx.cuda_stream.
// Not validating beyond the current-device check, and without CUDA not reachable (dispatch.cpp rejects
// CUDA tensors first); internal to kernels/. Invariant: no CUDA headers here.
#pragma once
#include "kernels/ops.h"

#ifdef BUNSEN_HAVE_CUDA
#include <functional>

namespace bunsen::kernels::cuda {
struct DevAddNorm;
struct DevCache;
}  // namespace bunsen::kernels::cuda
#endif

namespace bunsen::kernels::cuda_route {

void embedding(Context& ctx, Tensor out, Tensor table, Tensor ids, float scale);
void rms_norm(Context& ctx, Tensor out, Tensor x, Tensor w, float eps, float w_offset);
void add_scaled(Context& ctx, Tensor x, Tensor y, float scale);
// x_in: the values x is computed from (x itself for the in-place op).
void add_rms_norm(Context& ctx, Tensor out, Tensor x, Tensor y, Tensor w, float eps, float y_scale,
                  float w_offset, Tensor x_in);
void scale(Context& ctx, Tensor x, float s);
void linear(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor bias);
void rope(Context& ctx, Tensor x, Tensor positions, const RopeParams& p);
void kv_write(Context& ctx, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping);
void paged_attention(Context& ctx, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p);
void silu_mul(Context& ctx, Tensor out, Tensor gate, Tensor up);
void gelu_tanh_mul(Context& ctx, Tensor out, Tensor gate, Tensor up);
void softcap(Context& ctx, Tensor x, float cap);
void softmax(Context& ctx, Tensor x);
void argmax(Context& ctx, Tensor out, Tensor x, int32_t* host_out);
void sample(Context& ctx, Tensor out, Tensor x, std::span<const SampleSpec> rows);
void gather_rows(Context& ctx, Tensor out, Tensor x, Tensor rows);

#ifdef BUNSEN_HAVE_CUDA
// The cuda_ops.h view of a paged cache (with the codes' params for quantized layers); dispatch_fused.cpp's
// fused ops use it too. Callers include kernels/cuda/cuda_ops.h for the complete type.
cuda::DevCache cache_view(const PagedKv& c);

// A projection's pre (ops.h AddRmsNorm) on CUDA, checked against x (dispatch_fused.cpp): true when fused(its
// device form) ran the projection with the norm in its GEMV prologue (fused_norm_enabled() and the launch
// applies); otherwise add_rms_norm into x, and false.
bool pre_in_prologue(Context& ctx, const char* op, Tensor x, const AddRmsNorm& p,
                     const std::function<bool(const cuda::DevAddNorm&)>& fused);
#endif

}  // namespace bunsen::kernels::cuda_route
