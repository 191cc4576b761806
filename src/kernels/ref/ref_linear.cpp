// Reference linear: out[i, j] = sum_k x[i, k] * w[j, k] (+ bias[j]), one f32 accumulator per output.
// Not blocked, not threaded. Invariant: weights are converted element-wise exactly (bf16/f16 -> f32).
#include "kernels/float_io.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {

void linear(Tensor out, Tensor x, Tensor w, Tensor bias) {
  Rows o = as_rows(out), xr = as_rows(x), wr = as_rows(w);
  for (int64_t i = 0; i < xr.n_rows; ++i) {
    const float* xi = xr.row<float>(i);
    for (int64_t j = 0; j < wr.n_rows; ++j) {
      const char* wj = wr.row<char>(j);
      float acc = 0.0f;
      for (int64_t k = 0; k < xr.n_cols; ++k) acc += xi[k] * load_f(wj, wr.dtype, k);
      if (!bias.empty()) acc += load_f(bias.data, bias.dtype, j);
      o.row<float>(i)[j] = acc;
    }
  }
}

}  // namespace bunsen::kernels::ref
