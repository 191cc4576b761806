// Rows: a tensor seen as a 2-D matrix of rows (all leading dims collapsed), the shape every row-wise
// kernel (ref/ and cpu/) walks, plus paged-cache row addressing.
// Not a validator: dispatch.cpp checks collapsibility before a kernel sees a tensor.
// Invariants: the last dim is contiguous; row r starts at data + r * stride elements.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace bunsen::kernels {

struct Rows {
  char* data = nullptr;
  DType dtype = DType::kF32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  int64_t stride = 0;  // elements between row starts

  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(data + r * stride * static_cast<int64_t>(dtype_size(dtype)));
  }
};

// True when t's leading dims collapse into one strided row dim and the last dim is contiguous.
// A 0-D tensor counts as one row of one element.
inline bool rows_ok(const Tensor& t) {
  if (t.ndim == 0) return true;
  if (t.strides[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1) return false;
  int inner = -1;  // innermost leading dim seen so far with extent > 1
  for (int i = t.ndim - 2; i >= 0; --i) {
    if (t.shape[i] <= 1) continue;
    if (inner >= 0 && t.strides[i] != t.strides[inner] * t.shape[inner]) return false;
    inner = i;
  }
  return true;
}

// Assumes rows_ok(t).
inline Rows as_rows(const Tensor& t) {
  Rows r;
  r.data = static_cast<char*>(t.data);
  r.dtype = t.dtype;
  r.n_rows = 1;
  r.n_cols = t.ndim == 0 ? 1 : t.shape[t.ndim - 1];
  r.stride = r.n_cols;
  bool have_inner = false;
  for (int i = t.ndim - 2; i >= 0; --i) {
    r.n_rows *= t.shape[i];
    if (t.shape[i] > 1 && !have_inner) {
      r.stride = t.strides[i];
      have_inner = true;
    }
  }
  return r;
}

// Start of the head_dim elements of (block, offset, kv head) in a paged cache tensor
// [n_blocks, block_size, n_kv_heads, head_dim] whose last dim is contiguous.
inline char* kv_row(const Tensor& c, int64_t block, int64_t offset, int64_t head) {
  int64_t e = block * c.strides[0] + offset * c.strides[1] + head * c.strides[2];
  return static_cast<char*>(c.data) + e * static_cast<int64_t>(dtype_size(c.dtype));
}

// First key position visible from query position pos (sliding_window 0 = full causal).
inline int64_t first_visible(int64_t pos, int sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}

}  // namespace bunsen::kernels
