// linear_qkv_rope_kv on CUDA (the q/k/v GEMV with rope_kv_write folded into its store, gemv.cu; quantized
// q/k/v: the 4-bit tiled tensor-core GEMV's, gemv_qmma.cu) against linear_multi (linear_q_multi) followed by
// rope_kv_write: q, k, v and the whole paged cache bit for bit, over m 1..8, both
// GEMV paths (default: 4 rows per warp at m <= 2, small: 2), full, partial and no rotation, GQA, bias,
// attention scaling, slots past the cache and -1 (no write), and positions up to 8k. Model level: llama-like
// fixtures decode to the same logits, bit for bit, with the fold on and off, eagerly and from CUDA graphs.
// The fused call must report that it ran (it returns false when it falls back to the two ops).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../golden/golden_file.h"
#include "../kernels/kernel_test_util.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "kernels/cuda/quant_ops.h"
#include "quant_test_util.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;
using kernels::test::DeviceTensor;

struct QkvCase {
  int64_t k, n_heads, n_kv_heads, head_dim;
  int rotary_dim;
  float scaling;
  bool bias;
};

bool same_bytes(const DeviceTensor& a, const DeviceTensor& b) {
  const OwnedTensor x = a.download(), y = b.download();
  return x.tensor.nbytes() == y.tensor.nbytes() && std::memcmp(x.tensor.data, y.tensor.data, x.tensor.nbytes()) == 0;
}

// One m of a case: positions up to 8k, distinct slots but token 2's -1 and token 4's past the cache (no
// write for both), garbage outputs and two copies of the cache; way(w, x, q, k, v, q3, k3, v3, cache) runs
// way w (0: the two ops, 1: the fold); then q, k, v and the whole cache agree bit for bit.
template <class Way>
void expect_fold_case(const QkvCase& c, int64_t m, std::mt19937& rng, const OwnedTensor& cache_k,
                      const OwnedTensor& cache_v, Way&& way) {
  const int64_t hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
  const int64_t n_slots = cache_k.tensor.shape[0] * cache_k.tensor.shape[1];
  auto rnd = [&](std::initializer_list<int64_t> shape) {
    return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
  };
  const DeviceTensor x = rnd({m, c.k});
  OwnedTensor pos = OwnedTensor::make(DType::kI32, {m}), slot = OwnedTensor::make(DType::kI64, {m});
  std::vector<int64_t> used;
  for (int64_t i = 0; i < m; ++i) {
    pos.tensor.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % 8192);
    int64_t s = 0;
    do s = static_cast<int64_t>(rng() % n_slots);
    while (std::find(used.begin(), used.end(), s) != used.end());
    used.push_back(s);
    slot.tensor.ptr<int64_t>()[i] = i == 2 ? -1 : i == 4 ? n_slots : s;  // no write for both
  }
  const DeviceTensor positions = DeviceTensor::upload(pos.tensor), slots = DeviceTensor::upload(slot.tensor);
  DeviceTensor q[2] = {rnd({m, nq}), rnd({m, nq})}, k[2] = {rnd({m, nkv}), rnd({m, nkv})},
               v[2] = {rnd({m, nkv}), rnd({m, nkv})};
  DeviceTensor ck[2] = {DeviceTensor::upload(cache_k.tensor), DeviceTensor::upload(cache_k.tensor)};
  DeviceTensor cv[2] = {DeviceTensor::upload(cache_v.tensor), DeviceTensor::upload(cache_v.tensor)};
  for (int w = 0; w < 2; ++w) {
    const Tensor q3 = q[w].tensor.reshape({m, c.n_heads, hd}),
                 k3 = k[w].tensor.reshape({m, c.n_kv_heads, hd});
    const Tensor v3 = v[w].tensor.reshape({m, c.n_kv_heads, hd});
    way(w, x.tensor, q[w].tensor, k[w].tensor, v[w].tensor, q3, k3, v3,
        kernels::PagedKv(ck[w].tensor, cv[w].tensor), positions.tensor, slots.tensor);
  }
  EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
  EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
  EXPECT_TRUE(same_bytes(v[0], v[1])) << "v";
  EXPECT_TRUE(same_bytes(ck[0], ck[1])) << "cache k";
  EXPECT_TRUE(same_bytes(cv[0], cv[1])) << "cache v";
}

std::vector<float> inv_freq_of(const QkvCase& c) {
  std::vector<float> inv_freq(static_cast<size_t>(c.rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rotary_dim));
  return inv_freq;
}

TEST_F(CudaTest, QkvRopeFoldEqualsLinearMultiThenRopeKvWrite) {
  const QkvCase cases[] = {{2048, 32, 8, 64, 64, 1.0f, false},
                           {4096, 32, 8, 128, 128, 1.0f, false},
                           {1536, 12, 4, 128, 64, 1.25f, true},
                           {512, 6, 2, 64, 0, 1.0f, false}};
  std::mt19937 rng(2026);
  kernels::set_qkv_rope_fold_for_testing(1);
  for (const QkvCase& c : cases) {
    const int64_t hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
    const std::vector<float> inv_freq = inv_freq_of(c);
    const kernels::RopeParams rope{inv_freq.data(), c.rotary_dim, c.scaling};
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const DeviceTensor wq = rnd({nq, c.k}), wk = rnd({nkv, c.k}), wv = rnd({nkv, c.k});
    const DeviceTensor bq = rnd({nq}), bk = rnd({nkv}), bv = rnd({nkv});
    const OwnedTensor cache_k =
        kernels::test::random_tensor(DType::kBF16, {16, 16, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    const OwnedTensor cache_v =
        kernels::test::random_tensor(DType::kBF16, {16, 16, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3, 5, 8}) {
        SCOPED_TRACE(strfmt("k %lld heads %lld/%lld head_dim %lld rotary %d m %lld", (long long)c.k,
                            (long long)c.n_heads, (long long)c.n_kv_heads, (long long)hd, c.rotary_dim, (long long)m));
        expect_fold_case(
            c, m, rng, cache_k, cache_v,
            [&](int way, Tensor x, Tensor q, Tensor k, Tensor v, Tensor q3, Tensor k3, Tensor v3,
                const kernels::PagedKv& cache, Tensor positions, Tensor slots) {
              const kernels::LinearPart parts[3] = {{q, wq.tensor, c.bias ? bq.tensor : Tensor{}},
                                                    {k, wk.tensor, c.bias ? bk.tensor : Tensor{}},
                                                    {v, wv.tensor, c.bias ? bv.tensor : Tensor{}}};
              if (way == 0) {
                kernels::linear_multi(ctx_, x, parts);
                kernels::rope_kv_write(ctx_, q3, k3, v3, cache, positions, slots, rope);
              } else {
                ASSERT_TRUE(
                    kernels::linear_qkv_rope_kv(ctx_, x, parts, q3, k3, v3, cache, positions, slots, rope))
                    << "the fold fell back to the two ops";
              }
            });
        if (HasFailure()) return;
      }
    });
    if (HasFailure()) break;
  }
  kernels::set_qkv_rope_fold_for_testing(-1);
}

// The fold on the 4-bit tiled tensor-core GEMV (quantized q/k/v, group 64, k % 512 == 0): against
// linear_q_multi followed by rope_kv_write, bit for bit, over m 1..8, bf16 and f16 scales, forced k splits,
// full, partial and no rotation, GQA, bias and attention scaling. k 1000 (not whole tiles) and 8-bit weights
// fall back to the two ops.
TEST_F(CudaTest, QuantQkvRopeFoldEqualsLinearQMultiThenRopeKvWrite) {
  using kernels::test::RandomQuantWeight;
  struct QuantCase {
    QkvCase c;
    int bits;
    DType sb;
    bool folds;
  };
  const QuantCase cases[] = {{{2048, 32, 8, 64, 64, 1.0f, false}, 4, DType::kBF16, true},
                             {{4096, 32, 8, 128, 128, 1.0f, false}, 4, DType::kF16, true},
                             {{1536, 12, 4, 128, 64, 1.25f, true}, 4, DType::kBF16, true},
                             {{512, 6, 2, 64, 0, 1.0f, false}, 4, DType::kBF16, true},
                             {{1024, 8, 2, 64, 64, 1.0f, false}, 8, DType::kBF16, false},
                             {{1088, 8, 2, 64, 64, 1.0f, false}, 4, DType::kBF16, false}};
  std::mt19937 rng(2032);
  kernels::set_qkv_rope_fold_for_testing(1);
  for (const QuantCase& qc : cases) {
    const QkvCase& c = qc.c;
    const int64_t hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
    const std::vector<float> inv_freq = inv_freq_of(c);
    const kernels::RopeParams rope{inv_freq.data(), c.rotary_dim, c.scaling};
    const RandomQuantWeight wq(nq, c.k, qc.bits, 64, qc.sb, rng), wk(nkv, c.k, qc.bits, 64, qc.sb, rng),
        wv(nkv, c.k, qc.bits, 64, qc.sb, rng);
    auto rnd = [&](std::initializer_list<int64_t> shape) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng).tensor);
    };
    const DeviceTensor bq = rnd({nq}), bk = rnd({nkv}), bv = rnd({nkv});
    const OwnedTensor cache_k =
        kernels::test::random_tensor(DType::kBF16, {16, 16, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    const OwnedTensor cache_v =
        kernels::test::random_tensor(DType::kBF16, {16, 16, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    for (int split : {0, 1, 8}) {
      kernels::cuda::set_linear_q_split_for_testing(split);
      for (int64_t m : {1, 2, 3, 5, 8}) {
        SCOPED_TRACE(strfmt("k %lld heads %lld/%lld head_dim %lld rotary %d %d-bit scales %s m %lld split %d",
                            (long long)c.k, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)hd,
                            c.rotary_dim, qc.bits, dtype_name(qc.sb), (long long)m, split));
        expect_fold_case(
            c, m, rng, cache_k, cache_v,
            [&](int way, Tensor x, Tensor q, Tensor k, Tensor v, Tensor q3, Tensor k3, Tensor v3,
                const kernels::PagedKv& cache, Tensor positions, Tensor slots) {
              const kernels::QuantLinearPart parts[3] = {{q, wq.dev, c.bias ? bq.tensor : Tensor{}},
                                                         {k, wk.dev, c.bias ? bk.tensor : Tensor{}},
                                                         {v, wv.dev, c.bias ? bv.tensor : Tensor{}}};
              if (way == 0) {
                kernels::linear_q_multi(ctx_, x, parts);
                kernels::rope_kv_write(ctx_, q3, k3, v3, cache, positions, slots, rope);
              } else {
                EXPECT_EQ(
                    kernels::linear_qkv_rope_kv(ctx_, x, parts, q3, k3, v3, cache, positions, slots, rope),
                    qc.folds)
                    << (qc.folds ? "the fold fell back to the two ops" : "folded where it should not");
              }
            });
        if (HasFailure()) break;
      }
      if (HasFailure()) break;
    }
    kernels::cuda::set_linear_q_split_for_testing(0);
    if (HasFailure()) break;
  }
  kernels::set_qkv_rope_fold_for_testing(-1);
}

// What the fold does not take falls back to the two ops (false, same results): f32 x, a quantized or f32
// cache would; here f32 x and m past the GEMV's rows.
TEST_F(CudaTest, QkvRopeFoldFallsBackWhereItDoesNotApply) {
  std::mt19937 rng(5);
  kernels::set_qkv_rope_fold_for_testing(1);
  const int64_t k = 256, hd = 64, nq = 4 * hd, nkv = 2 * hd;
  std::vector<float> inv_freq(hd / 2, 0.01f);
  const kernels::RopeParams rope{inv_freq.data(), static_cast<int>(hd), 1.0f};
  auto dev = [&](DType t, std::initializer_list<int64_t> shape) {
    return DeviceTensor::upload(kernels::test::random_tensor(t, shape, rng).tensor);
  };
  const DeviceTensor wq = dev(DType::kBF16, {nq, k}), wk = dev(DType::kBF16, {nkv, k}), wv = dev(DType::kBF16, {nkv, k});
  const DeviceTensor ck = dev(DType::kBF16, {4, 16, 2, hd}), cv = dev(DType::kBF16, {4, 16, 2, hd});
  for (auto [m, xt] : {std::pair<int64_t, DType>{2, DType::kF32}, {12, DType::kBF16}}) {
    const DeviceTensor x = dev(xt, {m, k});
    OwnedTensor pos = OwnedTensor::make(DType::kI32, {m}), slot = OwnedTensor::make(DType::kI64, {m});
    for (int64_t i = 0; i < m; ++i) pos.tensor.ptr<int32_t>()[i] = static_cast<int32_t>(i), slot.tensor.ptr<int64_t>()[i] = i;
    const DeviceTensor positions = DeviceTensor::upload(pos.tensor), slots = DeviceTensor::upload(slot.tensor);
    const DeviceTensor q = dev(DType::kBF16, {m, nq}), kk = dev(DType::kBF16, {m, nkv}), v = dev(DType::kBF16, {m, nkv});
    const kernels::LinearPart parts[3] = {{q.tensor, wq.tensor, {}}, {kk.tensor, wk.tensor, {}}, {v.tensor, wv.tensor, {}}};
    EXPECT_FALSE(kernels::linear_qkv_rope_kv(ctx_, x.tensor, parts, q.tensor.reshape({m, 4, hd}),
                                             kk.tensor.reshape({m, 2, hd}), v.tensor.reshape({m, 2, hd}),
                                             kernels::PagedKv(ck.tensor, cv.tensor), positions.tensor, slots.tensor, rope))
        << "m " << m;
  }
  kernels::set_qkv_rope_fold_for_testing(-1);
}

// Llama-like fixtures (no q/k norm: the fold's models) decode the golden greedy continuation to the same
// logits with the fold on and off, eagerly and replayed from CUDA graphs.
TEST_F(CudaTest, QkvRopeFoldDecodesBitForBitLikeTheTwoOps) {
  int fixtures = 0;
  const std::vector<std::string> all = fixture_names();
  for (const std::string name : {"llama3", "llama_yarn", "mistral", "phi3", "qwen2", "granite", "smollm3"}) {
    if (std::find(all.begin(), all.end(), name) == all.end()) continue;
    SCOPED_TRACE(name);
    ++fixtures;
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda_qkv_rope"), Device::cuda(0));
    expect_switch_decodes_bit_for_bit(*m, to_i32(f.outputs->get("input_ids")),
                                      to_i32(f.outputs->get("greedy")),
                                      kernels::set_qkv_rope_fold_for_testing);
  }
  EXPECT_GE(fixtures, 3);
}

}  // namespace
}  // namespace bunsen::golden
