// linear_qkv_rope_kv on CUDA (the q/k/v GEMV with rope_kv_write folded into its store, gemv.cu) against
// linear_multi followed by rope_kv_write: q, k, v and the whole paged cache bit for bit, over m 1..8, both
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

TEST_F(CudaTest, QkvRopeFoldEqualsLinearMultiThenRopeKvWrite) {
  const QkvCase cases[] = {{2048, 32, 8, 64, 64, 1.0f, false},
                           {4096, 32, 8, 128, 128, 1.0f, false},
                           {1536, 12, 4, 128, 64, 1.25f, true},
                           {512, 6, 2, 64, 0, 1.0f, false}};
  std::mt19937 rng(2026);
  kernels::set_qkv_rope_fold_for_testing(1);
  for (const QkvCase& c : cases) {
    const int64_t hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
    const int64_t n_blocks = 16, block_size = 16;
    std::vector<float> inv_freq(static_cast<size_t>(c.rotary_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rotary_dim));
    const kernels::RopeParams rope{inv_freq.data(), c.rotary_dim, c.scaling};
    auto rnd = [&](std::initializer_list<int64_t> shape, float lo = -1.0f, float hi = 1.0f) {
      return DeviceTensor::upload(kernels::test::random_tensor(DType::kBF16, shape, rng, lo, hi).tensor);
    };
    const DeviceTensor wq = rnd({nq, c.k}), wk = rnd({nkv, c.k}), wv = rnd({nkv, c.k});
    const DeviceTensor bq = rnd({nq}), bk = rnd({nkv}), bv = rnd({nkv});
    const OwnedTensor cache_k = kernels::test::random_tensor(
        DType::kBF16, {n_blocks, block_size, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    const OwnedTensor cache_v = kernels::test::random_tensor(
        DType::kBF16, {n_blocks, block_size, c.n_kv_heads, hd}, rng, -3.0f, 3.0f);
    kernels::test::for_each_gemv_path([&] {
      for (int64_t m : {1, 2, 3, 5, 8}) {
        SCOPED_TRACE(strfmt("k %lld heads %lld/%lld head_dim %lld rotary %d m %lld", (long long)c.k,
                            (long long)c.n_heads, (long long)c.n_kv_heads, (long long)hd, c.rotary_dim, (long long)m));
        const DeviceTensor x = rnd({m, c.k});
        OwnedTensor pos = OwnedTensor::make(DType::kI32, {m}), slot = OwnedTensor::make(DType::kI64, {m});
        std::vector<int64_t> used;
        for (int64_t i = 0; i < m; ++i) {
          pos.tensor.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % 8192);
          int64_t s = 0;
          do s = static_cast<int64_t>(rng() % (n_blocks * block_size));
          while (std::find(used.begin(), used.end(), s) != used.end());
          used.push_back(s);
          slot.tensor.ptr<int64_t>()[i] = i == 2   ? -1
                                          : i == 4 ? n_blocks * block_size
                                                   : s;  // no write for both
        }
        const DeviceTensor positions = DeviceTensor::upload(pos.tensor),
                           slots = DeviceTensor::upload(slot.tensor);
        // Two copies of everything written: [0] the two ops, [1] the fold. Outputs start as garbage.
        DeviceTensor q[2] = {rnd({m, nq}), rnd({m, nq})}, k[2] = {rnd({m, nkv}), rnd({m, nkv})},
                     v[2] = {rnd({m, nkv}), rnd({m, nkv})};
        DeviceTensor ck[2] = {DeviceTensor::upload(cache_k.tensor), DeviceTensor::upload(cache_k.tensor)};
        DeviceTensor cv[2] = {DeviceTensor::upload(cache_v.tensor), DeviceTensor::upload(cache_v.tensor)};
        for (int way = 0; way < 2; ++way) {
          const kernels::LinearPart parts[3] = {{q[way].tensor, wq.tensor, c.bias ? bq.tensor : Tensor{}},
                                                {k[way].tensor, wk.tensor, c.bias ? bk.tensor : Tensor{}},
                                                {v[way].tensor, wv.tensor, c.bias ? bv.tensor : Tensor{}}};
          const Tensor q3 = q[way].tensor.reshape({m, c.n_heads, hd}),
                       k3 = k[way].tensor.reshape({m, c.n_kv_heads, hd});
          const Tensor v3 = v[way].tensor.reshape({m, c.n_kv_heads, hd});
          const kernels::PagedKv cache(ck[way].tensor, cv[way].tensor);
          if (way == 0) {
            kernels::linear_multi(ctx_, x.tensor, parts);
            kernels::rope_kv_write(ctx_, q3, k3, v3, cache, positions.tensor, slots.tensor, rope);
          } else {
            ASSERT_TRUE(kernels::linear_qkv_rope_kv(ctx_, x.tensor, parts, q3, k3, v3, cache,
                                                    positions.tensor, slots.tensor, rope))
                << "the fold fell back to the two ops";
          }
        }
        EXPECT_TRUE(same_bytes(q[0], q[1])) << "q";
        EXPECT_TRUE(same_bytes(k[0], k[1])) << "k";
        EXPECT_TRUE(same_bytes(v[0], v[1])) << "v";
        EXPECT_TRUE(same_bytes(ck[0], ck[1])) << "cache k";
        EXPECT_TRUE(same_bytes(cv[0], cv[1])) << "cache v";
        if (HasFailure()) return;
      }
    });
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
