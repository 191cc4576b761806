// Quantized KV cache (PagedKv::bits 4/8, and fp8 e4m3): the row quantizer's round trip (int: error <= half
// a step, codes span the range; fp8: every e4m3 code round-trips, ties go to even, saturation, relative
// error <= 2^-4), kv_write on every path writing identical codes, and paged_attention over a quantized
// cache against an independent reference: the cache dequantized here (own nibble / e4m3 decoding and
// formula) into an f32 cache, then ref::paged_attention. Odd sizes, GQA, sliding windows, group = head_dim
// when 64 does not divide it; dispatch errors for malformed quantized caches.
#include <algorithm>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/kv_quant.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

int group_for(int64_t head_dim) {
  return head_dim % 64 == 0 ? 64 : static_cast<int>(head_dim);
}

// The value of an e4m3 code from its definition (sign, 4-bit exponent with bias 7, 3-bit mantissa;
// exponent 0 subnormal; S.1111.111 NaN), not kv_quant.h's decoder.
float e4m3_here(uint32_t c) {
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return NAN;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, static_cast<int>(e) - 7);
  return static_cast<float>((c & 0x80u) ? -mag : mag);
}

// Decodes element d of a code row with its own bit arithmetic (not kv_code).
float dequant_here(const uint8_t* codes, const float* params, int bits, int group, int64_t d, bool fp8 = false) {
  const uint32_t byte = bits == 8 ? codes[d] : codes[d / 2];
  const uint32_t code = bits == 8 ? byte : (d % 2 == 0 ? byte & 15u : byte >> 4);
  const int64_t g = d / group;
  return std::fmaf(params[2 * g], fp8 ? e4m3_here(code) : static_cast<float>(code), params[2 * g + 1]);
}

TEST(KvQuantFp8, EveryCodeRoundTripsAndDecodesByDefinition) {
  int finite = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    const float want = e4m3_here(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(v, want) << "code " << c;
    EXPECT_EQ(f32_to_e4m3(v), c) << "code " << c << " value " << v;
    EXPECT_EQ(e4m3_table()[c], v) << c;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(e4m3_to_f32(0x7e), kFp8E4m3Max);
}

TEST(KvQuantFp8, RoundsToNearestEvenAndSaturates) {
  // Between each pair of adjacent non-negative codes: just below / above the midpoint, and the midpoint
  // itself (which goes to the code with the even mantissa).
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_here(c), hi = e4m3_here(c + 1), mid = 0.5f * (lo + hi);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, lo)), c) << c;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, hi)), c + 1) << c;
    EXPECT_EQ(f32_to_e4m3(mid), (c & 1u) ? c + 1 : c) << "tie between codes " << c << " and " << c + 1;
    EXPECT_EQ(f32_to_e4m3(-mid), ((c & 1u) ? c + 1 : c) | 0x80u) << c;
  }
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(470.0f), 0x7e);  // saturates (plain RNE would overflow to NaN)
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(NAN))));
}

TEST(KvQuantFp8, RowRoundTripWithinRelativeHalfUlp) {
  std::mt19937 rng(9);
  for (int64_t head_dim : {8, 64, 72, 128})
    for (float range : {1e-4f, 1.0f, 3000.0f})
      for (int group : {static_cast<int>(head_dim), 8}) {
        std::vector<float> x(static_cast<size_t>(head_dim)), back(x.size());
        std::uniform_real_distribution<float> dist(-range, range * 0.3f);
        for (float& v : x) v = dist(rng);
        std::vector<uint8_t> codes(static_cast<size_t>(head_dim));
        std::vector<float> params(static_cast<size_t>(2 * head_dim / group));
        kv_quantize_row(x.data(), head_dim, 8, group, codes.data(), params.data(), /*fp8=*/true);
        kv_dequantize_row(codes.data(), params.data(), head_dim, 8, group, back.data(), /*fp8=*/true);
        for (int64_t g0 = 0; g0 < head_dim; g0 += group) {
          float amax = 0.0f;
          for (int64_t d = g0; d < g0 + group; ++d) amax = std::max(amax, std::fabs(x[d]));
          const float scale = params[static_cast<size_t>(2 * (g0 / group))];
          EXPECT_EQ(scale, amax / 448.0f);
          EXPECT_EQ(params[static_cast<size_t>(2 * (g0 / group) + 1)], 0.0f);
          bool hit_max = false;
          for (int64_t d = g0; d < g0 + group; ++d) {
            // Half an e4m3 ulp (2^-4 relative) for normals, half the subnormal step (2^-10 * scale) below.
            const float tol = std::fabs(x[d]) * 0.0625f * 1.0001f + scale * 0.0009765625f * 1.0001f;
            EXPECT_LE(std::fabs(back[d] - x[d]), tol) << "head_dim " << head_dim << " d " << d;
            EXPECT_EQ(back[d], dequant_here(codes.data(), params.data(), 8, group, d, true));
            hit_max = hit_max || (codes[d] & 0x7fu) == 0x7eu;
          }
          EXPECT_TRUE(hit_max) << "the largest magnitude maps to +-448";
        }
      }
  std::vector<float> zeros(16, 0.0f), back(16, 1.0f);
  std::vector<uint8_t> codes(16, 0xff);
  std::vector<float> params(2, -1.0f);
  kv_quantize_row(zeros.data(), 16, 8, 16, codes.data(), params.data(), true);
  kv_dequantize_row(codes.data(), params.data(), 16, 8, 16, back.data(), true);
  EXPECT_EQ(params[0], 0.0f);
  EXPECT_EQ(back, zeros);
  EXPECT_EQ(codes, std::vector<uint8_t>(16, 0));
}

TEST(KvQuant, RoundTripWithinHalfAStep) {
  std::mt19937 rng(5);
  for (int bits : {4, 8})
    for (int64_t head_dim : {2, 64, 72, 128, 256})
      for (float range : {1e-3f, 1.0f, 300.0f}) {
        const int group = group_for(head_dim);
        std::vector<float> x(static_cast<size_t>(head_dim)), back(x.size());
        std::uniform_real_distribution<float> dist(-range, range * 0.5f);
        for (float& v : x) v = dist(rng);
        std::vector<uint8_t> codes(static_cast<size_t>(head_dim * bits / 8));
        std::vector<float> params(static_cast<size_t>(2 * head_dim / group));
        kv_quantize_row(x.data(), head_dim, bits, group, codes.data(), params.data());
        kv_dequantize_row(codes.data(), params.data(), head_dim, bits, group, back.data());
        for (int64_t g0 = 0; g0 < head_dim; g0 += group) {
          const float mn = *std::min_element(x.begin() + g0, x.begin() + g0 + group);
          const float mx = *std::max_element(x.begin() + g0, x.begin() + g0 + group);
          const float step = (mx - mn) / static_cast<float>((1 << bits) - 1);
          EXPECT_FLOAT_EQ(params[static_cast<size_t>(2 * (g0 / group))], step);
          EXPECT_EQ(params[static_cast<size_t>(2 * (g0 / group) + 1)], mn);
          uint32_t lo = 255, hi = 0;
          for (int64_t d = g0; d < g0 + group; ++d) {
            const float tol = 0.5f * step * (1.0f + 1e-4f) + 4e-7f * std::max(std::fabs(mn), std::fabs(mx));
            EXPECT_LE(std::fabs(back[d] - x[d]), tol) << bits << " bits, head_dim " << head_dim << " d " << d;
            EXPECT_EQ(back[d], dequant_here(codes.data(), params.data(), bits, group, d));
            lo = std::min(lo, kv_code(codes.data(), bits, d));
            hi = std::max(hi, kv_code(codes.data(), bits, d));
          }
          EXPECT_EQ(lo, 0u);  // the minimum maps to code 0, the maximum to the top code
          EXPECT_EQ(hi, (1u << bits) - 1u);
        }
      }
}

TEST(KvQuant, ConstantGroupIsExact) {
  for (int bits : {4, 8}) {
    std::vector<float> x(64, -3.25f), back(64);
    std::vector<uint8_t> codes(64 * bits / 8);
    std::vector<float> params(2);
    kv_quantize_row(x.data(), 64, bits, 64, codes.data(), params.data());
    kv_dequantize_row(codes.data(), params.data(), 64, bits, 64, back.data());
    EXPECT_EQ(back, x);
  }
}

struct QScenario {
  int64_t n_heads = 4, n_kv_heads = 2, head_dim = 64, block_size = 5, n_blocks = 64;
  int bits = 8;
  bool fp8 = false;  // bits 8 e4m3
  std::vector<int64_t> seq_lens, new_tokens;
  AttentionParams params{};
};

// A quantized cache, its per-sequence K/V written through kv_write (all tokens), queries for the trailing
// new_tokens of each sequence.
struct QBatch {
  OwnedTensor k, v, kp, vp, block_tables, positions, seq_index, slots, q;
  int bits = 0, group = 0;
  bool fp8 = false;
  PagedKv cache() const { return {k.tensor, v.tensor, kp.tensor, vp.tensor, bits, group, fp8}; }
  AttentionMeta meta() const { return {positions.tensor, seq_index.tensor, block_tables.tensor, slots.tensor}; }
};

QBatch make_qbatch(const QScenario& s, std::mt19937& rng, bool write_with_ref) {
  QBatch b;
  b.bits = s.bits;
  b.fp8 = s.fp8;
  b.group = group_for(s.head_dim);
  const int64_t n_seqs = static_cast<int64_t>(s.seq_lens.size()), n_groups = s.head_dim / b.group;
  b.k = OwnedTensor::make(DType::kU8, {s.n_blocks, s.block_size, s.n_kv_heads, s.head_dim * s.bits / 8});
  b.v = OwnedTensor::make(DType::kU8, {s.n_blocks, s.block_size, s.n_kv_heads, s.head_dim * s.bits / 8});
  b.kp = random_tensor(DType::kF32, {s.n_blocks, s.block_size, s.n_kv_heads, 2 * n_groups}, rng);
  b.vp = random_tensor(DType::kF32, {s.n_blocks, s.block_size, s.n_kv_heads, 2 * n_groups}, rng);
  int64_t max_blocks = 0;
  for (int64_t len : s.seq_lens) max_blocks = std::max(max_blocks, (len + s.block_size - 1) / s.block_size);
  b.block_tables = OwnedTensor::make(DType::kI32, {n_seqs, max_blocks});
  std::fill_n(b.block_tables.tensor.ptr<int32_t>(), n_seqs * max_blocks, -1);
  std::vector<int32_t> free_blocks(static_cast<size_t>(s.n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next = 0;
  Context ctx;
  int64_t n_tokens = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    int32_t* table = b.block_tables.tensor.ptr<int32_t>() + i * max_blocks;
    const int64_t len = s.seq_lens[i];
    for (int64_t blk = 0; blk * s.block_size < len; ++blk) table[blk] = free_blocks.at(next++);
    OwnedTensor keys = random_tensor(DType::kF32, {len, s.n_kv_heads, s.head_dim}, rng, -3.0f, 2.0f);
    OwnedTensor vals = random_tensor(DType::kF32, {len, s.n_kv_heads, s.head_dim}, rng, -1.0f, 4.0f);
    OwnedTensor slots = OwnedTensor::make(DType::kI64, {len});
    for (int64_t p = 0; p < len; ++p)
      slots.tensor.ptr<int64_t>()[p] = table[p / s.block_size] * s.block_size + p % s.block_size;
    if (write_with_ref) ref::kv_write(b.cache(), keys.tensor, vals.tensor, slots.tensor);
    else kv_write(ctx, b.cache(), keys.tensor, vals.tensor, slots.tensor);
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
      b.slots.tensor.ptr<int64_t>()[t] = -1;
    }
  b.q = random_tensor(DType::kF32, {n_tokens, s.n_heads, s.head_dim}, rng, -1.0f, 1.0f);
  return b;
}

// The whole quantized cache dequantized into f32 [n_blocks, block_size, n_kv_heads, head_dim].
OwnedTensor dequantize_cache(const Tensor& codes, const Tensor& params, int bits, int group, int64_t head_dim,
                             bool fp8) {
  const int64_t rows = codes.shape[0] * codes.shape[1] * codes.shape[2];
  OwnedTensor out = OwnedTensor::make(DType::kF32, {codes.shape[0], codes.shape[1], codes.shape[2], head_dim});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < head_dim; ++d)
      out.tensor.ptr<float>()[r * head_dim + d] =
          dequant_here(codes.ptr<uint8_t>() + r * codes.shape[3], params.ptr<float>() + r * params.shape[3], bits,
                       group, d, fp8);
  return out;
}

void check_quant_attention(const QScenario& s, const std::string& what) {
  std::mt19937 rng(11);
  QBatch b = make_qbatch(s, rng, /*write_with_ref=*/false);
  {  // kv_write through ops.h writes the same codes and params as ref::kv_write
    std::mt19937 rng2(11);
    QBatch r = make_qbatch(s, rng2, /*write_with_ref=*/true);
    EXPECT_EQ(values(b.kp.tensor), values(r.kp.tensor)) << what;
    EXPECT_EQ(values(b.vp.tensor), values(r.vp.tensor)) << what;
    EXPECT_EQ(0, std::memcmp(b.k.tensor.data, r.k.tensor.data, b.k.tensor.nbytes())) << what;
    EXPECT_EQ(0, std::memcmp(b.v.tensor.data, r.v.tensor.data, b.v.tensor.nbytes())) << what;
  }
  OwnedTensor kf = dequantize_cache(b.k.tensor, b.kp.tensor, s.bits, b.group, s.head_dim, s.fp8);
  OwnedTensor vf = dequantize_cache(b.v.tensor, b.vp.tensor, s.bits, b.group, s.head_dim, s.fp8);
  const int64_t n = b.q.tensor.shape[0];
  OwnedTensor want = OwnedTensor::make(DType::kF32, {n, s.n_heads, s.head_dim});
  ref::paged_attention(want.tensor, b.q.tensor, PagedKv{kf.tensor, vf.tensor}, b.meta(), s.params);
  OwnedTensor got_ref = OwnedTensor::make(DType::kF32, {n, s.n_heads, s.head_dim});
  ref::paged_attention(got_ref.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
  expect_close(got_ref.tensor, want.tensor, 1e-6f, what + " (ref)");
  ThreadPool pool(3);
  for_each_isa([&](cpu::Isa) {
    OwnedTensor got = random_tensor(DType::kF32, {n, s.n_heads, s.head_dim}, rng);
    cpu::paged_attention(pool, got.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
    expect_close(got.tensor, want.tensor, 1e-5f, what);
  });
  Context ctx;
  OwnedTensor got = OwnedTensor::make(DType::kF32, {n, s.n_heads, s.head_dim});
  paged_attention(ctx, got.tensor, b.q.tensor, b.cache(), b.meta(), s.params);
  expect_close(got.tensor, want.tensor, 1e-5f, what + " (ops.h)");
}

TEST(KvQuantAttention, MatchesDequantizedReferenceGqaOddSizes) {
  for (int bits : {8, 4, 9})  // 9: fp8
    for (int64_t group : {1, 3, 4})
      for (int64_t head_dim : {64, 72, 128}) {
        QScenario s;
        s.bits = bits == 9 ? 8 : bits;
        s.fp8 = bits == 9;
        s.n_kv_heads = 2;
        s.n_heads = 2 * group;
        s.head_dim = head_dim;
        s.block_size = group == 3 ? 1 : 5;
        s.n_blocks = group == 3 ? 200 : 64;
        s.seq_lens = {1, 37, 70, 9};
        s.new_tokens = {1, 6, 1, 9};  // decode, prefill chunk, decode, whole prompt
        s.params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        check_quant_attention(s, strfmt("%s gqa %lld head_dim %lld", bits == 9 ? "fp8" : bits == 8 ? "int8" : "int4",
                                        (long long)group, (long long)head_dim));
      }
}

TEST(KvQuantAttention, SlidingWindowAndSoftcap) {
  for (int bits : {8, 4, 9})  // 9: fp8
    for (int window : {1, 7, 33})
      for (float softcap : {0.0f, 5.0f}) {
        QScenario s;
        s.bits = bits == 9 ? 8 : bits;
        s.fp8 = bits == 9;
        s.n_heads = 8;
        s.n_kv_heads = 1;
        s.head_dim = 96;  // group 96
        s.block_size = 3;
        s.n_blocks = 120;
        s.seq_lens = {100, 23, 64};
        s.new_tokens = {1, 23, 4};
        s.params = {0.4f, window, softcap, {}};
        check_quant_attention(s, strfmt("%s window %d softcap %g", bits == 9 ? "fp8" : bits == 8 ? "int8" : "int4",
                                        window, softcap));
      }
}

TEST(KvQuantAttention, DispatchRejectsMalformedQuantizedCaches) {
  std::mt19937 rng(3);
  QScenario s;
  s.seq_lens = {4};
  s.new_tokens = {4};
  QBatch b = make_qbatch(s, rng, false);
  Context ctx;
  OwnedTensor out = OwnedTensor::make(DType::kF32, {4, s.n_heads, s.head_dim});
  PagedKv bad = b.cache();
  bad.bits = 3;
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, b.q.tensor, bad, b.meta(), s.params); },
                      {"paged_attention", "bits 3"});
  bad = b.cache();
  bad.group_size = 48;
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, b.q.tensor, bad, b.meta(), s.params); },
                      {"group_size 48"});
  bad = b.cache();
  bad.v_params = bad.v_params.slice(3, 0, 1);
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, b.q.tensor, bad, b.meta(), s.params); },
                      {"cache.v_params"});
  bad = b.cache();
  bad.bits = 4;
  bad.fp8 = true;
  expect_kernel_error([&] { paged_attention(ctx, out.tensor, b.q.tensor, bad, b.meta(), s.params); },
                      {"paged_attention", "fp8", "bits 8"});
  bad = b.cache();
  bad.k_params = {};
  expect_kernel_error([&] { kv_write(ctx, bad, b.q.tensor.slice(1, 0, 2), b.q.tensor.slice(1, 0, 2), b.slots.tensor); },
                      {"kv_write", "cache.k_params"});
}

}  // namespace
}  // namespace bunsen::kernels::test
