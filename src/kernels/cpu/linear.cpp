// cpu::linear: splits the output columns (weight rows) over the thread pool and runs the ISA kernel
// for the active level on each chunk: GEMV for small m, packed GEMM above (gemv_max_m); the baseline-ISA
// kernel (linear_scalar) lives here too. Not validating (dispatch.cpp does). Invariants: every output
// element is written by exactly one task; bias is added by the task that wrote the element.
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
constexpr int64_t kGemmMinRows = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Largest m that goes to the GEMV kernels (measured on Zen 5, bf16, one core). The GEMV path widens
// weights in registers and needs no packing, so it wins for small m; with AVX-512 its x row groups
// outgrow L1 for long k (k = 4864: GEMV ~135 GFLOPS flat vs GEMM 145 at m = 16, 185 at m = 32; k = 896:
// GEMV ~210 vs GEMM 200 only from m = 64). AVX2: GEMV ~103 GFLOPS up to m = 64, GEMM 90 there, 116 at 256.
int64_t gemv_max_m(Isa isa, int64_t k) {
  if (isa == Isa::kAvx512) return k <= 2048 ? 64 : 16;
  return 64;
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
  const bool gemm = isa != Isa::kScalar && a.m > gemv_max_m(isa, a.k);
  void (*kernel)(const LinearArgs&, int64_t, int64_t) = linear_scalar;
  if (isa == Isa::kAvx512) kernel = gemm ? gemm_avx512 : gemv_avx512;
  if (isa == Isa::kAvx2) kernel = gemm ? gemm_avx2 : gemv_avx2;
  const int64_t unit = gemm ? kGemmTaskCols : kGemvRowsPerUnit;
  const int64_t n_units = ceil_div(a.n, unit);
  // With few column units for the threads, the GEMM also splits the rows of x (each row block repacks
  // its weight panels, so blocks keep >= kGemmMinRows rows).
  int64_t m_blocks = 1;
  if (gemm && n_units < 4 * pool.size())
    m_blocks = std::min(ceil_div(4 * pool.size(), n_units), ceil_div(a.m, kGemmMinRows));
  const int64_t m_step = ceil_div(a.m, m_blocks);
  const int64_t elems_per_unit = unit * std::max<int64_t>(a.k, 1) * (gemm ? m_step : 1);
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / elems_per_unit);
  pool.parallel_for(n_units * m_blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e;) {  // tasks are (row block, column unit), column unit fastest
      const int64_t mb = t / n_units, u0 = t % n_units, u1 = std::min(n_units, u0 + (e - t));
      LinearArgs part = a;
      part.x += mb * m_step * a.x_stride;
      part.out += mb * m_step * a.out_stride;
      part.m = std::min(m_step, a.m - mb * m_step);
      const int64_t n0 = u0 * unit, n1 = std::min(u1 * unit, a.n);
      if (a.k > 0) kernel(part, n0, n1);
      if (!bias.empty()) add_bias(part, bias, n0, n1);
      t += u1 - u0;
    }
  });
}

}  // namespace bunsen::kernels::cpu
