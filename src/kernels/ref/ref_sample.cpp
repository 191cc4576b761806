// Reference of ops.h's sample(): HF's filters and sampling::sample's draw written the plain way, one row at a
// time: every candidate sorted into the descending order (ties: lower id first), then top-k, the min-p and
// top-p prefixes and the inverse-CDF walk over that order. Not fast (a full sort per row); the CUDA kernel
// and the CPU sampler (value bands, partial sorts) are checked against it. Math as sampling::sample: val in
// f32, exp in f32, masses summed in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {
namespace {

int32_t sample_row(const float* x, int64_t n, const SampleSpec& p) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float mx = -kInf;
  bool pos_inf = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    mx = std::max(mx, x[i]);
    pos_inf |= x[i] == kInf;
  }
  std::vector<float> val;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (std::isnan(v) || v == -kInf || (pos_inf && v != kInf)) continue;
    val.push_back(pos_inf ? 0.0f : (v - mx) / p.temperature);
    ids.push_back(static_cast<int32_t>(i));
  }
  if (ids.empty()) return -1;
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return val[a] > val[b] || (val[a] == val[b] && ids[a] < ids[b]); });
  size_t m = order.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < m) {
    const float kth = val[order[static_cast<size_t>(p.top_k) - 1]];
    m = static_cast<size_t>(p.top_k);
    while (m < order.size() && val[order[m]] >= kth) ++m;  // ties with the k-th stay
  }
  double total = 0.0;
  for (size_t i = 0; i < m; ++i) total += std::exp(val[order[i]]);
  size_t keep = m;
  if (p.min_p > 0.0f) {
    size_t k = 0;
    while (k < m && std::exp(val[order[k]]) >= p.min_p) ++k;
    keep = std::max<size_t>(k, 1);
  }
  if (p.top_p < 1.0f) {
    const double target = static_cast<double>(p.top_p) * total;
    double cum = 0.0;
    size_t k = 0;
    while (k < m) {
      cum += std::exp(val[order[k]]);
      ++k;
      if (cum >= target) break;
    }
    keep = std::min(keep, std::max<size_t>(k, 1));
  }
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += std::exp(val[order[i]]);
  const double u = p.u * mass;
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += std::exp(val[order[i]]);
    if (u < cum) return ids[order[i]];
  }
  return ids[order[keep - 1]];  // rounding: u landed on the total
}

}  // namespace

void sample(Tensor out, Tensor x, std::span<const SampleSpec> rows) {
  Rows xr = as_rows(x);
  for (int64_t r = 0; r < xr.n_rows; ++r)
    out.ptr<int32_t>()[r * out.strides[0]] =
        sample_row(xr.row<float>(r), xr.n_cols, rows[static_cast<size_t>(r)]);
}

}  // namespace bunsen::kernels::ref
