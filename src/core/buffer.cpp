// Aligned host allocations and the bump arena.
#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/status.h"

namespace bunsen {

Buffer::Buffer(size_t bytes, bool zero) : size_(bytes) {
  if (bytes == 0) return;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw Error("memory", strfmt("cannot allocate %zu bytes of host memory", bytes));
  if (zero) std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { std::free(data_); }

Buffer::Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Tensor Buffer::as(DType dtype, std::initializer_list<int64_t> shape) const {
  return as(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
}

Tensor Buffer::as(DType dtype, std::span<const int64_t> shape) const {
  Tensor t = Tensor::view(data_, dtype, shape);
  check(t.nbytes() <= size_, "memory", "view " + t.shape_str() + " larger than its buffer");
  return t;
}

OwnedTensor OwnedTensor::make(DType dtype, std::span<const int64_t> shape) {
  OwnedTensor o;
  Tensor probe = Tensor::view(nullptr, dtype, shape);
  o.buffer = Buffer(probe.nbytes());
  o.tensor = o.buffer.as(dtype, shape);
  return o;
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  return alloc(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
}

Tensor Arena::alloc(DType dtype, std::span<const int64_t> shape) {
  Tensor t = Tensor::view(nullptr, dtype, shape);
  size_t bytes = (t.nbytes() + kAlignment - 1) / kAlignment * kAlignment;
  if (used_ + bytes > capacity_)
    throw Error("workspace", strfmt("step needs more than the %zu-byte workspace (asked %zu more for %s)",
                                    capacity_, bytes, t.shape_str().c_str()));
  t.data = static_cast<char*>(base_) + used_;
  t.device = device_;
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  return t;
}

}  // namespace bunsen
