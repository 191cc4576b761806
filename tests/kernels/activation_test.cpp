// gelu_tanh_mul (GeGLU with PyTorch's tanh GELU) and softcap (Gemma's logit soft-cap): the CPU fast path
// against ref/ at odd sizes and on strided column slices, the ops.h entry points against the formulas
// evaluated in double, and the dispatcher's argument checks.
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kRows[] = {1, 2, 3, 5, 17};
constexpr int64_t kCols[] = {1, 2, 3, 31, 33, 127, 4095};

double gelu_tanh_f64(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GeluTanhMul, MatchesReferenceOnFusedColumnSlices) {
  ThreadPool pool(3);
  std::mt19937 rng(31);
  for (int64_t n : kRows)
    for (int64_t f : kCols) {
      OwnedTensor fused = random_tensor(DType::kF32, {n, 2 * f}, rng, -8.0f, 8.0f);  // [gate | up]
      const Tensor gate = fused.tensor.slice(1, 0, f), up = fused.tensor.slice(1, f, 2 * f);
      OwnedTensor got = OwnedTensor::make(DType::kF32, {n, f}), want = OwnedTensor::make(DType::kF32, {n, f});
      cpu::gelu_tanh_mul(pool, got.tensor, gate, up);
      ref::gelu_tanh_mul(want.tensor, gate, up);
      expect_close(got.tensor, want.tensor, 1e-6f, strfmt("gelu_tanh_mul %lldx%lld", (long long)n, (long long)f));
    }
}

TEST(GeluTanhMul, EqualsTheFormulaInDouble) {
  Context ctx;
  const std::vector<float> g = {0.0f, 1.0f, -1.0f, 3.0f, -3.0f, 0.5f, -0.25f, 10.0f, -10.0f, 1e-3f, 40.0f, -40.0f};
  const int64_t f = static_cast<int64_t>(g.size());
  OwnedTensor gate = OwnedTensor::make(DType::kF32, {1, f}), up = OwnedTensor::make(DType::kF32, {1, f});
  for (int64_t j = 0; j < f; ++j) {
    gate.tensor.ptr<float>()[j] = g[static_cast<size_t>(j)];
    up.tensor.ptr<float>()[j] = 1.5f - 0.25f * static_cast<float>(j);
  }
  OwnedTensor out = OwnedTensor::make(DType::kF32, {1, f});
  gelu_tanh_mul(ctx, out.tensor, gate.tensor, up.tensor);
  for (int64_t j = 0; j < f; ++j) {
    const double want = gelu_tanh_f64(g[static_cast<size_t>(j)]) * up.tensor.ptr<float>()[j];
    EXPECT_NEAR(out.tensor.ptr<float>()[j], want, 2e-6 * (1.0 + std::fabs(want))) << "g = " << g[static_cast<size_t>(j)];
  }
  // Known values of PyTorch's gelu(approximate="tanh"): gelu(1) = 0.841192, gelu(-1) = -0.158808.
  EXPECT_NEAR(gelu_tanh_f64(1.0), 0.8411920, 1e-6);
  EXPECT_NEAR(gelu_tanh_f64(-1.0), -0.1588080, 1e-6);
  EXPECT_EQ(out.tensor.ptr<float>()[0], 0.0f);
}

TEST(Softcap, MatchesReferenceAndTheFormula) {
  ThreadPool pool(3);
  std::mt19937 rng(32);
  for (float cap : {0.5f, 10.0f, 30.0f})
    for (int64_t n : kRows)
      for (int64_t d : kCols) {
        OwnedTensor x = random_tensor(DType::kF32, {n, d + 2}, rng, -100.0f, 100.0f);
        OwnedTensor x_ref = clone(x.tensor), x0 = clone(x.tensor);
        cpu::softcap(pool, x.tensor.slice(1, 0, d), cap);
        ref::softcap(x_ref.tensor.slice(1, 0, d), cap);
        expect_close(x.tensor, x_ref.tensor, 1e-6f, strfmt("softcap %g %lldx%lld", cap, (long long)n, (long long)d));
        for (int64_t i = 0; i < n; ++i) {
          const float* got = static_cast<const float*>(x.tensor.row_ptr(i));
          const float* in = static_cast<const float*>(x0.tensor.row_ptr(i));
          for (int64_t j = 0; j < d + 2; ++j) {
            if (j >= d) {  // columns past the view are untouched
              ASSERT_EQ(got[j], in[j]);
              continue;
            }
            const double want = cap * std::tanh(static_cast<double>(in[j]) / cap);
            ASSERT_NEAR(got[j], want, 1e-6 * cap) << "x = " << in[j] << " cap " << cap;
            ASSERT_LE(std::fabs(got[j]), cap);
          }
        }
      }
}

TEST(Softcap, DispatchChecksTheCapAndTheDtype) {
  Context ctx;
  OwnedTensor x = OwnedTensor::make(DType::kF32, {2, 3});
  for (float cap : {0.0f, -1.0f, NAN, INFINITY}) {
    try {
      softcap(ctx, x.tensor, cap);
      ADD_FAILURE() << "cap " << cap << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("softcap:"), std::string::npos) << e.what();
    }
  }
  OwnedTensor xi = OwnedTensor::make(DType::kI32, {2, 3});
  EXPECT_THROW(softcap(ctx, xi.tensor, 5.0f), Error);
  OwnedTensor a = OwnedTensor::make(DType::kF32, {4, 8}), b = OwnedTensor::make(DType::kF32, {4, 9});
  try {
    gelu_tanh_mul(ctx, a.tensor, a.tensor, b.tensor);
    ADD_FAILURE() << "mismatched gate/up accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_tanh_mul:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
