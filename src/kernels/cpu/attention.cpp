// cpu::paged_attention: one task per (token, kv head, group of query heads); keys are walked in chunks
// of kChunk through the block table with an online (running max) softmax, so no scores array grows with
// the context and nothing is allocated. Heads sharing a kv head are processed chunk by chunk together so
// each K/V chunk is read from memory once and reused from L1. The per-ISA inner loops come from
// attention_kernels.h; the baseline versions live here. A quantized cache (PagedKv::bits > 0) is
// dequantized one chunk of kChunk rows at a time into thread-local scratch (never the whole cache), with
// ref's kv_dequantize_row, so the inner loops see f32 rows. Not validating. Invariant: out must not alias q.
#include <cmath>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/kv_quant.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kChunk = 32;     // keys per online-softmax step
constexpr int64_t kMaxHeads = 16;  // query heads per task (stack state)

void dots_scalar(const float* q, const void* const* k, int64_t n, int64_t head_dim, bool bf16, float* s) {
  for (int64_t j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) acc += q[d] * load_f(k[j], bf16 ? DType::kBF16 : DType::kF32, d);
    s[j] = acc;
  }
}

void accumulate_scalar(float* acc, float alpha, const float* p, const void* const* v, int64_t n,
                       int64_t head_dim, bool bf16) {
  for (int64_t d = 0; d < head_dim; ++d) acc[d] *= alpha;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < head_dim; ++d)
      acc[d] += p[j] * load_f(v[j], bf16 ? DType::kBF16 : DType::kF32, d);
}

float exp_sum_scalar(float* s, int64_t n, float max) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  return sum;
}

// Quantized cache: row (block, offset, kvh) of K and V dequantized into dst [2, head_dim] f32; the row
// pointers are redirected there.
void dequantize_rows(const PagedKv& cache, int64_t block, int64_t offset, int64_t kvh, float* dst,
                     const void** k_row, const void** v_row) {
  const int64_t head_dim = cache.head_dim();
  kv_dequantize_row(static_cast<const uint8_t*>(*k_row),
                    reinterpret_cast<const float*>(kv_row(cache.k_params, block, offset, kvh)), head_dim, cache.bits,
                    cache.group_size, dst, cache.fp8);
  kv_dequantize_row(static_cast<const uint8_t*>(*v_row),
                    reinterpret_cast<const float*>(kv_row(cache.v_params, block, offset, kvh)), head_dim, cache.bits,
                    cache.group_size, dst + head_dim, cache.fp8);
  *k_row = dst;
  *v_row = dst + head_dim;
}

struct Job {
  Tensor out, q;  // [n_tokens, n_heads, head_dim] f32
  const PagedKv* cache;
  const AttentionMeta* meta;
  const AttentionParams* p;
  int64_t group;           // query heads per kv head
  int64_t heads_per_task;  // <= min(group, kMaxHeads)
  AttnDotsFn dots;
  AttnAccumulateFn accumulate;
  AttnExpSumFn exp_sum;
};

// Online softmax over all visible keys of token t for query heads [h0, h1) of kv head kvh.
void attend(const Job& job, int64_t t, int64_t kvh, int64_t h0, int64_t h1) {
  const Tensor& k_cache = job.cache->k;
  const Tensor& v_cache = job.cache->v;
  const int64_t head_dim = job.q.shape[2], block_size = k_cache.shape[1], nh = h1 - h0;
  const bool bf16 = k_cache.dtype == DType::kBF16;
  const int64_t pos = job.meta->positions.ptr<int32_t>()[t];
  const int32_t* table = job.meta->block_tables.ptr<int32_t>() +
                         job.meta->seq_index.ptr<int32_t>()[t] * job.meta->block_tables.strides[0];
  float run_max[kMaxHeads], run_sum[kMaxHeads];
  for (int64_t h = 0; h < nh; ++h) {
    run_max[h] = -INFINITY;
    run_sum[h] = 0.0f;
    float* o = job.out.ptr<float>() + t * job.out.strides[0] + (h0 + h) * job.out.strides[1];
    for (int64_t d = 0; d < head_dim; ++d) o[d] = 0.0f;
  }
  const void* k_rows[kChunk];
  const void* v_rows[kChunk];
  float s[kChunk];
  const PagedKv& cache = *job.cache;
  float* deq = cache.quantized() ? thread_scratch(kScratchAttention, static_cast<size_t>(2 * kChunk * head_dim))
                                 : nullptr;
  for (int64_t c = first_visible(pos, job.p->sliding_window); c <= pos; c += kChunk) {
    const int64_t n = pos + 1 - c < kChunk ? pos + 1 - c : kChunk;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t block = table[(c + j) / block_size], offset = (c + j) % block_size;
      k_rows[j] = kv_row(k_cache, block, offset, kvh);
      v_rows[j] = kv_row(v_cache, block, offset, kvh);
      if (deq != nullptr) dequantize_rows(cache, block, offset, kvh, deq + 2 * j * head_dim, &k_rows[j], &v_rows[j]);
    }
    for (int64_t h = 0; h < nh; ++h) {
      const float* q = job.q.ptr<float>() + t * job.q.strides[0] + (h0 + h) * job.q.strides[1];
      float* o = job.out.ptr<float>() + t * job.out.strides[0] + (h0 + h) * job.out.strides[1];
      job.dots(q, k_rows, n, head_dim, bf16, s);
      float chunk_max = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        s[j] *= job.p->scale;
        if (job.p->softcap > 0.0f) s[j] = job.p->softcap * std::tanh(s[j] / job.p->softcap);
        chunk_max = s[j] > chunk_max ? s[j] : chunk_max;
      }
      const float new_max = chunk_max > run_max[h] ? chunk_max : run_max[h];
      const float alpha = std::exp(run_max[h] - new_max);
      const float sum = job.exp_sum(s, n, new_max);
      job.accumulate(o, alpha, s, v_rows, n, head_dim, bf16);
      run_sum[h] = run_sum[h] * alpha + sum;
      run_max[h] = new_max;
    }
  }
  for (int64_t h = 0; h < nh; ++h) {
    float* o = job.out.ptr<float>() + t * job.out.strides[0] + (h0 + h) * job.out.strides[1];
    const float inv = 1.0f / run_sum[h];
    for (int64_t d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace

void paged_attention(ThreadPool& pool, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p) {
  const int64_t n_tokens = q.shape[0], n_kv_heads = cache.k.shape[2];
  if (n_tokens == 0 || q.shape[1] == 0) return;
  Job job{out,           q, &cache, &meta, &p, q.shape[1] / n_kv_heads, 0, dots_scalar, accumulate_scalar,
          exp_sum_scalar};
  if (active_isa() == Isa::kAvx512) {
    job.dots = attn_dots_avx512;
    job.accumulate = attn_accumulate_avx512;
    job.exp_sum = attn_exp_sum_avx512;
  } else if (active_isa() == Isa::kAvx2) {
    job.dots = attn_dots_avx2;
    job.accumulate = attn_accumulate_avx2;
    job.exp_sum = attn_exp_sum_avx2;
  }
  // Split head groups only as far as needed to give every thread work (and to fit the stack state).
  const int64_t coarse = n_tokens * n_kv_heads;
  int64_t splits = (2 * pool.size() + coarse - 1) / coarse;
  splits = splits < 1 ? 1 : splits > job.group ? job.group : splits;
  job.heads_per_task = (job.group + splits - 1) / splits;
  if (job.heads_per_task > kMaxHeads) job.heads_per_task = kMaxHeads;
  const int64_t per_kv = (job.group + job.heads_per_task - 1) / job.heads_per_task;
  pool.parallel_for(coarse * per_kv, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / (n_kv_heads * per_kv), kvh = task / per_kv % n_kv_heads;
      const int64_t h0 = kvh * job.group + task % per_kv * job.heads_per_task;
      const int64_t h1 =
          h0 + job.heads_per_task < (kvh + 1) * job.group ? h0 + job.heads_per_task : (kvh + 1) * job.group;
      attend(job, t, kvh, h0, h1);
    }
  });
}

}  // namespace bunsen::kernels::cpu
