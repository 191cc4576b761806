// Tensor: a non-owning, strided view (dtype, shape, strides in elements, device, data pointer).
// Not an owner and not an op library: storage lives in Buffer/Arena (buffer.h) or an mmap'd file, and
// ops live in kernels/. Invariants: ndim <= kMaxDims; strides are in elements; a default Tensor is empty
// (data == nullptr, ndim == 0).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "core/dtype.h"

namespace bunsen {

enum class DeviceKind : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceKind::kCUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCPU; }
  bool is_cuda() const { return kind == DeviceKind::kCUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

constexpr int kMaxDims = 6;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  // Contiguous (row-major) view over `data`.
  static Tensor view(void* data, DType dtype, std::span<const int64_t> shape, Device device = {});
  static Tensor view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {}) {
    return view(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device);
  }

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t stride(int i) const { return strides[i < 0 ? ndim + i : i]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  // True when the last dim is contiguous (stride 1): the layout every kernel accepts for row-wise data.
  bool rows_contiguous() const { return ndim == 0 || strides[ndim - 1] == 1; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Pointer to element at flat row `r` of a 2D view (or of dim 0).
  void* row_ptr(int64_t r) const {
    return static_cast<char*>(data) + r * strides[0] * static_cast<int64_t>(dtype_size(dtype));
  }

  // Views sharing the same storage.
  Tensor slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along `dim`
  Tensor select(int64_t index) const;                       // drop dim 0 at `index`
  Tensor reshape(std::span<const int64_t> shape) const;     // contiguous only
  Tensor reshape(std::initializer_list<int64_t> s) const {
    return reshape(std::span<const int64_t>(s.begin(), s.size()));
  }

  std::string shape_str() const;  // "[2, 3] bf16"
};

bool same_shape(const Tensor& a, const Tensor& b);

}  // namespace bunsen
