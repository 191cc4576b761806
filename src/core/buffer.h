// Owning host memory: Buffer (one aligned allocation) and Arena (a bump allocator over one Buffer or over
// caller-owned memory on any device, the per-step workspace). Not device memory: CUDA buffers live in
// kernels/. Invariants: every allocation is kAlignment-aligned; Arena never grows after construction (the
// decode loop must not allocate), it throws when a step asks for more than it was sized for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "core/tensor.h"

namespace bunsen {

constexpr size_t kAlignment = 64;

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes, bool zero = true);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Tensor as(DType dtype, std::initializer_list<int64_t> shape) const;
  Tensor as(DType dtype, std::span<const int64_t> shape) const;

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Tensor plus the Buffer that owns it.
struct OwnedTensor {
  Buffer buffer;
  Tensor tensor;
  static OwnedTensor make(DType dtype, std::span<const int64_t> shape);
  static OwnedTensor make(DType dtype, std::initializer_list<int64_t> shape) {
    return make(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
};

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes) : buffer_(bytes, false), base_(buffer_.data()), capacity_(bytes) {}
  // Over `bytes` bytes at `base` (kAlignment-aligned) on `device`, owned by the caller and outliving the
  // arena; tensors it hands out carry `device`.
  Arena(void* base, size_t bytes, Device device) : base_(base), capacity_(bytes), device_(device) {}
  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape);
  Tensor alloc(DType dtype, std::span<const int64_t> shape);
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const { return capacity_; }
  Device device() const { return device_; }

 private:
  Buffer buffer_;  // empty when the arena runs over caller-owned memory
  void* base_ = nullptr;
  size_t capacity_ = 0;
  Device device_{};
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace bunsen
