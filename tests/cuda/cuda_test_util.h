// Helpers for the CUDA op tests: a fixture that skips without a GPU, device copies of host tensors
// (DeviceTensor), f32 copies of bf16 data for the references, per-dtype tolerances and a loop over the
// GEMV kernel paths. Reuses the kernel tests' random fill / readback / closeness helpers. Not a test by
// itself. Invariant: every device tensor starts as a copy of a host tensor, so outputs start as random
// garbage, never zeros.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "../kernels/kernel_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {

// Every CUDA test derives from this: it skips (and runs nothing) where no GPU is present.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cuda::set_linear_path_for_testing(cuda::LinearPath::kAuto);
    cuda::set_attention_splits_for_testing(0);
  }
  void TearDown() override {
    if (cuda::device_count() == 0) return;
    cuda::set_linear_path_for_testing(cuda::LinearPath::kAuto);
    cuda::set_attention_splits_for_testing(0);
  }
  Context ctx_;  // default stream
};

// A contiguous device copy of a host tensor (any dtype), with a device view of the same shape.
struct DeviceTensor {
  cuda::DeviceBuffer buffer;
  Tensor tensor;

  static DeviceTensor upload(const Tensor& host) {
    OwnedTensor c = host.is_contiguous() ? OwnedTensor{} : clone(host);
    const Tensor& src = host.is_contiguous() ? host : c.tensor;
    DeviceTensor d;
    d.buffer = cuda::DeviceBuffer(src.nbytes());
    cuda::copy_to_device(d.buffer.data(), src.data, src.nbytes());
    d.tensor = Tensor::view(d.buffer.data(), src.dtype, std::span<const int64_t>(src.shape, src.ndim),
                            Device::cuda(cuda::current_device()));
    return d;
  }

  // A host copy of the whole (contiguous) device tensor.
  OwnedTensor download() const {
    OwnedTensor h = OwnedTensor::make(tensor.dtype, std::span<const int64_t>(tensor.shape, tensor.ndim));
    cuda::copy_to_host(h.tensor.data, tensor.data, tensor.nbytes());
    return h;
  }
};

// Same values, stored as f32 (exact for f16/bf16): what the f32-only references read.
inline OwnedTensor to_f32(const Tensor& t) {
  OwnedTensor f = OwnedTensor::make(DType::kF32, std::span<const int64_t>(t.shape, t.ndim));
  const std::vector<float> v = values(t);
  std::copy(v.begin(), v.end(), f.tensor.ptr<float>());
  return f;
}

// A random host tensor in `dtype` and its exact f32 twin (the reference's input).
struct HostPair {
  OwnedTensor data, f32;
};

inline HostPair random_pair(DType dtype, std::initializer_list<int64_t> shape, std::mt19937& rng,
                            float lo = -1.0f, float hi = 1.0f) {
  HostPair p;
  p.data = random_tensor(dtype, shape, rng, lo, hi);
  p.f32 = to_f32(p.data.tensor);
  return p;
}

// Relative tolerance (to the reference's largest magnitude) for results stored in `out`, computed in
// f32 from inputs that are exact in f32: bf16 storage rounds to 2^-9 relative.
inline float tolerance(DType out, float f32_tol = 2e-5f) {
  return out == DType::kBF16 ? 1e-2f : f32_tol;
}

constexpr DType kActDtypes[] = {DType::kF32, DType::kBF16};

// Runs body once per GEMV kernel path: the default kernel (small-launch path off) and the small-launch
// kernel forced on every aligned launch (BUNSEN_GEMV_SMALL's path); then back to the environment's choice.
template <typename F>
inline void for_each_gemv_path(F&& body) {
  for (int mode : {0, 2}) {
    SCOPED_TRACE(mode == 0 ? "gemv default path" : "gemv small path");
    cuda::set_gemv_small_for_testing(mode);
    body();
  }
  cuda::set_gemv_small_for_testing(-1);
}

}  // namespace bunsen::kernels::test
