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
