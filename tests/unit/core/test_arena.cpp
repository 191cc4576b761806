// Arena: the bump allocator over its own host Buffer and over caller-owned memory on another device
// (the CUDA workspace): alignment, the device tag on every tensor, reset, the high-water mark and the
// error when a step asks for more than the arena holds.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/buffer.h"
#include "core/status.h"

namespace bunsen {
namespace {

TEST(Arena, OwnedArenaHandsOutAlignedHostTensors) {
  Arena a(1000);
  EXPECT_EQ(a.capacity(), 1000u);
  Tensor x = a.alloc(DType::kF32, {3, 5});
  Tensor y = a.alloc(DType::kBF16, {7});
  EXPECT_TRUE(x.device.is_cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data) % kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data) % kAlignment, 0u);
  EXPECT_EQ(static_cast<char*>(y.data) - static_cast<char*>(x.data), 64);  // 60 bytes rounded up
  EXPECT_EQ(a.used(), 128u);
  x.ptr<float>()[14] = 1.5f;  // the memory is real and writable
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.high_water(), 128u);
  EXPECT_EQ(a.alloc(DType::kF32, {1}).data, x.data);
}

TEST(Arena, ExternalArenaTagsTensorsWithItsDeviceAndStaysInsideTheRegion) {
  Buffer region(256);
  const Device dev = Device::cuda(2);
  Arena a(region.data(), 256, dev);  // a device tag only: nothing here dereferences the tensors
  EXPECT_EQ(a.capacity(), 256u);
  EXPECT_EQ(a.device(), dev);
  Tensor x = a.alloc(DType::kBF16, {2, 40});  // 160 bytes
  Tensor y = a.alloc(DType::kI32, {16});      // 64 bytes
  EXPECT_EQ(x.device, dev);
  EXPECT_EQ(y.device, dev);
  EXPECT_EQ(x.data, region.data());
  EXPECT_EQ(static_cast<char*>(y.data) - static_cast<char*>(region.data()), 192);
  try {
    a.alloc(DType::kF32, {1});
    ADD_FAILURE() << "allocated past the end of a 256-byte arena";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "workspace");
    EXPECT_NE(std::string(e.what()).find("256-byte"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bunsen
