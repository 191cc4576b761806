// Raw-pointer inner loops of paged attention, one pair per ISA file (attention_avx512.cpp,
// attention_avx2.cpp, attention.cpp for the baseline). Not an API: only cpu/attention.cpp calls them,
// once per (chunk of keys, query head). Invariants: cache rows are head_dim contiguous f32 or bf16
// elements; bf16 is widened exactly; sums are f32.
#pragma once
#include <cstdint>

namespace bunsen::kernels::cpu {

// s[j] = q · k[j] for j < n.   q [head_dim] f32; k[j] -> [head_dim] f32|bf16.
using AttnDotsFn = void (*)(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16,
                            float* s);
// acc = acc * alpha + sum_j p[j] * v[j].   acc [head_dim] f32; v[j] -> [head_dim] f32|bf16.
using AttnAccumulateFn = void (*)(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                                  int64_t head_dim, bool bf16);

// s[j] = exp(s[j] - max) for j < n (s[j] <= max); returns the sum of the new s[j].
using AttnExpSumFn = float (*)(float* s, int64_t n, float max);

void attn_dots_avx512(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16, float* s);
void attn_accumulate_avx512(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                            int64_t head_dim, bool bf16);
float attn_exp_sum_avx512(float* s, int64_t n, float max);
void attn_dots_avx2(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16, float* s);
void attn_accumulate_avx2(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                          int64_t head_dim, bool bf16);
float attn_exp_sum_avx2(float* s, int64_t n, float max);

}  // namespace bunsen::kernels::cpu
