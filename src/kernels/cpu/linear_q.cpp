// cpu::linear_q, embedding_q and dequantize for MLX affine-quantized weights (QuantWeight in ops.h).
// linear_q threads over output columns (weight rows) like cpu::linear and runs linear_q_avx512 (4/8-bit at
// the AVX-512 level), linear_q_avx2, or the baseline here: one weight row dequantized into scratch, then
// linear_scalar's dot. Not validating (dispatch_quant.cpp does). Invariants: each output is written by one
// task, bias added by it; batch invariance (a row's summation order depends only on k, never on m or the
// thread count); linear_q(x, w) == cpu::linear(x, dequantize(w)) bit for bit at the scalar and AVX2 levels
// and, for 4/8-bit, at the AVX-512 level (other widths there run the AVX2 kernel and differ in the last bits).
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/linear_q_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/quant_row.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kRowsPerUnit = 16;
constexpr int64_t kMinRowsPerBlock = 8;
constexpr int64_t kMinElemsPerTask = 1 << 16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Baseline: each weight row is dequantized once (exactly as ref/) and dotted with every x row by
// linear_scalar, so the result equals cpu::linear on the dequantized matrix at the scalar level.
void linear_q_scalar(const LinearQArgs& a, const QuantWeight& w, int64_t n0, int64_t n1) {
  float* row = thread_scratch(kScratchTable, static_cast<size_t>(a.k));
  for (int64_t n = n0; n < n1; ++n) {
    dequant_row(w, n, row);
    LinearArgs la;
    la.x = a.x;
    la.x_stride = a.x_stride;
    la.w = row;
    la.w_dtype = DType::kF32;
    la.w_stride = a.k;
    la.out = a.out + n;
    la.out_stride = a.out_stride;
    la.m = a.m;
    la.n = 1;
    la.k = a.k;
    linear_scalar(la, 0, 1);
  }
}

LinearQArgs make_args(Tensor out, Tensor x, const QuantWeight& w) {
  const Rows o = as_rows(out), xr = as_rows(x);
  LinearQArgs a;
  a.x = xr.row<float>(0);
  a.x_stride = xr.stride;
  a.packed = w.packed.ptr<uint32_t>();
  a.packed_stride = w.packed.strides[0];
  a.scales = w.scales.data;
  a.biases = w.biases.data;
  a.sb_dtype = w.scales.dtype;
  a.sb_stride = w.scales.strides[0];
  a.bits = w.bits;
  a.group = w.group_size;
  a.out = o.row<float>(0);
  a.out_stride = o.stride;
  a.m = xr.n_rows;
  a.n = w.rows();
  a.k = w.cols();
  return a;
}

}  // namespace

void linear_q(ThreadPool& pool, Tensor out, Tensor x, const QuantWeight& w, Tensor bias) {
  const LinearQArgs a = make_args(out, x, w);
  if (a.m == 0 || a.n == 0) return;
  const bool simd = active_isa() != Isa::kScalar, avx512 = active_isa() == Isa::kAvx512;
  const int64_t n_units = ceil_div(a.n, kRowsPerUnit);
  // Few column units for the threads: split the rows of x too (whole groups of 8; the order in which an
  // element is summed does not depend on the block that computes it).
  int64_t m_blocks = 1;
  if (n_units < 4 * pool.size())
    m_blocks = std::min(ceil_div(4 * pool.size(), n_units), ceil_div(a.m, kMinRowsPerBlock));
  const int64_t m_step = ceil_div(ceil_div(a.m, m_blocks), kMinRowsPerBlock) * kMinRowsPerBlock;
  m_blocks = ceil_div(a.m, m_step);
  const int64_t elems_per_unit = kRowsPerUnit * a.k * m_step;
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(elems_per_unit, 1));
  pool.parallel_for(n_units * m_blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e;) {  // tasks are (row block, column unit), column unit fastest
      const int64_t mb = t / n_units, u0 = t % n_units, u1 = std::min(n_units, u0 + (e - t));
      LinearQArgs part = a;
      part.x += mb * m_step * a.x_stride;
      part.out += mb * m_step * a.out_stride;
      part.m = std::min(m_step, a.m - mb * m_step);
      const int64_t n0 = u0 * kRowsPerUnit, n1 = std::min(u1 * kRowsPerUnit, a.n);
      if (avx512)
        linear_q_avx512(part, n0, n1);
      else if (simd)
        linear_q_avx2(part, n0, n1);
      else
        linear_q_scalar(part, w, n0, n1);
      if (!bias.empty())
        for (int64_t m = 0; m < part.m; ++m)
          for (int64_t n = n0; n < n1; ++n)
            part.out[m * part.out_stride + n] += load_f(bias.data, bias.dtype, n);
      t += u1 - u0;
    }
  });
}

void embedding_q(ThreadPool& pool, Tensor out, const QuantWeight& table, Tensor ids, float scale) {
  const Rows o = as_rows(out);
  const int32_t* id = ids.ptr<int32_t>();
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(o.n_cols, 1));
  pool.parallel_for(o.n_rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* dst = o.row<float>(i);
      dequant_row(table, id[i], dst);
      if (scale != 1.0f)
        for (int64_t j = 0; j < o.n_cols; ++j) dst[j] *= scale;
    }
  });
}

void dequantize(ThreadPool& pool, Tensor out, const QuantWeight& w) {
  const Rows o = as_rows(out);
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(o.n_cols, 1));
  pool.parallel_for(w.rows(), grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) dequant_row(w, r, o.row<float>(r));
  });
}

}  // namespace bunsen::kernels::cpu
