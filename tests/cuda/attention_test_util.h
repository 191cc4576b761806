// Paged-attention test batches for the CUDA tests: a Scenario (shapes, sequence lengths, new tokens,
// params) becomes a random paged cache with shuffled block tables, per-token metadata and queries (Batch),
// its device copy (DeviceBatch), and check_attention runs ops.h's paged_attention against kernels/ref.
// Not a test by itself. Invariant: device outputs start as random garbage, never zeros.
#pragma once
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/attention_decode.cuh"

namespace bunsen::kernels::test {

struct Scenario {
  int64_t n_heads = 4, n_kv_heads = 2, head_dim = 64, block_size = 4;
  DType cache_dtype = DType::kF32, q_dtype = DType::kF32, out_dtype = DType::kF32;
  std::vector<int64_t> seq_lens;    // context length of each sequence after this step
  std::vector<int64_t> new_tokens;  // trailing tokens of each sequence that are queries this step
  AttentionParams params{};
  bool release_out_of_window = false;  // mark blocks no query can see as -1 (as the scheduler does)
  bool interleave = false;             // tokens of different sequences alternate in the batch
};

// Host batch: a random paged cache, shuffled block tables, per-token metadata and queries.
struct Batch {
  OwnedTensor k_cache, v_cache, block_tables, positions, seq_index;
  HostPair q;
  PagedKv cache() const { return {k_cache.tensor, v_cache.tensor}; }
  AttentionMeta meta() const { return {positions.tensor, seq_index.tensor, block_tables.tensor, {}}; }
};

// A batch over sequences of `lens` tokens whose last `fresh[i]` tokens are new (queries), 2 KV heads of
// `head_dim` with `group` query heads each, 16-token blocks, bf16 q, bf16 cache and output (callers change
// dtypes as they need).
inline Scenario batch_scenario(int64_t group, int64_t head_dim, std::vector<int64_t> lens, std::vector<int64_t> fresh) {
  Scenario s;
  s.n_kv_heads = 2;
  s.n_heads = 2 * group;
  s.head_dim = head_dim;
  s.block_size = 16;
  s.cache_dtype = DType::kBF16;
  s.q_dtype = DType::kBF16;
  s.out_dtype = DType::kBF16;
  s.seq_lens = std::move(lens);
  s.new_tokens = std::move(fresh);
  s.params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return s;
}

// A decode batch: one new token per sequence.
inline Scenario decode_scenario(int64_t group, int64_t head_dim, std::vector<int64_t> lens) {
  std::vector<int64_t> fresh(lens.size(), 1);
  return batch_scenario(group, head_dim, std::move(lens), std::move(fresh));
}

inline Batch make_batch(const Scenario& s, std::mt19937& rng) {
  Batch b;
  const int64_t n_seqs = static_cast<int64_t>(s.seq_lens.size());
  int64_t max_blocks = 0, n_blocks = 3;  // a few blocks nobody uses
  for (int64_t len : s.seq_lens) {
    max_blocks = std::max(max_blocks, (len + s.block_size - 1) / s.block_size + 1);
    n_blocks += (len + s.block_size - 1) / s.block_size;
  }
  const std::initializer_list<int64_t> cache_shape = {n_blocks, s.block_size, s.n_kv_heads, s.head_dim};
  b.k_cache = random_tensor(s.cache_dtype, cache_shape, rng, -3.0f, 3.0f);
  b.v_cache = random_tensor(s.cache_dtype, cache_shape, rng, -3.0f, 3.0f);
  b.block_tables = OwnedTensor::make(DType::kI32, {n_seqs, max_blocks});
  std::fill_n(b.block_tables.tensor.ptr<int32_t>(), n_seqs * max_blocks, -1);
  std::vector<int32_t> free_blocks(static_cast<size_t>(n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next = 0;
  std::vector<std::pair<int32_t, int32_t>> tokens;  // (seq, position)
  for (int64_t i = 0; i < n_seqs; ++i) {
    int32_t* table = b.block_tables.tensor.ptr<int32_t>() + i * max_blocks;
    for (int64_t blk = 0; blk * s.block_size < s.seq_lens[i]; ++blk) table[blk] = free_blocks.at(next++);
    for (int64_t p = s.seq_lens[i] - s.new_tokens[i]; p < s.seq_lens[i]; ++p)
      tokens.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(p));
    if (s.release_out_of_window && s.params.sliding_window > 0) {
      const int64_t first_seen =
          std::max<int64_t>(0, s.seq_lens[i] - s.new_tokens[i] - s.params.sliding_window + 1);
      for (int64_t blk = 0; blk < first_seen / s.block_size; ++blk) table[blk] = -1;
    }
  }
  if (s.interleave)  // round-robin over sequences: every tile of a prefill mixes them
    std::stable_sort(tokens.begin(), tokens.end(), [&](auto a, auto c) {
      const int64_t ra = a.second - (s.seq_lens[a.first] - s.new_tokens[a.first]);
      const int64_t rc = c.second - (s.seq_lens[c.first] - s.new_tokens[c.first]);
      return ra < rc;
    });
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  b.positions = OwnedTensor::make(DType::kI32, {n_tokens});
  b.seq_index = OwnedTensor::make(DType::kI32, {n_tokens});
  for (int64_t t = 0; t < n_tokens; ++t) {
    b.seq_index.tensor.ptr<int32_t>()[t] = tokens[t].first;
    b.positions.tensor.ptr<int32_t>()[t] = tokens[t].second;
  }
  b.q = random_pair(s.q_dtype, {n_tokens, s.n_heads, s.head_dim}, rng, -1.0f, 1.0f);
  return b;
}

// The batch on the device, and an output buffer filled with garbage.
struct DeviceBatch {
  DeviceTensor k, v, tables, positions, seq_index, q, out;
  PagedKv cache() const { return {k.tensor, v.tensor}; }
  AttentionMeta meta() const { return {positions.tensor, seq_index.tensor, tables.tensor, {}}; }
};

// The reference output of the batch's queries (kernels/ref, f32): [n_tokens, n_heads, head_dim].
inline OwnedTensor reference_out(const Batch& b, const Scenario& s) {
  const Tensor& q = b.q.f32.tensor;
  OwnedTensor want = OwnedTensor::make(DType::kF32, {q.shape[0], q.shape[1], q.shape[2]});
  ref::paged_attention(want.tensor, q, b.cache(), b.meta(), s.params);
  return want;
}

inline DeviceBatch upload(const Batch& b, DType out_dtype, std::mt19937& rng) {
  DeviceBatch d;
  d.k = DeviceTensor::upload(b.k_cache.tensor);
  d.v = DeviceTensor::upload(b.v_cache.tensor);
  d.tables = DeviceTensor::upload(b.block_tables.tensor);
  d.positions = DeviceTensor::upload(b.positions.tensor);
  d.seq_index = DeviceTensor::upload(b.seq_index.tensor);
  d.q = DeviceTensor::upload(b.q.data.tensor);
  const Tensor& q = b.q.data.tensor;
  d.out = DeviceTensor::upload(random_tensor(out_dtype, {q.shape[0], q.shape[1], q.shape[2]}, rng).tensor);
  return d;
}

// The decode-attention testing switches a test fixture sets (flash decoding off; kernel variant, slice path,
// combine mode and packed-kernel mode as the cuda:: hooks take them) and puts back to the environment's choice.
inline void set_decode_switches(int variant, int path, int combine, int batched, int bulk = 0) {
  cuda::set_attention_flash_decode_for_testing(false);
  cuda::set_attention_decode_bulk_for_testing(bulk);
  cuda::set_attention_decode_variant_for_testing(variant);
  cuda::set_attention_decode_path_for_testing(path);
  cuda::set_attention_decode_combine_for_testing(combine);
  cuda::set_attention_decode_batched_for_testing(batched);
}
inline void reset_decode_switches() {
  if (cuda::device_count() == 0) return;
  cuda::set_attention_decode_batched_for_testing(0);
  cuda::set_attention_decode_bulk_for_testing(0);
  cuda::set_attention_decode_variant_for_testing(0);
  cuda::set_attention_decode_path_for_testing(0);
  cuda::set_attention_decode_combine_for_testing(0);
  cuda::set_attention_decode_quant_mma_for_testing(0);
}

inline void check_attention(Context& ctx, const Scenario& s, const std::string& what, uint32_t seed = 301) {
  std::mt19937 rng(seed);
  Batch b = make_batch(s, rng);
  const OwnedTensor want = reference_out(b, s);
  DeviceBatch d = upload(b, s.out_dtype, rng);
  paged_attention(ctx, d.out.tensor, d.q.tensor, d.cache(), d.meta(), s.params);
  expect_close(d.out.download().tensor, want.tensor, tolerance(s.out_dtype, 1e-4f), what);
}

}  // namespace bunsen::kernels::test
