// Building blocks shared by the arch/ files: a Linear (weight + optional bias) and weight-fetching helpers
// that validate names, shapes and dtypes once at load. Not a module system: forward code stays in arch/.
#pragma once
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/weights.h"

namespace bunsen::model {

struct Linear {
  Tensor w;  // [out, in] f32|f16|bf16
  Tensor b;  // [out] or empty
  int64_t out_features() const { return w.dim(0); }
  void operator()(kernels::Context& ctx, Tensor out, Tensor x) const { kernels::linear(ctx, out, x, w, b); }
  size_t bytes() const { return w.nbytes() + (b.empty() ? 0 : b.nbytes()); }
};

// Fetches a float tensor with the given shape; errors name the tensor, its file and the expected shape.
Tensor float_weight(const WeightStore& ws, const std::string& name, std::initializer_list<int64_t> shape);
Linear load_linear(const WeightStore& ws, const std::string& prefix, int64_t out, int64_t in, bool bias);
// Rows [begin, end) of a [out, in] linear (split of a fused projection: a contiguous view, no copy).
Linear slice_rows(const Linear& l, int64_t begin, int64_t end);

// One 2-D workspace tensor of a step.
struct WorkspaceSpec {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
};
// Aligned byte size of a list of workspace tensors (matches Arena::alloc's rounding).
size_t workspace_bytes(std::span<const WorkspaceSpec> specs);

}  // namespace bunsen::model
