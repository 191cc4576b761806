// Row-wise ops (embedding, rms_norm, add_scaled, scale, silu_mul, softmax, argmax): the CPU fast path
// against ref/ at odd sizes and strided views, plus direct checks of the math where a formula is short
// (softmax sums to 1, argmax ties and NaN, silu on known values).
#include "kernel_test_util.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kRows[] = {1, 2, 3, 5, 17};
constexpr int64_t kCols[] = {1, 2, 3, 31, 33, 127, 4095};

TEST(Embedding, MatchesReferenceForEveryTableDtype) {
  ThreadPool pool(3);
  std::mt19937 rng(10);
  for (DType dt : kWeightDtypes)
    for (int64_t d : {1, 3, 33, 896}) {
      OwnedTensor table = random_tensor(dt, {50, d}, rng);
      OwnedTensor ids = OwnedTensor::make(DType::kI32, {7});
      const int32_t id_values[7] = {0, 49, 3, 3, 17, 48, 1};
      std::memcpy(ids.tensor.data, id_values, sizeof(id_values));
      OwnedTensor got = OwnedTensor::make(DType::kF32, {7, d});
      OwnedTensor want = OwnedTensor::make(DType::kF32, {7, d});
      cpu::embedding(pool, got.tensor, table.tensor, ids.tensor, 2.5f);
      ref::embedding(want.tensor, table.tensor, ids.tensor, 2.5f);
      expect_close(got.tensor, want.tensor, 0.0f,
                   strfmt("embedding %s d=%lld", dtype_name(dt), (long long)d));
      // Row 1 is table row 49 scaled, element by element.
      for (int64_t j = 0; j < d; ++j)
        ASSERT_EQ(got.tensor.ptr<float>()[d + j], load_f(table.tensor.row_ptr(49), dt, j) * 2.5f);
    }
}

TEST(RmsNorm, MatchesReferenceAndFormula) {
  ThreadPool pool(3);
  std::mt19937 rng(11);
  for (DType wt : kWeightDtypes)
    for (int64_t n : kRows)
      for (int64_t d : kCols) {
        OwnedTensor x = random_tensor(DType::kF32, {n, d + 2}, rng, -3.0f, 3.0f);
        const Tensor xs = x.tensor.slice(1, 1, d + 1);  // row stride d + 2
        OwnedTensor w = random_tensor(wt, {d}, rng);
        OwnedTensor got = OwnedTensor::make(DType::kF32, {n, d});
        OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
        cpu::rms_norm(pool, got.tensor, xs, w.tensor, 1e-6f, 1.0f);
        ref::rms_norm(want.tensor, xs, w.tensor, 1e-6f, 1.0f);
        expect_close(got.tensor, want.tensor, 1e-5f,
                     strfmt("rms_norm %s %lldx%lld", dtype_name(wt), (long long)n, (long long)d));
      }
  // Formula on one row: out = x / sqrt(mean(x^2) + eps) * (w + offset).
  OwnedTensor x = OwnedTensor::make(DType::kF32, {1, 4});
  OwnedTensor w = OwnedTensor::make(DType::kF32, {4});
  const float xv[4] = {1.0f, -2.0f, 3.0f, -4.0f}, wv[4] = {0.5f, 1.0f, -1.0f, 2.0f};
  std::memcpy(x.tensor.data, xv, sizeof(xv));
  std::memcpy(w.tensor.data, wv, sizeof(wv));
  cpu::rms_norm(pool, x.tensor, x.tensor, w.tensor, 0.5f, 0.25f);  // in place
  const float inv = 1.0f / std::sqrt((1.0f + 4.0f + 9.0f + 16.0f) / 4.0f + 0.5f);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(x.tensor.ptr<float>()[j], xv[j] * inv * (wv[j] + 0.25f), 1e-6f);
}

TEST(AddScaledAndScale, MatchReferenceOnStridedRows) {
  ThreadPool pool(3);
  std::mt19937 rng(12);
  for (int64_t n : kRows)
    for (int64_t d : kCols) {
      OwnedTensor x = random_tensor(DType::kF32, {n, d + 1}, rng);
      OwnedTensor y = random_tensor(DType::kF32, {n, d}, rng);
      OwnedTensor x_ref = clone(x.tensor);
      const Tensor xs = x.tensor.slice(1, 0, d), xr = x_ref.tensor.slice(1, 0, d);
      cpu::add_scaled(pool, xs, y.tensor, -0.75f);
      ref::add_scaled(xr, y.tensor, -0.75f);
      cpu::scale(pool, xs, 3.0f);
      ref::scale(xr, 3.0f);
      expect_close(x.tensor, x_ref.tensor, 0.0f,
                   strfmt("add_scaled+scale %lldx%lld", (long long)n, (long long)d));
    }
}

TEST(SiluMul, MatchesReferenceOnFusedColumnSlices) {
  ThreadPool pool(3);
  std::mt19937 rng(13);
  for (int64_t n : kRows)
    for (int64_t f : kCols) {
      OwnedTensor fused = random_tensor(DType::kF32, {n, 2 * f}, rng, -8.0f, 8.0f);  // [gate | up]
      const Tensor gate = fused.tensor.slice(1, 0, f), up = fused.tensor.slice(1, f, 2 * f);
      OwnedTensor got = OwnedTensor::make(DType::kF32, {n, f});
      OwnedTensor want = OwnedTensor::make(DType::kF32, {n, f});
      cpu::silu_mul(pool, got.tensor, gate, up);
      ref::silu_mul(want.tensor, gate, up);
      expect_close(got.tensor, want.tensor, 1e-6f, strfmt("silu_mul %lldx%lld", (long long)n, (long long)f));
      const float g = fused.tensor.ptr<float>()[0], u = fused.tensor.ptr<float>()[f];
      EXPECT_NEAR(got.tensor.ptr<float>()[0], g / (1.0f + std::exp(-g)) * u,
                  1e-5f * (1.0f + std::fabs(g * u)));
    }
}

TEST(Softmax, MatchesReferenceAndSumsToOne) {
  ThreadPool pool(3);
  std::mt19937 rng(14);
  for (int64_t n : kRows)
    for (int64_t d : kCols) {
      OwnedTensor x = random_tensor(DType::kF32, {n, d + 3}, rng, -30.0f, 30.0f);
      OwnedTensor x_ref = clone(x.tensor);
      cpu::softmax(pool, x.tensor.slice(1, 0, d));
      ref::softmax(x_ref.tensor.slice(1, 0, d));
      expect_close(x.tensor, x_ref.tensor, 1e-6f, strfmt("softmax %lldx%lld", (long long)n, (long long)d));
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < d; ++j) sum += x.tensor.ptr<float>()[i * (d + 3) + j];
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
}

TEST(Argmax, FirstMaximumWinsAndNanNeverWins) {
  ThreadPool pool(3);
  const float nan = std::nanf("");
  const float inf = INFINITY;
  const std::vector<std::vector<float>> rows = {
      {1.0f, 3.0f, 3.0f, 2.0f},  // tie: first
      {nan, -5.0f, nan, -4.0f},  // NaN ignored
      {nan, nan, nan, nan},      // all NaN: -1
      {-inf, -inf, -inf, -inf},  // all -inf: first
      {nan, -inf, 7.0f, inf},    // +inf wins
      {2.0f, 2.0f, 2.0f, 2.0f},  // all equal: first
  };
  const int32_t expected[] = {1, 3, -1, 0, 3, 0};
  OwnedTensor x = OwnedTensor::make(DType::kF32, {6, 4});
  for (size_t i = 0; i < rows.size(); ++i) std::memcpy(x.tensor.ptr<float>() + i * 4, rows[i].data(), 16);
  OwnedTensor got = OwnedTensor::make(DType::kI32, {6});
  OwnedTensor want = OwnedTensor::make(DType::kI32, {6});
  cpu::argmax(pool, got.tensor, x.tensor);
  ref::argmax(want.tensor, x.tensor);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(got.tensor.ptr<int32_t>()[i], expected[i]) << "row " << i;
    EXPECT_EQ(want.tensor.ptr<int32_t>()[i], expected[i]) << "ref row " << i;
  }
}

TEST(Argmax, MatchesReferenceOnRandomRows) {
  ThreadPool pool(3);
  std::mt19937 rng(15);
  for (int64_t n : kRows)
    for (int64_t d : {1, 2, 3, 31, 33, 127, 4095, 151936}) {
      if (n > 3 && d > 4095) continue;
      OwnedTensor x = random_tensor(DType::kF32, {n, d}, rng);
      OwnedTensor got = OwnedTensor::make(DType::kI32, {n});
      OwnedTensor want = OwnedTensor::make(DType::kI32, {n});
      cpu::argmax(pool, got.tensor, x.tensor);
      ref::argmax(want.tensor, x.tensor);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t g = got.tensor.ptr<int32_t>()[i];
        ASSERT_EQ(g, want.tensor.ptr<int32_t>()[i]) << n << "x" << d << " row " << i;
        for (int64_t j = 0; j < d; ++j)
          ASSERT_LE(x.tensor.ptr<float>()[i * d + j], x.tensor.ptr<float>()[i * d + g]);
      }
    }
}

}  // namespace
}  // namespace bunsen::kernels::test
