// Naive single-threaded reference implementations of every op in ops.h: plain loops, f32 accumulation
// (double where noted), weights converted element by element. They are the truth the fast paths and
// the CUDA backend are tested against, so they stay obviously correct rather than fast.
// Not validating: callers (dispatch.cpp, tests) pass tensors that already passed ops.h's checks.
#pragma once
#include "kernels/ops.h"

namespace bunsen::kernels::ref {

void embedding(Tensor out, Tensor table, Tensor ids, float scale);
void rms_norm(Tensor out, Tensor x, Tensor w, float eps, float w_offset);
void add_scaled(Tensor x, Tensor y, float scale);
void scale(Tensor x, float s);
void linear(Tensor out, Tensor x, Tensor w, Tensor bias);
void rope(Tensor x, Tensor positions, const RopeParams& p);
void kv_write(const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping);
void paged_attention(Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p);
void silu_mul(Tensor out, Tensor gate, Tensor up);
void gelu_tanh_mul(Tensor out, Tensor gate, Tensor up);
void softcap(Tensor x, float cap);
void softmax(Tensor x);
void argmax(Tensor out, Tensor x);
void sample(Tensor out, Tensor x, std::span<const SampleSpec> rows);  // ref_sample.cpp
void gather_rows(Tensor out, Tensor x, Tensor rows);
void dequantize(Tensor out, const QuantWeight& w);
void embedding_q(Tensor out, const QuantWeight& table, Tensor ids, float scale);
void linear_q(Tensor out, Tensor x, const QuantWeight& w, Tensor bias);
void moe_route(Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p);
void moe_experts(Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& e);

}  // namespace bunsen::kernels::ref
