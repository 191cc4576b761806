// Helpers for the kernel tests: seeded random tensors in any float dtype, element readback, a
// tolerance check relative to the reference's largest magnitude, and a loop over the ISA levels this
// CPU supports. Not a test by itself. Invariant: every helper works on strided row views.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/float_io.h"
#include "kernels/rows.h"

namespace bunsen::kernels::test {

// Fills every element of a rows-walkable tensor with uniform values in [lo, hi), stored in t's dtype.
inline void fill_uniform(const Tensor& t, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const Rows r = as_rows(t);
  for (int64_t i = 0; i < r.n_rows; ++i)
    for (int64_t j = 0; j < r.n_cols; ++j) store_f(r.row<char>(i), t.dtype, j, dist(rng));
}

inline OwnedTensor random_tensor(DType dtype, std::initializer_list<int64_t> shape, std::mt19937& rng,
                                 float lo = -1.0f, float hi = 1.0f) {
  OwnedTensor t = OwnedTensor::make(dtype, shape);
  fill_uniform(t.tensor, rng, lo, hi);
  return t;
}

// A fresh contiguous copy (same dtype and shape) of a rows-walkable tensor.
inline OwnedTensor clone(const Tensor& t) {
  OwnedTensor c = OwnedTensor::make(t.dtype, std::span<const int64_t>(t.shape, t.ndim));
  const Rows src = as_rows(t), dst = as_rows(c.tensor);
  const size_t row_bytes = static_cast<size_t>(src.n_cols) * dtype_size(t.dtype);
  for (int64_t i = 0; i < src.n_rows; ++i) std::memcpy(dst.row<char>(i), src.row<char>(i), row_bytes);
  return c;
}

// All elements as f32, row-major.
inline std::vector<float> values(const Tensor& t) {
  const Rows r = as_rows(t);
  std::vector<float> v;
  v.reserve(static_cast<size_t>(r.n_rows * r.n_cols));
  for (int64_t i = 0; i < r.n_rows; ++i)
    for (int64_t j = 0; j < r.n_cols; ++j) v.push_back(load_f(r.row<char>(i), t.dtype, j));
  return v;
}

// max |got - want| <= rel_tol * max(max |want|, 1e-30), and NaN where (and only where) want has NaN.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel_tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 1e-30f, worst = 0.0f;
  size_t worst_at = 0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::fmax(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      ASSERT_EQ(std::isnan(want[i]), std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    const float d = std::fabs(got[i] - want[i]);
    if (d > worst) {
      worst = d;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, rel_tol * scale) << what << ": worst at " << worst_at << " got " << got[worst_at]
                                    << " want " << want[worst_at] << " (max |want| " << scale << ")";
}

inline void expect_close(const Tensor& got, const Tensor& want, float rel_tol, const std::string& what) {
  expect_close(values(got), values(want), rel_tol, what);
}

// Runs fn once per ISA level this CPU supports (scalar, AVX2, AVX-512), restoring the best level after.
inline void for_each_isa(const std::function<void(cpu::Isa)>& fn) {
  struct Restore {
    ~Restore() { cpu::set_isa_for_testing(cpu::detected_isa()); }
  } restore;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa_for_testing(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    fn(isa);
  }
}

// Runs fn and expects an Error from "kernels" whose message contains every one of `parts`.
inline void expect_kernel_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "kernels") << e.what();
    for (const std::string& p : parts) EXPECT_NE(e.message().find(p), std::string::npos) << e.what();
  }
}

constexpr DType kWeightDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace bunsen::kernels::test
