// Helpers shared by the ops.h entry points (dispatch*.cpp): the BUNSEN_KERNELS=ref switch, the context's
// thread pool, the "<op>: ..." error wording and the one-device check. Not public API (kernels/ only).
// Invariant: use_ref() reads the environment once per process.
#pragma once
#include <initializer_list>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::detail {

inline bool use_ref() {
  static const bool ref = env_str("BUNSEN_KERNELS") == "ref";
  return ref;
}

inline ThreadPool& pool_of(Context& ctx) { return ctx.pool ? *ctx.pool : ThreadPool::global(); }

[[noreturn]] inline void fail(const char* op, const std::string& msg) {
  throw Error("kernels", std::string(op) + ": " + msg);
}

inline std::string desc(const char* name, const Tensor& t) { return std::string(name) + " " + t.shape_str(); }

// True when the byte ranges two row-strided tensors span share a byte (false when either has no elements).
inline bool rows_overlap(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty() || a.numel() == 0 || b.numel() == 0) return false;
  const auto span_end = [](const Rows& r) {
    return r.data + ((r.n_rows - 1) * r.stride + r.n_cols) * static_cast<int64_t>(dtype_size(r.dtype));
  };
  const Rows ra = as_rows(a), rb = as_rows(b);
  return ra.data < span_end(rb) && rb.data < span_end(ra);
}

// True when the (non-empty) tensors all live on one CUDA device, false when all are on the CPU; throws for
// a mix, or for CUDA tensors in a build without the CUDA backend.
inline bool on_cuda(const char* op, std::initializer_list<const Tensor*> ts) {
  bool cuda = false, cpu = false;
  int cuda_index = -1;
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    (t->device.is_cuda() ? cuda : cpu) = true;
    if (!t->device.is_cuda()) continue;
    if (cuda_index >= 0 && t->device.index != cuda_index)
      fail(op, strfmt("tensors are on different CUDA devices (cuda:%d and cuda:%d)", cuda_index,
                      t->device.index));
    cuda_index = t->device.index;
  }
  if (cuda && cpu) fail(op, "tensors are on different devices (cpu and cuda)");
#ifndef BUNSEN_HAVE_CUDA
  if (cuda) fail(op, "CUDA backend not built");
#endif
  return cuda;
}

// dispatch.cpp's full check of a paged cache (dtypes, shapes, quantized codes and params); throws "<op>: ...".
void check_paged_kv(const char* op, const PagedKv& cache);

}  // namespace bunsen::kernels::detail
