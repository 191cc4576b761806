// CUDA gather_rows against ref/ (f32/bf16 in and out, odd widths, strided views, an out-of-range row
// giving a NaN row), and the transfer layer: pinned memory with async copies, the staged upload with
// chunks smaller than (and not dividing) the ranges, the device facade of kernels/device.h, and the
// bandwidth probe returning a plausible figure.
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "kernels/device.h"

namespace bunsen::kernels::test {
namespace {

TEST_F(CudaTest, GatherRowsMatchesReference) {
  std::mt19937 rng(501);
  const int32_t ids[] = {6, 0, 2, 2, 5};
  for (DType x_dt : kActDtypes)
    for (DType out_dt : kActDtypes)
      for (int64_t d : {1, 3, 33, 4095}) {
        HostPair x = random_pair(x_dt, {7, d + 3}, rng);
        OwnedTensor rows = OwnedTensor::make(DType::kI32, {5});
        std::memcpy(rows.tensor.data, ids, sizeof(ids));
        OwnedTensor want = OwnedTensor::make(DType::kF32, {5, d});
        ref::gather_rows(want.tensor, x.f32.tensor.slice(1, 1, 1 + d), rows.tensor);
        DeviceTensor dx = DeviceTensor::upload(x.data.tensor), dr = DeviceTensor::upload(rows.tensor);
        DeviceTensor out = DeviceTensor::upload(random_tensor(out_dt, {5, d}, rng).tensor);
        gather_rows(ctx_, out.tensor, dx.tensor.slice(1, 1, 1 + d), dr.tensor);
        // Rows are copied exactly when the dtypes match, else rounded once to out's dtype.
        expect_close(
            out.download().tensor, want.tensor, out_dt == x_dt ? 0.0f : tolerance(out_dt),
            strfmt("gather_rows x %s out %s d %lld", dtype_name(x_dt), dtype_name(out_dt), (long long)d));
      }
}

TEST_F(CudaTest, GatherRowsOutOfRangeGivesNanRow) {
  std::mt19937 rng(502);
  OwnedTensor x = random_tensor(DType::kF32, {3, 16}, rng);
  OwnedTensor rows = OwnedTensor::make(DType::kI32, {2});
  rows.tensor.ptr<int32_t>()[0] = 3;
  rows.tensor.ptr<int32_t>()[1] = 1;
  DeviceTensor dx = DeviceTensor::upload(x.tensor), dr = DeviceTensor::upload(rows.tensor);
  DeviceTensor out = DeviceTensor::upload(random_tensor(DType::kF32, {2, 16}, rng).tensor);
  gather_rows(ctx_, out.tensor, dx.tensor, dr.tensor);
  OwnedTensor got = out.download();
  for (int64_t j = 0; j < 16; ++j) {
    EXPECT_TRUE(std::isnan(got.tensor.ptr<float>()[j])) << j;
    EXPECT_EQ(got.tensor.ptr<float>()[16 + j], x.tensor.ptr<float>()[16 + j]) << j;
  }
}

TEST_F(CudaTest, PinnedAsyncCopiesRoundTrip) {
  const size_t n = 100003;
  DeviceMemory host = DeviceMemory::pinned_host(n * sizeof(int32_t));
  DeviceMemory back = DeviceMemory::pinned_host(n * sizeof(int32_t));
  DeviceMemory dev = DeviceMemory::allocate(Device::cuda(cuda::current_device()), n * sizeof(int32_t), true);
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_TRUE(dev.device().is_cuda());
  std::vector<int32_t> zeros(n, -1);
  copy_async(ctx_, zeros.data(), dev.data(), n * sizeof(int32_t));
  synchronize(ctx_);
  EXPECT_EQ(std::count(zeros.begin(), zeros.end(), 0), static_cast<long>(n)) << "allocate(zero=true) zeroes";
  std::iota(static_cast<int32_t*>(host.data()), static_cast<int32_t*>(host.data()) + n, 11);
  copy_async(ctx_, dev.data(), host.data(), n * sizeof(int32_t));
  copy_async(ctx_, back.data(), dev.data(), n * sizeof(int32_t));
  synchronize(ctx_);
  EXPECT_EQ(std::memcmp(host.data(), back.data(), n * sizeof(int32_t)), 0);
}

TEST_F(CudaTest, StagedUploadCopiesEveryRangeWithOddChunks) {
  std::mt19937 rng(503);
  const Device dev = Device::cuda(cuda::current_device());
  const size_t sizes[] = {1, 1000, 4096, 77777, 3};
  size_t total = 0;
  for (size_t s : sizes) total += s + 256;
  DeviceMemory dst = DeviceMemory::allocate(dev, total);
  std::vector<std::vector<uint8_t>> src;
  std::vector<HostToDevice> ranges;
  size_t off = 0;
  for (size_t s : sizes) {
    src.emplace_back(s);
    for (auto& b : src.back()) b = static_cast<uint8_t>(rng());
    ranges.push_back({static_cast<char*>(dst.data()) + off, src.back().data(), s});
    off += s + 256;
  }
  std::vector<size_t> seen;
  upload(dev, ranges, 1000, [&](size_t done) { seen.push_back(done); });  // 1000-byte chunks: many per range
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), 1u + 1000 + 4096 + 77777 + 3);
  for (size_t i = 0; i < ranges.size(); ++i) {
    std::vector<uint8_t> back(ranges[i].bytes);
    cuda::copy_to_host(back.data(), ranges[i].dst, back.size());
    EXPECT_EQ(back, src[i]) << "range " << i;
  }
}

TEST_F(CudaTest, DeviceFacadeReportsDevicesAndBandwidth) {
  EXPECT_TRUE(cuda_built());
  EXPECT_EQ(cuda_device_count(), cuda::device_count());
  EXPECT_FALSE(cuda_device_name(0).empty());
  EXPECT_THROW(set_current_device(Device::cuda(cuda_device_count())), Error);
  set_current_device(Device::cuda(0));
  const double gbps = device_read_bandwidth_gbps(Device::cuda(0), size_t{256} << 20, 3);
  EXPECT_GT(gbps, 50.0);     // any discrete GPU of the last decade
  EXPECT_LT(gbps, 20000.0);  // and no card reads 20 TB/s: a timing bug would show here
}

}  // namespace
}  // namespace bunsen::kernels::test
