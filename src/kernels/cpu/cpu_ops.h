// Fast CPU implementations of ops.h: threaded over a ThreadPool, with the hot loops (linear, attention)
// in per-ISA files chosen at run time (AVX-512 with BF16, AVX2+FMA+F16C, or a baseline x86-64 path).
// Not validating: dispatch.cpp checks dtypes and shapes first. Invariants: results match ref/ up to
// f32 summation order; no heap allocation per call in steady state (scratch is thread-local and only
// grows); the ISA level is process-wide and changes only through set_isa_for_testing().
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace bunsen::kernels::cpu {

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

Isa detected_isa();                 // best level this CPU supports
Isa active_isa();                   // level the kernels use now (detected_isa() unless forced)
bool isa_supported(Isa isa);        // this CPU can run `isa`
void set_isa_for_testing(Isa isa);  // throws Error("kernels", ...) when !isa_supported(isa)
const char* isa_name(Isa isa);      // "cpu-avx512", "cpu-avx2", "cpu-scalar"

void embedding(ThreadPool& pool, Tensor out, Tensor table, Tensor ids, float scale);
void rms_norm(ThreadPool& pool, Tensor out, Tensor x, Tensor w, float eps, float w_offset);
void add_scaled(ThreadPool& pool, Tensor x, Tensor y, float scale);
void scale(ThreadPool& pool, Tensor x, float s);
void linear(ThreadPool& pool, Tensor out, Tensor x, Tensor w, Tensor bias);
void rope(ThreadPool& pool, Tensor x, Tensor positions, const RopeParams& p);
void kv_write(ThreadPool& pool, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping);
void paged_attention(ThreadPool& pool, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p);
void silu_mul(ThreadPool& pool, Tensor out, Tensor gate, Tensor up);
void gelu_tanh_mul(ThreadPool& pool, Tensor out, Tensor gate, Tensor up);
void softcap(ThreadPool& pool, Tensor x, float cap);
void softmax(ThreadPool& pool, Tensor x);
void argmax(ThreadPool& pool, Tensor out, Tensor x);
void gather_rows(ThreadPool& pool, Tensor out, Tensor x, Tensor rows);
void dequantize(ThreadPool& pool, Tensor out, const QuantWeight& w);
void embedding_q(ThreadPool& pool, Tensor out, const QuantWeight& table, Tensor ids, float scale);
void linear_q(ThreadPool& pool, Tensor out, Tensor x, const QuantWeight& w, Tensor bias);
void moe_route(ThreadPool& pool, Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p);
void moe_experts(ThreadPool& pool, Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& e);

}  // namespace bunsen::kernels::cpu
