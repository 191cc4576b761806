// gather_rows (the logit-row gather of a step): the CPU path and ref/ against a direct element check on
// odd widths and strided (column-slice) views, repeated and reordered rows, and ops.h's validation
// (out-of-range row, width mismatch, index dtype, device mix).
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

OwnedTensor row_ids(std::initializer_list<int32_t> v) {
  OwnedTensor t = OwnedTensor::make(DType::kI32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.tensor.ptr<int32_t>());
  return t;
}

TEST(GatherRows, CopiesTheNamedRowsOnStridedViews) {
  ThreadPool pool(3);
  Context ctx{&pool};
  std::mt19937 rng(71);
  for (int64_t d : {1, 3, 33, 4095}) {
    OwnedTensor wide = random_tensor(DType::kF32, {9, d + 5}, rng);
    Tensor x = wide.tensor.slice(1, 2, 2 + d);  // row stride d + 5
    OwnedTensor rows = row_ids({8, 0, 3, 3, 7});
    OwnedTensor out_wide = random_tensor(DType::kF32, {5, d + 2}, rng);
    OwnedTensor before = clone(out_wide.tensor);
    Tensor out = out_wide.tensor.slice(1, 1, 1 + d);
    OwnedTensor want = OwnedTensor::make(DType::kF32, {5, d});
    ref::gather_rows(want.tensor, x, rows.tensor);
    gather_rows(ctx, out, x, rows.tensor);
    expect_close(out, want.tensor, 0.0f, strfmt("gather_rows d=%lld", (long long)d));
    for (int64_t r = 0; r < 5; ++r) {
      const int32_t src = rows.tensor.ptr<int32_t>()[r];
      for (int64_t j = 0; j < d; ++j)
        ASSERT_EQ(static_cast<float*>(out.row_ptr(r))[j], static_cast<float*>(x.row_ptr(src))[j])
            << r << "," << j;
      // Columns outside the slice are untouched.
      ASSERT_EQ(out_wide.tensor.ptr<float>()[r * (d + 2)], before.tensor.ptr<float>()[r * (d + 2)]);
      ASSERT_EQ(out_wide.tensor.ptr<float>()[r * (d + 2) + d + 1],
                before.tensor.ptr<float>()[r * (d + 2) + d + 1]);
    }
  }
}

TEST(GatherRows, ZeroRowsIsANoOp) {
  Context ctx;
  std::mt19937 rng(72);
  OwnedTensor x = random_tensor(DType::kF32, {4, 8}, rng);
  OwnedTensor out = OwnedTensor::make(DType::kF32, {0, 8});
  OwnedTensor rows = OwnedTensor::make(DType::kI32, {0});
  gather_rows(ctx, out.tensor, x.tensor, rows.tensor);
}

TEST(GatherRows, ValidatesRowsShapesAndDtypes) {
  Context ctx;
  std::mt19937 rng(73);
  OwnedTensor x = random_tensor(DType::kF32, {4, 8}, rng);
  OwnedTensor out = OwnedTensor::make(DType::kF32, {2, 8});
  OwnedTensor bad_row = row_ids({1, 4});
  expect_kernel_error([&] { gather_rows(ctx, out.tensor, x.tensor, bad_row.tensor); },
                      {"gather_rows:", "row 4 at 1 is out of range", "[4, 8] f32"});
  OwnedTensor negative = row_ids({-1, 0});
  expect_kernel_error([&] { gather_rows(ctx, out.tensor, x.tensor, negative.tensor); },
                      {"gather_rows:", "row -1"});
  OwnedTensor narrow = OwnedTensor::make(DType::kF32, {2, 7});
  OwnedTensor ok = row_ids({0, 1});
  expect_kernel_error([&] { gather_rows(ctx, narrow.tensor, x.tensor, ok.tensor); },
                      {"gather_rows:", "disagree on d"});
  OwnedTensor i64 = OwnedTensor::make(DType::kI64, {2});
  expect_kernel_error([&] { gather_rows(ctx, out.tensor, x.tensor, i64.tensor); }, {"gather_rows:", "i32"});
  OwnedTensor three = row_ids({0, 1, 2});
  expect_kernel_error([&] { gather_rows(ctx, out.tensor, x.tensor, three.tensor); },
                      {"gather_rows:", "2 elements"});
  OwnedTensor bf = OwnedTensor::make(DType::kBF16, {2, 8});
  expect_kernel_error([&] { gather_rows(ctx, bf.tensor, x.tensor, ok.tensor); }, {"gather_rows:", "f32"});
  Tensor on_gpu = x.tensor;
  on_gpu.device = Device::cuda(0);
  expect_kernel_error([&] { gather_rows(ctx, out.tensor, on_gpu, ok.tensor); }, {"gather_rows:"});
}

}  // namespace
}  // namespace bunsen::kernels::test
