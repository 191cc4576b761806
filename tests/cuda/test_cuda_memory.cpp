// CUDA device memory and routing: DeviceBuffer round trips and moves, a failed allocation throwing
// Error("cuda", ...) with the op and size, the per-stream scratch arena (grows, never shrinks), and
// ops.h validation of CUDA tensors (dtype/shape errors before any launch; device mismatches named).
#include <cuda_runtime.h>

#include <numeric>

#include "cuda_test_util.h"

namespace bunsen::kernels::test {
namespace {

TEST_F(CudaTest, DeviceBufferRoundTripsAndMoves) {
  std::vector<int32_t> src(1000), back(1000, -1);
  std::iota(src.begin(), src.end(), 7);
  cuda::DeviceBuffer a(src.size() * sizeof(int32_t));
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), src.size() * sizeof(int32_t));
  cuda::copy_to_device(a.data(), src.data(), a.size());
  cuda::DeviceBuffer b(a.size());
  cuda::copy_device_to_device(b.data(), a.data(), a.size());
  cuda::DeviceBuffer moved(std::move(b));
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
  cuda::copy_to_host(back.data(), moved.data(), moved.size());
  EXPECT_EQ(back, src);
  cuda::DeviceBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(CudaTest, FailedAllocationNamesTheOpAndSize) {
  try {
    cuda::DeviceBuffer huge(size_t{1} << 50);
    ADD_FAILURE() << "a petabyte allocation succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "cuda");
    EXPECT_NE(e.message().find("cudaMalloc"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(std::to_string(size_t{1} << 50)), std::string::npos) << e.what();
  }
  cuda::DeviceBuffer small(16);
  // The failure left no sticky error behind: ordinary work still runs.
  std::vector<char> out(16, 1), zero(16, 0);
  cuda::copy_to_device(small.data(), zero.data(), 16);
  cuda::copy_to_host(out.data(), small.data(), 16);
  EXPECT_EQ(out, zero);
}

TEST_F(CudaTest, ScratchArenaGrowsOnlyWhenAskedForMore) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cuda::scratch_capacity(stream), 0u);
  cuda::reserve_scratch(stream, 3 << 20);
  const size_t first = cuda::scratch_capacity(stream);
  EXPECT_GE(first, size_t{3} << 20);
  cuda::reserve_scratch(stream, 1 << 20);
  EXPECT_EQ(cuda::scratch_capacity(stream), first);
  cuda::reserve_scratch(stream, first + 1);
  EXPECT_GT(cuda::scratch_capacity(stream), first);
  cuda::stream_destroy(stream);  // frees the arena: a new stream reusing the handle starts empty
  EXPECT_EQ(cuda::scratch_capacity(stream), 0u);
}

TEST_F(CudaTest, OpsValidateCudaTensorsBeforeLaunching) {
  std::mt19937 rng(401);
  DeviceTensor x = DeviceTensor::upload(random_tensor(DType::kBF16, {3, 64}, rng).tensor);
  DeviceTensor w = DeviceTensor::upload(random_tensor(DType::kBF16, {32, 65}, rng).tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kF32, {3, 32}, rng).tensor);
  DeviceTensor ids = DeviceTensor::upload(OwnedTensor::make(DType::kI64, {3}).tensor);
  OwnedTensor host = random_tensor(DType::kF32, {3, 64}, rng);
  expect_kernel_error([&] { linear(ctx_, out.tensor, x.tensor, w.tensor); },
                      {"linear:", "[3, 64] bf16", "disagree on k"});
  expect_kernel_error([&] { embedding(ctx_, x.tensor, w.tensor, ids.tensor); },
                      {"embedding:", "ids [3] i64", "i32"});
  expect_kernel_error([&] { add_scaled(ctx_, x.tensor, host.tensor); }, {"add_scaled:", "different devices"});
  Tensor other = x.tensor;
  other.device = Device::cuda(cuda::current_device() + 1);
  expect_kernel_error([&] { add_scaled(ctx_, x.tensor, other); }, {"add_scaled:", "different CUDA devices"});
  expect_kernel_error([&] { scale(ctx_, other, 2.0f); }, {"scale:", "current CUDA device"});
}

}  // namespace
}  // namespace bunsen::kernels::test
