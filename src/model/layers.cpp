// Weight-fetching helpers for arch/ files.
#include "model/layers.h"

#include "core/status.h"

namespace bunsen::model {

Tensor float_weight(const WeightStore& ws, const std::string& name, std::initializer_list<int64_t> shape) {
  Tensor t = ws.get(name, shape);
  if (!is_float(t.dtype))
    throw Error("weights", "tensor '" + name + "' in " + ws.source_of(name) + " has dtype " + dtype_name(t.dtype) +
                               ", expected f32, f16 or bf16");
  return t;
}

Linear load_linear(const WeightStore& ws, const std::string& prefix, int64_t out, int64_t in, bool bias) {
  Linear l;
  l.w = float_weight(ws, prefix + ".weight", {out, in});
  if (bias) l.b = float_weight(ws, prefix + ".bias", {out});
  return l;
}

Linear slice_rows(const Linear& l, int64_t begin, int64_t end) {
  Linear s;
  s.w = l.w.slice(0, begin, end);
  if (!l.b.empty()) s.b = l.b.slice(0, begin, end);
  return s;
}

size_t workspace_bytes(std::span<const WorkspaceSpec> specs) {
  size_t total = 0;
  for (const WorkspaceSpec& s : specs) {
    size_t bytes = static_cast<size_t>(s.rows * s.cols) * dtype_size(s.dtype);
    total += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  return total;
}

}  // namespace bunsen::model
