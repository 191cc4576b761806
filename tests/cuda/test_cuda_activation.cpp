// CUDA gelu_tanh_mul (GeGLU) and softcap through ops.h against kernels/ref on the same inputs: odd widths,
// f32 and bf16 activations (mixed in and out), strided column slices whose neighbouring columns must stay
// untouched. Skips without a GPU.
#include <cmath>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kWidths[] = {1, 3, 31, 33, 127, 4095};

TEST_F(CudaTest, GeluTanhMulMatchesReferenceOnFusedGateUp) {
  std::mt19937 rng(181);
  for (DType in_dt : kActDtypes)
    for (DType out_dt : kActDtypes)
      for (int64_t f : kWidths)
        for (int64_t m : {1, 5}) {
          HostPair fused = random_pair(in_dt, {m, 2 * f}, rng, -6.0f, 6.0f);  // [gate | up] per row
          OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f});
          ref::gelu_tanh_mul(want.tensor, fused.f32.tensor.slice(1, 0, f), fused.f32.tensor.slice(1, f, 2 * f));
          DeviceTensor fd = DeviceTensor::upload(fused.data.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(out_dt, {m, f}, rng).tensor);
          gelu_tanh_mul(ctx_, od.tensor, fd.tensor.slice(1, 0, f), fd.tensor.slice(1, f, 2 * f));
          expect_close(od.download().tensor, want.tensor, tolerance(out_dt),
                       strfmt("gelu_tanh_mul in %s out %s m %lld f %lld", dtype_name(in_dt), dtype_name(out_dt),
                              (long long)m, (long long)f));
        }
}

TEST_F(CudaTest, SoftcapMatchesReferenceAndLeavesOtherColumns) {
  std::mt19937 rng(182);
  for (DType dt : kActDtypes)
    for (float cap : {0.5f, 30.0f})
      for (int64_t d : kWidths) {
        const int64_t n = 3;
        HostPair x = random_pair(dt, {n, d + 4}, rng, -80.0f, 80.0f);
        OwnedTensor want = clone(x.f32.tensor);
        ref::softcap(want.tensor.slice(1, 2, 2 + d), cap);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
        softcap(ctx_, xd.tensor.slice(1, 2, 2 + d), cap);
        OwnedTensor got = xd.download();
        const std::string what = strfmt("softcap %s cap %g d %lld", dtype_name(dt), cap, (long long)d);
        expect_close(got.tensor.slice(1, 2, 2 + d), want.tensor.slice(1, 2, 2 + d), tolerance(dt), what);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c : {int64_t{0}, int64_t{1}, d + 2, d + 3})
            ASSERT_EQ(load_f(got.tensor.row_ptr(r), dt, c), load_f(x.data.tensor.row_ptr(r), dt, c)) << what;
      }
}

}  // namespace
}  // namespace bunsen::kernels::test
