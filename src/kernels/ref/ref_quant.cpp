// Reference quantized ops: dequantize, embedding_q, linear_q (MLX affine weights, see QuantWeight in ops.h).
// Not fast: each weight element is dequantized on its own (quant_row.h) and summed in one f32 accumulator.
// Invariant: dequantized values are exactly std::fma(scale, code, bias) in f32.
#include <vector>

#include "kernels/float_io.h"
#include "kernels/quant_row.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {

void dequantize(Tensor out, const QuantWeight& w) {
  Rows o = as_rows(out);
  for (int64_t r = 0; r < w.rows(); ++r) dequant_row(w, r, o.row<float>(r));
}

void embedding_q(Tensor out, const QuantWeight& table, Tensor ids, float scale) {
  Rows o = as_rows(out);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < o.n_rows; ++i) {
    float* oi = o.row<float>(i);
    dequant_row(table, id[i], oi);
    for (int64_t j = 0; j < o.n_cols; ++j) oi[j] *= scale;
  }
}

void linear_q(Tensor out, Tensor x, const QuantWeight& w, Tensor bias) {
  Rows o = as_rows(out), xr = as_rows(x);
  std::vector<float> row(static_cast<size_t>(w.cols()));
  for (int64_t j = 0; j < w.rows(); ++j) {
    dequant_row(w, j, row.data());
    for (int64_t i = 0; i < xr.n_rows; ++i) {
      const float* xi = xr.row<float>(i);
      float acc = 0.0f;
      for (int64_t k = 0; k < xr.n_cols; ++k) acc += xi[k] * row[static_cast<size_t>(k)];
      if (!bias.empty()) acc += load_f(bias.data, bias.dtype, j);
      o.row<float>(i)[j] = acc;
    }
  }
}

}  // namespace bunsen::kernels::ref
