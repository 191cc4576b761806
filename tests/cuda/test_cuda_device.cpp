// CUDA tests (ctest label `cuda`): run on the GPU machine, skip cleanly where no GPU is present.
#include <gtest/gtest.h>

#include "kernels/cuda/device_info.h"

namespace bunsen::kernels {
namespace {

TEST(CudaDevice, CountAndNamesAgree) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda::device_name(n), "");  // one past the last device
  EXPECT_EQ(cuda::device_name(-1), "");
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  for (int i = 0; i < n; ++i) EXPECT_FALSE(cuda::device_name(i).empty()) << i;
}

}  // namespace
}  // namespace bunsen::kernels
