// Helpers shared by the ops.h entry points (dispatch.cpp, dispatch_quant.cpp): the BUNSEN_KERNELS=ref
// switch, the context's thread pool and the "<op>: ..." error wording. Not public API (kernels/ only).
// Invariant: use_ref() reads the environment once per process.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace bunsen::kernels::detail {

inline bool use_ref() {
  static const bool ref = [] {
    const char* v = std::getenv("BUNSEN_KERNELS");
    return v != nullptr && std::string_view(v) == "ref";
  }();
  return ref;
}

inline ThreadPool& pool_of(Context& ctx) { return ctx.pool ? *ctx.pool : ThreadPool::global(); }

[[noreturn]] inline void fail(const char* op, const std::string& msg) {
  throw Error("kernels", std::string(op) + ": " + msg);
}

inline std::string desc(const char* name, const Tensor& t) { return std::string(name) + " " + t.shape_str(); }

}  // namespace bunsen::kernels::detail
