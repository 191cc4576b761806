// CUDA row-wise ops through ops.h (embedding, rms_norm, add_scaled, scale, silu_mul, softmax, argmax)
// against kernels/ref on the same inputs, at odd widths (1, 3, 31, 33, 127, 4095), f32 and bf16
// activations, every weight dtype, strided (column-slice) views, and their NaN/tie/out-of-range rules.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/device.h"

namespace bunsen::kernels::test {
namespace {

constexpr int64_t kWidths[] = {1, 3, 31, 33, 127, 4095};

TEST_F(CudaTest, EmbeddingMatchesReference) {
  std::mt19937 rng(101);
  const int64_t vocab = 50, n = 17;
  for (DType table_dt : kWeightDtypes)
    for (DType out_dt : kActDtypes)
      for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{31}, int64_t{33}, int64_t{127}, int64_t{4095},
                        int64_t{8}, int64_t{4096}, int64_t{8192}}) {
        // Widths of whole 16-byte groups at an aligned column take the vectorised kernel.
        const int64_t off = d % 8 == 0 ? 8 : 2;
        OwnedTensor table = random_tensor(table_dt, {vocab, d}, rng);
        OwnedTensor ids = OwnedTensor::make(DType::kI32, {n});
        for (int64_t i = 0; i < n; ++i) ids.tensor.ptr<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
        OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
        ref::embedding(want.tensor, table.tensor, ids.tensor, 0.5f);
        // out is a column slice of a wider garbage-filled tensor: the pad columns must stay as they were.
        OwnedTensor out_host = random_tensor(out_dt, {n, d + 2 * off}, rng);
        DeviceTensor t = DeviceTensor::upload(table.tensor), i = DeviceTensor::upload(ids.tensor);
        DeviceTensor o = DeviceTensor::upload(out_host.tensor);
        embedding(ctx_, o.tensor.slice(1, off, off + d), t.tensor, i.tensor, 0.5f);
        OwnedTensor got = o.download();
        const std::string what = strfmt("embedding table %s out %s d %lld", dtype_name(table_dt),
                                        dtype_name(out_dt), (long long)d);
        expect_close(got.tensor.slice(1, off, off + d), want.tensor, tolerance(out_dt, 0.0f), what);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c : {int64_t{0}, off - 1, off + d, 2 * off + d - 1})
            ASSERT_EQ(load_f(got.tensor.row_ptr(r), out_dt, c), load_f(out_host.tensor.row_ptr(r), out_dt, c))
                << what;
      }
}

TEST_F(CudaTest, EmbeddingIdOutOfRangeGivesNanRowWithoutFaulting) {
  std::mt19937 rng(102);
  for (int64_t d : {int64_t{33}, int64_t{64}}) {  // the plain and the vectorised kernel
    OwnedTensor table = random_tensor(DType::kBF16, {10, d}, rng);
    OwnedTensor ids = OwnedTensor::make(DType::kI32, {3});
    const int32_t id_values[3] = {-1, 4, 10};
    std::memcpy(ids.tensor.data, id_values, sizeof(id_values));
    DeviceTensor t = DeviceTensor::upload(table.tensor), i = DeviceTensor::upload(ids.tensor);
    DeviceTensor o = DeviceTensor::upload(random_tensor(DType::kF32, {3, d}, rng).tensor);
    embedding(ctx_, o.tensor, t.tensor, i.tensor);
    OwnedTensor got = o.download();
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_TRUE(std::isnan(got.tensor.ptr<float>()[j])) << j;
      EXPECT_EQ(got.tensor.ptr<float>()[d + j], load_f(table.tensor.row_ptr(4), DType::kBF16, j)) << j;
      EXPECT_TRUE(std::isnan(got.tensor.ptr<float>()[2 * d + j])) << j;
    }
  }
}

TEST_F(CudaTest, RmsNormMatchesReferenceIncludingInPlaceAndOffset) {
  std::mt19937 rng(103);
  for (DType w_dt : kWeightDtypes)
    for (DType x_dt : kActDtypes)
      for (DType out_dt : kActDtypes)
        for (int64_t d : kWidths) {
          const int64_t n = d == 4095 ? 3 : 17;
          const float offset = w_dt == DType::kBF16 ? 1.0f : 0.0f;  // Gemma's (1 + w)
          HostPair x = random_pair(x_dt, {n, d}, rng, -3.0f, 3.0f);
          OwnedTensor w = random_tensor(w_dt, {d}, rng);
          OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
          ref::rms_norm(want.tensor, x.f32.tensor, w.tensor, 1e-6f, offset);
          DeviceTensor xd = DeviceTensor::upload(x.data.tensor), wd = DeviceTensor::upload(w.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(out_dt, {n, d}, rng).tensor);
          rms_norm(ctx_, od.tensor, xd.tensor, wd.tensor, 1e-6f, offset);
          const std::string what = strfmt("rms_norm w %s x %s out %s d %lld", dtype_name(w_dt),
                                          dtype_name(x_dt), dtype_name(out_dt), (long long)d);
          expect_close(od.download().tensor, want.tensor, tolerance(out_dt), what);
          if (out_dt == x_dt) {  // in place: out aliases x
            rms_norm(ctx_, xd.tensor, xd.tensor, wd.tensor, 1e-6f, offset);
            expect_close(xd.download().tensor, want.tensor, tolerance(out_dt), what + " in place");
          }
        }
}

// The fused residual add + norm equals ref add_scaled then ref rms_norm, for x and the norm output, at odd
// widths (incl. the 8192-wide limit), strided y and every dtype mix.
TEST_F(CudaTest, AddRmsNormMatchesReferenceAddThenNorm) {
  std::mt19937 rng(105);
  for (DType w_dt : kWeightDtypes)
    for (DType y_dt : kActDtypes)
      for (DType out_dt : kActDtypes)
        for (int64_t d : {int64_t{1}, int64_t{33}, int64_t{896}, int64_t{4095}, int64_t{8192}}) {
          const int64_t n = 5;
          const float offset = w_dt == DType::kBF16 ? 1.0f : 0.0f;
          HostPair x = random_pair(DType::kF32, {n, d}, rng, -3.0f, 3.0f);
          HostPair y_full = random_pair(y_dt, {n, d + 2}, rng);
          OwnedTensor w = random_tensor(w_dt, {d}, rng);
          OwnedTensor want_x = clone(x.f32.tensor);
          ref::add_scaled(want_x.tensor, y_full.f32.tensor.slice(1, 1, 1 + d), 0.5f);
          OwnedTensor want = OwnedTensor::make(DType::kF32, {n, d});
          ref::rms_norm(want.tensor, want_x.tensor, w.tensor, 1e-6f, offset);
          DeviceTensor xd = DeviceTensor::upload(x.data.tensor), yd = DeviceTensor::upload(y_full.data.tensor);
          DeviceTensor wd = DeviceTensor::upload(w.tensor);
          DeviceTensor od = DeviceTensor::upload(random_tensor(out_dt, {n, d}, rng).tensor);
          add_rms_norm(ctx_, od.tensor, xd.tensor, yd.tensor.slice(1, 1, 1 + d), wd.tensor, 1e-6f, 0.5f, offset);
          const std::string what = strfmt("add_rms_norm w %s y %s out %s d %lld", dtype_name(w_dt),
                                          dtype_name(y_dt), dtype_name(out_dt), (long long)d);
          expect_close(xd.download().tensor, want_x.tensor, tolerance(DType::kF32), what + " x");
          expect_close(od.download().tensor, want.tensor, tolerance(out_dt), what + " out");
        }
}

TEST_F(CudaTest, AddScaledAndScaleMatchReferenceOnStridedRows) {
  std::mt19937 rng(104);
  for (DType x_dt : kActDtypes)
    for (DType y_dt : kActDtypes)
      for (int64_t d : kWidths) {
        const int64_t n = 9;
        HostPair x = random_pair(x_dt, {n, d}, rng);
        HostPair y_full = random_pair(y_dt, {n, d + 3}, rng);  // y is a column slice: row stride d + 3
        OwnedTensor want = clone(x.f32.tensor);
        ref::add_scaled(want.tensor, y_full.f32.tensor.slice(1, 1, 1 + d), -0.75f);
        DeviceTensor xd = DeviceTensor::upload(x.data.tensor), yd = DeviceTensor::upload(y_full.data.tensor);
        add_scaled(ctx_, xd.tensor, yd.tensor.slice(1, 1, 1 + d), -0.75f);
        const std::string what =
            strfmt("add_scaled x %s y %s d %lld", dtype_name(x_dt), dtype_name(y_dt), (long long)d);
        OwnedTensor got = xd.download();
        expect_close(got.tensor, want.tensor, tolerance(x_dt), what);
        ref::scale(want.tensor, 3.0f);
        scale(ctx_, xd.tensor, 3.0f);
        // Scaling the already-rounded GPU result: compare against the reference scaled from it.
        OwnedTensor want_scaled = to_f32(got.tensor);
        ref::scale(want_scaled.tensor, 3.0f);
        expect_close(xd.download().tensor, want_scaled.tensor, tolerance(x_dt, 0.0f), what + " then scale");
        expect_close(xd.download().tensor, want.tensor, tolerance(x_dt), what + " then scale (vs f32 chain)");
      }
}

TEST_F(CudaTest, SiluMulMatchesReferenceOnFusedGateUp) {
  std::mt19937 rng(105);
  for (DType in_dt : kActDtypes)
    for (DType out_dt : kActDtypes)
      for (int64_t f : kWidths) {
        const int64_t m = 5;
        HostPair fused = random_pair(in_dt, {m, 2 * f}, rng, -6.0f, 6.0f);  // [gate | up] per row
        OwnedTensor want = OwnedTensor::make(DType::kF32, {m, f});
        ref::silu_mul(want.tensor, fused.f32.tensor.slice(1, 0, f), fused.f32.tensor.slice(1, f, 2 * f));
        DeviceTensor fd = DeviceTensor::upload(fused.data.tensor);
        DeviceTensor od = DeviceTensor::upload(random_tensor(out_dt, {m, f}, rng).tensor);
        silu_mul(ctx_, od.tensor, fd.tensor.slice(1, 0, f), fd.tensor.slice(1, f, 2 * f));
        expect_close(
            od.download().tensor, want.tensor, tolerance(out_dt),
            strfmt("silu_mul in %s out %s f %lld", dtype_name(in_dt), dtype_name(out_dt), (long long)f));
      }
}

TEST_F(CudaTest, SoftmaxMatchesReferenceIncludingMaskedEntriesAndVocabRows) {
  std::mt19937 rng(106);
  for (DType dt : kActDtypes)
    for (int64_t n :
         {int64_t{1}, int64_t{3}, int64_t{31}, int64_t{33}, int64_t{127}, int64_t{4095}, int64_t{151936}}) {
      const int64_t m = n > 10000 ? 2 : 6;
      HostPair x = random_pair(dt, {m, n}, rng, -20.0f, 20.0f);
      if (n > 3) {  // masked logits, as a sampler's -inf bias would leave them
        store_f(x.data.tensor.row_ptr(1), dt, 2, -INFINITY);
        x.f32 = to_f32(x.data.tensor);
      }
      OwnedTensor want = clone(x.f32.tensor);
      ref::softmax(want.tensor);
      std::vector<float> exact(static_cast<size_t>(m * n));  // the same softmax in double
      for (int64_t i = 0; i < m; ++i) {
        const float* r = x.f32.tensor.ptr<float>() + i * n;
        const double mx = *std::max_element(r, r + n);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(double(r[j]) - mx);
        for (int64_t j = 0; j < n; ++j)
          exact[i * n + j] = static_cast<float>(std::exp(double(r[j]) - mx) / sum);
      }
      DeviceTensor xd = DeviceTensor::upload(x.data.tensor);
      softmax(ctx_, xd.tensor);
      const std::vector<float> got = values(xd.download().tensor);
      const std::string what = strfmt("softmax %s n %lld", dtype_name(dt), (long long)n);
      expect_close(got, exact, tolerance(dt, 1e-5f), what + " vs double");
      // ref sums a row sequentially in f32: ~1e-4 relative error over a vocabulary-sized row.
      expect_close(got, values(want.tensor), tolerance(dt, n > 10000 ? 2e-4f : 1e-5f), what + " vs ref");
    }
}

// Every split of a row over blocks (one block per row, several with a merge launch, chosen from the shapes:
// -1) gives ref::argmax's index: the first maximum, -0 equal to +0, NaN never winning, -1 for an all-NaN row;
// ties and the winner sit in different blocks' columns for the split runs.
TEST_F(CudaTest, ArgmaxFirstMaximumNanNeverWins) {
  struct Reset {
    ~Reset() { cuda::set_argmax_parts_for_testing(0); }
  } reset;
  std::mt19937 rng(107);
  for (int parts : {-1, 1, 3, 64})
    for (DType dt : kActDtypes)
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{33}, int64_t{4095}, int64_t{128256}, int64_t{151936},
                        int64_t{262144}}) {
        cuda::set_argmax_parts_for_testing(parts);
        const int64_t m = 8;
        OwnedTensor x = random_tensor(dt, {m, n}, rng, -5.0f, 5.0f);
        if (n >= 3) {
          store_f(x.tensor.row_ptr(1), dt, n - 1, 100.0f);  // ties: first one wins
          store_f(x.tensor.row_ptr(1), dt, 1, 100.0f);
          store_f(x.tensor.row_ptr(2), dt, 0, NAN);  // NaN never wins
          store_f(x.tensor.row_ptr(2), dt, n / 2, 50.0f);
          for (int64_t j = 0; j < n; ++j) store_f(x.tensor.row_ptr(6), dt, j, -1.0f);  // -0 ties +0
          store_f(x.tensor.row_ptr(6), dt, n - 1, 0.0f);
          store_f(x.tensor.row_ptr(6), dt, 1, -0.0f);
        }
        for (int64_t j = 0; j < n; ++j) store_f(x.tensor.row_ptr(3), dt, j, NAN);        // all NaN -> -1
        for (int64_t j = 0; j < n; ++j) store_f(x.tensor.row_ptr(4), dt, j, -INFINITY);  // all -inf -> 0
        store_f(x.tensor.row_ptr(5), dt, n - 1, INFINITY);
        for (int64_t j = 0; j + 1 < n; ++j) store_f(x.tensor.row_ptr(7), dt, j, NAN);  // one value, the last
        store_f(x.tensor.row_ptr(7), dt, n - 1, -3.0f);
        OwnedTensor want = OwnedTensor::make(DType::kI32, {m});
        ref::argmax(want.tensor, to_f32(x.tensor).tensor);
        DeviceTensor xd = DeviceTensor::upload(x.tensor);
        DeviceTensor od = DeviceTensor::upload(want.tensor);
        cuda::copy_to_device(od.tensor.data, std::vector<int32_t>(m, -7).data(), m * sizeof(int32_t));
        // The ids also land in pinned host memory, written by the kernel (the Runner's greedy decode).
        DeviceMemory host = DeviceMemory::pinned_host(m * sizeof(int32_t));
        auto* host_ids = static_cast<int32_t*>(host.data());
        std::fill_n(host_ids, m, -9);
        argmax(ctx_, od.tensor, xd.tensor, host_ids);
        kernels::synchronize(ctx_);
        OwnedTensor got = od.download();
        const std::string what =
            strfmt("parts %d %s n %lld", parts, dtype_name(dt), static_cast<long long>(n));
        for (int64_t i = 0; i < m; ++i) {
          EXPECT_EQ(got.tensor.ptr<int32_t>()[i], want.tensor.ptr<int32_t>()[i]) << what << " row " << i;
          EXPECT_EQ(host_ids[i], want.tensor.ptr<int32_t>()[i]) << what << " host row " << i;
        }
        if (n >= 3) {
          EXPECT_EQ(got.tensor.ptr<int32_t>()[1], 1) << what;
          EXPECT_EQ(got.tensor.ptr<int32_t>()[6], 1) << what;
        }
        EXPECT_EQ(got.tensor.ptr<int32_t>()[3], -1) << what;  // all NaN
        EXPECT_EQ(got.tensor.ptr<int32_t>()[4], 0) << what;
        EXPECT_EQ(got.tensor.ptr<int32_t>()[5], n - 1) << what;
        EXPECT_EQ(got.tensor.ptr<int32_t>()[7], n - 1) << what;
      }
}

}  // namespace
}  // namespace bunsen::kernels::test
