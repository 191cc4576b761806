// cpu::linear: splits the output columns (weight rows) over the thread pool and runs the GEMV kernel of
// the active ISA level (or linear_scalar, the baseline, which lives here) on each chunk, for every m.
// Not validating (dispatch.cpp does). Invariants: every output element is written by exactly one task;
// bias is added by the task that wrote the element; batch invariance: each output row is summed in an
// order that depends only on k, never on m (how many rows share the call) or on the thread count, so a
// sequence's logits are bit-identical alone and inside any continuous batch. The packed GEMM kernels
// (gemm_avx512/gemm_avx2) sum in another order, so they are not dispatched here (they were ~10-35%
// faster for prefill at large k; see linear_kernels.h).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {
namespace {

constexpr int64_t kGemvRowsPerUnit = 16;
constexpr int64_t kMinRowsPerBlock = 8;  // one GEMV row group

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Below this many weight elements per task, splitting costs more than it saves.
constexpr int64_t kMinElemsPerTask = 1 << 16;

float dot(const float* a, const float* b, int64_t k) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 4 <= k; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  for (; i < k; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void add_bias(const LinearArgs& a, const Tensor& bias, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < a.m; ++m) {
    float* o = a.out + m * a.out_stride;
    for (int64_t n = n0; n < n1; ++n) o[n] += load_f(bias.data, bias.dtype, n);
  }
}

}  // namespace

void linear_scalar(const LinearArgs& a, int64_t n0, int64_t n1) {
  float* row = thread_scratch(kScratchPanel, static_cast<size_t>(a.k));
  const int64_t row_bytes = a.w_stride * static_cast<int64_t>(dtype_size(a.w_dtype));
  for (int64_t n = n0; n < n1; ++n) {
    widen_row(static_cast<const char*>(a.w) + n * row_bytes, a.w_dtype, a.k, row);
    for (int64_t m = 0; m < a.m; ++m) a.out[m * a.out_stride + n] = dot(a.x + m * a.x_stride, row, a.k);
  }
}

void linear(ThreadPool& pool, Tensor out, Tensor x, Tensor w, Tensor bias) {
  const Rows o = as_rows(out), xr = as_rows(x), wr = as_rows(w);
  LinearArgs a;
  a.x = xr.row<float>(0);
  a.x_stride = xr.stride;
  a.w = w.data;
  a.w_dtype = w.dtype;
  a.w_stride = wr.stride;
  a.out = o.row<float>(0);
  a.out_stride = o.stride;
  a.m = xr.n_rows;
  a.n = wr.n_rows;
  a.k = xr.n_cols;
  if (a.m == 0 || a.n == 0) return;
  if (a.k == 0)
    for (int64_t m = 0; m < a.m; ++m) std::memset(a.out + m * a.out_stride, 0, a.n * sizeof(float));

  const Isa isa = active_isa();
  void (*kernel)(const LinearArgs&, int64_t, int64_t) = linear_scalar;
  if (isa == Isa::kAvx512) kernel = gemv_avx512;
  if (isa == Isa::kAvx2) kernel = gemv_avx2;
  const int64_t n_units = ceil_div(a.n, kGemvRowsPerUnit);
  // With few column units for the threads, the rows of x are split too (blocks of whole row groups; the
  // summation order of an element does not depend on which block computes it).
  int64_t m_blocks = 1;
  if (n_units < 4 * pool.size())
    m_blocks = std::min(ceil_div(4 * pool.size(), n_units), ceil_div(a.m, kMinRowsPerBlock));
  const int64_t m_step = ceil_div(ceil_div(a.m, m_blocks), kMinRowsPerBlock) * kMinRowsPerBlock;
  m_blocks = ceil_div(a.m, m_step);
  const int64_t elems_per_unit = kGemvRowsPerUnit * std::max<int64_t>(a.k, 1) * m_step;
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / elems_per_unit);
  pool.parallel_for(n_units * m_blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e;) {  // tasks are (row block, column unit), column unit fastest
      const int64_t mb = t / n_units, u0 = t % n_units, u1 = std::min(n_units, u0 + (e - t));
      LinearArgs part = a;
      part.x += mb * m_step * a.x_stride;
      part.out += mb * m_step * a.out_stride;
      part.m = std::min(m_step, a.m - mb * m_step);
      const int64_t n0 = u0 * kGemvRowsPerUnit, n1 = std::min(u1 * kGemvRowsPerUnit, a.n);
      if (a.k > 0) kernel(part, n0, n1);
      if (!bias.empty()) add_bias(part, bias, n0, n1);
      t += u1 - u0;
    }
  });
}

}  // namespace bunsen::kernels::cpu
