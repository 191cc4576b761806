// rope, kv_write and paged_attention: fast CPU paths against ref/ on varlen batches with shuffled
// block tables, GQA 1/2/8, sliding windows (with released blocks), softcap and bf16 caches on every
// ISA level; plus independent checks: rope against its formula, attention against a dense causal
// softmax computed here without any cache.
#include <algorithm>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

struct Scenario {
  int64_t n_heads = 4, n_kv_heads = 2, head_dim = 64, block_size = 4, n_blocks = 64;
  DType cache_dtype = DType::kF32;
  std::vector<int64_t> seq_lens;    // context length of each sequence after this step
  std::vector<int64_t> new_tokens;  // trailing tokens of each sequence that are queries this step
  AttentionParams params{};
  bool release_out_of_window = false;  // mark blocks no query can see as -1 (as the scheduler does)
};

// A paged cache filled through ref::kv_write from per-sequence K/V, shuffled block tables, queries.
struct Batch {
  OwnedTensor k_cache, v_cache, block_tables, positions, seq_index, slots, q;
  std::vector<OwnedTensor> keys, values;  // per sequence: [len, n_kv_heads, head_dim] f32
  PagedKv cache() const { return {k_cache.tensor, v_cache.tensor}; }
  AttentionMeta meta() const {
    return {positions.tensor, seq_index.tensor, block_tables.tensor, slots.tensor};
  }
};

Batch make_batch(const Scenario& s, std::mt19937& rng) {
  Batch b;
  const int64_t n_seqs = static_cast<int64_t>(s.seq_lens.size());
  b.k_cache =
      random_tensor(s.cache_dtype, {s.n_blocks, s.block_size, s.n_kv_heads, s.head_dim}, rng, -9.0f, 9.0f);
  b.v_cache =
      random_tensor(s.cache_dtype, {s.n_blocks, s.block_size, s.n_kv_heads, s.head_dim}, rng, -9.0f, 9.0f);
  int64_t max_blocks = 0;
  for (int64_t len : s.seq_lens)
    max_blocks = std::max(max_blocks, (len + s.block_size - 1) / s.block_size + 1);
  b.block_tables = OwnedTensor::make(DType::kI32, {n_seqs, max_blocks});
  std::fill_n(b.block_tables.tensor.ptr<int32_t>(), n_seqs * max_blocks, -1);
  std::vector<int32_t> free_blocks(static_cast<size_t>(s.n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next_block = 0;
  int64_t n_tokens = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    int32_t* table = b.block_tables.tensor.ptr<int32_t>() + i * max_blocks;
    const int64_t len = s.seq_lens[i];
    for (int64_t blk = 0; blk * s.block_size < len; ++blk) table[blk] = free_blocks.at(next_block++);
    b.keys.push_back(random_tensor(DType::kF32, {len, s.n_kv_heads, s.head_dim}, rng));
    b.values.push_back(random_tensor(DType::kF32, {len, s.n_kv_heads, s.head_dim}, rng));
    OwnedTensor slots = OwnedTensor::make(DType::kI64, {len});
    for (int64_t p = 0; p < len; ++p)
      slots.tensor.ptr<int64_t>()[p] = table[p / s.block_size] * s.block_size + p % s.block_size;
    ref::kv_write(b.cache(), b.keys.back().tensor, b.values.back().tensor, slots.tensor);
    n_tokens += s.new_tokens[i];
  }
  b.positions = OwnedTensor::make(DType::kI32, {n_tokens});
  b.seq_index = OwnedTensor::make(DType::kI32, {n_tokens});
  b.slots = OwnedTensor::make(DType::kI64, {n_tokens});
  int64_t t = 0;
  for (int64_t i = 0; i < n_seqs; ++i)
    for (int64_t p = s.seq_lens[i] - s.new_tokens[i]; p < s.seq_lens[i]; ++p, ++t) {
      b.positions.tensor.ptr<int32_t>()[t] = static_cast<int32_t>(p);
      b.seq_index.tensor.ptr<int32_t>()[t] = static_cast<int32_t>(i);
      b.slots.tensor.ptr<int64_t>()[t] = -1;  // already written above
    }
  if (s.release_out_of_window && s.params.sliding_window > 0)
    for (int64_t i = 0; i < n_seqs; ++i) {
      const int64_t first_query = s.seq_lens[i] - s.new_tokens[i];
      const int64_t first_seen = std::max<int64_t>(0, first_query - s.params.sliding_window + 1);
      for (int64_t blk = 0; blk < first_seen / s.block_size; ++blk)
        b.block_tables.tensor.ptr<int32_t>()[i * max_blocks + blk] = -1;
    }
  b.q = random_tensor(DType::kF32, {n_tokens, s.n_heads, s.head_dim}, rng, -2.0f, 2.0f);
  return b;
}

void check_attention(const Scenario& s, const std::string& what) {
  std::mt19937 rng(20);
  Batch b = make_batch(s, rng);
  OwnedTensor want = OwnedTensor::make(DType::kF32, {b.q.tensor.shape[0], s.n_heads, s.head_dim});
  ref::paged_attention(want.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
  ThreadPool pool(3);
  for_each_isa([&](cpu::Isa) {
    OwnedTensor got = random_tensor(DType::kF32, {b.q.tensor.shape[0], s.n_heads, s.head_dim}, rng);
    cpu::paged_attention(pool, got.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
    expect_close(got.tensor, want.tensor, 1e-5f, what);
  });
  Context ctx;  // the public entry point validates and routes to the same kernels
  OwnedTensor got = OwnedTensor::make(DType::kF32, {b.q.tensor.shape[0], s.n_heads, s.head_dim});
  paged_attention(ctx, got.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
  expect_close(got.tensor, want.tensor, 1e-5f, what + " (ops.h)");
}

TEST(PagedAttention, VarlenBatchMatchesReferenceForGqaRatios) {
  for (int64_t group : {1, 2, 8}) {
    Scenario s;
    s.n_kv_heads = 2;
    s.n_heads = 2 * group;
    s.seq_lens = {1, 37, 70, 5};
    s.new_tokens = {1, 6, 1, 5};  // decode, prefill chunk, decode, whole prompt
    s.params.scale = 0.125f;
    check_attention(s, strfmt("gqa %lld", (long long)group));
  }
}

TEST(PagedAttention, OddHeadDimsAndBlockSizes) {
  for (int64_t head_dim : {1, 40, 72, 128, 130})
    for (int64_t block_size : {1, 3, 16}) {
      Scenario s;
      s.n_heads = 6;
      s.n_kv_heads = 3;
      s.head_dim = head_dim;
      s.block_size = block_size;
      s.n_blocks = 200;
      s.seq_lens = {33, 2, 90};
      s.new_tokens = {2, 2, 3};
      s.params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      check_attention(s, strfmt("head_dim %lld block %lld", (long long)head_dim, (long long)block_size));
    }
}

TEST(PagedAttention, SlidingWindowSoftcapAndBf16Cache) {
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int window : {0, 1, 5, 20})
      for (float softcap : {0.0f, 5.0f}) {
        Scenario s;
        s.n_heads = 8;
        s.n_kv_heads = 1;
        s.cache_dtype = dt;
        s.seq_lens = {100, 23, 64};
        s.new_tokens = {1, 23, 4};
        s.params = {0.4f, window, softcap, {}};  // scale large enough for softcap to bite
        s.release_out_of_window = true;
        check_attention(s, strfmt("%s window %d softcap %g", dtype_name(dt), window, softcap));
      }
}

TEST(PagedAttention, LongContextDecodeAndManyThreads) {
  Scenario s;
  s.n_heads = 14;
  s.n_kv_heads = 2;
  s.block_size = 16;
  s.n_blocks = 200;
  s.cache_dtype = DType::kBF16;
  s.seq_lens = {3000};
  s.new_tokens = {1};
  s.params.scale = 0.125f;
  check_attention(s, "long context");
}

// Independent check: a dense causal softmax over the K/V a single sequence wrote, no cache involved.
TEST(PagedAttention, EqualsDenseCausalAttention) {
  for (int window : {0, 7})
    for (float softcap : {0.0f, 3.0f}) {
      Scenario s;
      s.n_heads = 4;
      s.n_kv_heads = 2;
      s.head_dim = 24;
      s.seq_lens = {45};
      s.new_tokens = {45};
      s.params = {0.3f, window, softcap, {}};
      std::mt19937 rng(21);
      Batch b = make_batch(s, rng);
      Context ctx;
      OwnedTensor got = OwnedTensor::make(DType::kF32, {45, 4, 24});
      paged_attention(ctx, got.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
      const float* q = b.q.tensor.ptr<float>();
      const float* k = b.keys[0].tensor.ptr<float>();
      const float* v = b.values[0].tensor.ptr<float>();
      for (int64_t i = 0; i < 45; ++i)
        for (int64_t h = 0; h < 4; ++h) {
          const int64_t kvh = h / 2;
          std::vector<double> p(45, 0.0);
          double mx = -1e300, sum = 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            if (window > 0 && i - j >= window) continue;
            double dot = 0.0;
            for (int64_t d = 0; d < 24; ++d)
              dot += double(q[(i * 4 + h) * 24 + d]) * k[(j * 2 + kvh) * 24 + d];
            dot *= s.params.scale;
            if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
            p[j] = dot;
            mx = std::max(mx, dot);
          }
          for (int64_t j = 0; j <= i; ++j) {
            if (window > 0 && i - j >= window) continue;
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          for (int64_t d = 0; d < 24; ++d) {
            double o = 0.0;
            for (int64_t j = 0; j <= i; ++j) o += p[j] / sum * v[(j * 2 + kvh) * 24 + d];
            ASSERT_NEAR(got.tensor.ptr<float>()[(i * 4 + h) * 24 + d], o, 2e-5)
                << "token " << i << " head " << h << " dim " << d << " window " << window << " softcap "
                << softcap;
          }
        }
    }
}

TEST(KvWrite, MatchesReferenceSkipsNegativeSlotsAndRoundsToBf16) {
  ThreadPool pool(3);
  std::mt19937 rng(22);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t n_tokens = 9, kvh = 2, hd = 33;
    // k and v are column slices of one fused [n_tokens, (4 + 2 + 2) heads * hd] projection output.
    OwnedTensor fused = random_tensor(DType::kF32, {n_tokens, 8 * hd}, rng);
    Tensor k = fused.tensor.slice(1, 4 * hd, 6 * hd), v = fused.tensor.slice(1, 6 * hd, 8 * hd);
    for (Tensor* t : {&k, &v}) {  // view as [n_tokens, kvh, hd] with row stride 8 * hd
      t->ndim = 3;
      t->shape[1] = kvh;
      t->shape[2] = hd;
      t->strides[0] = 8 * hd;
      t->strides[1] = hd;
      t->strides[2] = 1;
    }
    OwnedTensor kc = random_tensor(dt, {6, 3, kvh, hd}, rng), vc = random_tensor(dt, {6, 3, kvh, hd}, rng);
    OwnedTensor kc_ref = clone(kc.tensor), vc_ref = clone(vc.tensor);
    OwnedTensor slots = OwnedTensor::make(DType::kI64, {n_tokens});
    const int64_t slot_values[n_tokens] = {17, -1, 0, 5, 16, -1, 2, 9, 12};
    std::memcpy(slots.tensor.data, slot_values, sizeof(slot_values));
    cpu::kv_write(pool, {kc.tensor, vc.tensor}, k, v, slots.tensor);
    ref::kv_write({kc_ref.tensor, vc_ref.tensor}, k, v, slots.tensor);
    EXPECT_EQ(std::memcmp(kc.tensor.data, kc_ref.tensor.data, kc.tensor.nbytes()), 0) << dtype_name(dt);
    EXPECT_EQ(std::memcmp(vc.tensor.data, vc_ref.tensor.data, vc.tensor.nbytes()), 0) << dtype_name(dt);
    // Token 3 went to slot 5 = block 1, offset 2; its head 1 element 7 is k[3, 1, 7] in cache dtype.
    const float src = fused.tensor.ptr<float>()[3 * 8 * hd + 4 * hd + hd + 7];
    const size_t at = ((1 * 3 + 2) * kvh + 1) * hd + 7;
    if (dt == DType::kBF16)
      EXPECT_EQ(kc.tensor.ptr<uint16_t>()[at], f32_to_bf16(src));
    else
      EXPECT_EQ(kc.tensor.ptr<float>()[at], src);
  }
}

TEST(Rope, MatchesFormulaLeavesTailAndMatchesReference) {
  ThreadPool pool(3);
  std::mt19937 rng(23);
  const int64_t n_tokens = 7, n_heads = 3, head_dim = 20, rotary_dim = 12, half = rotary_dim / 2;
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary_dim);
  const RopeParams p{inv_freq.data(), static_cast<int>(rotary_dim), 1.25f};
  // x is the q part of a fused [n_tokens, (3 + 2) heads * head_dim] tensor: row stride 5 * head_dim.
  OwnedTensor fused = random_tensor(DType::kF32, {n_tokens, 5 * head_dim}, rng);
  OwnedTensor fused_ref = clone(fused.tensor);
  auto q_view = [&](const OwnedTensor& f) {
    Tensor t = f.tensor;
    t.ndim = 3;
    t.shape[0] = n_tokens;
    t.shape[1] = n_heads;
    t.shape[2] = head_dim;
    t.strides[0] = 5 * head_dim;
    t.strides[1] = head_dim;
    t.strides[2] = 1;
    return t;
  };
  OwnedTensor positions = OwnedTensor::make(DType::kI32, {n_tokens});
  const int32_t pos[n_tokens] = {0, 1, 2, 17, 4095, 100000, 3};
  std::memcpy(positions.tensor.data, pos, sizeof(pos));
  const std::vector<float> before = values(fused.tensor);
  cpu::rope(pool, q_view(fused), positions.tensor, p);
  ref::rope(q_view(fused_ref), positions.tensor, p);
  EXPECT_EQ(values(fused.tensor), values(fused_ref.tensor));
  const std::vector<float> after = values(fused.tensor);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t col = 0; col < 5 * head_dim; ++col) {
      const size_t at = static_cast<size_t>(t * 5 * head_dim + col);
      const int64_t h = col / head_dim, i = col % head_dim;
      if (h >= n_heads || i >= rotary_dim) {  // other heads of the fused row and the tail: untouched
        ASSERT_EQ(after[at], before[at]) << t << " " << col;
        continue;
      }
      const int64_t j = i < half ? i : i - half;
      const float angle = static_cast<float>(pos[t]) * inv_freq[j];
      const float c = std::cos(angle) * 1.25f, s = std::sin(angle) * 1.25f;
      const float x1 = before[at - i + j], x2 = before[at - i + j + half];
      const float want = i < half ? x1 * c - x2 * s : x2 * c + x1 * s;
      ASSERT_NEAR(after[at], want, 1e-5f) << "token " << t << " head " << h << " dim " << i;
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
