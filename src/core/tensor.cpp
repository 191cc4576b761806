// Tensor view helpers: shape arithmetic, slicing, reshaping and printing.
#include "core/tensor.h"

#include "core/status.h"

namespace bunsen {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Tensor Tensor::view(void* data, DType dtype, std::span<const int64_t> shape, Device device) {
  check(shape.size() <= static_cast<size_t>(kMaxDims), "tensor", "too many dims");
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = s;
    s *= shape[i];
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  if (d < 0) d += ndim;
  check(d >= 0 && d < ndim && begin >= 0 && begin <= end && end <= shape[d], "tensor",
        strfmt("slice [%lld, %lld) out of range for dim %d of %s", (long long)begin, (long long)end, d,
               shape_str().c_str()));
  Tensor t = *this;
  t.data = static_cast<char*>(data) + begin * strides[d] * static_cast<int64_t>(dtype_size(dtype));
  t.shape[d] = end - begin;
  return t;
}

Tensor Tensor::select(int64_t index) const {
  check(ndim >= 1 && index >= 0 && index < shape[0], "tensor", "select out of range");
  Tensor t;
  t.data = static_cast<char*>(data) + index * strides[0] * static_cast<int64_t>(dtype_size(dtype));
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim - 1;
  for (int i = 1; i < ndim; ++i) {
    t.shape[i - 1] = shape[i];
    t.strides[i - 1] = strides[i];
  }
  return t;
}

Tensor Tensor::reshape(std::span<const int64_t> s) const {
  check(is_contiguous(), "tensor", "reshape of a non-contiguous view " + shape_str());
  int64_t n = 1;
  for (auto v : s) n *= v;
  check(n == numel(), "tensor", "reshape changes element count of " + shape_str());
  return view(data, dtype, s, device);
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "] ";
  s += dtype_name(dtype);
  return s;
}

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

}  // namespace bunsen
