// RoutingTrace (routing_trace.h): pairs each MoE layer's "router_logits" with the "router_ids" that follow
// it and appends one margin per token. Not on any hot path: it runs only when a caller sets it as the hook.
// Invariant: a "router_ids" call consumes the logits of the same layer, received just before.
#include "model/routing_trace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/status.h"
#include "kernels/device.h"

namespace bunsen::model {

namespace {

double logit_variance(const float* logits, int64_t n_experts) {
  double mean = 0.0;
  for (int64_t e = 0; e < n_experts; ++e) mean += logits[e];
  mean /= static_cast<double>(n_experts);
  double sq = 0.0;
  for (int64_t e = 0; e < n_experts; ++e) sq += (logits[e] - mean) * (logits[e] - mean);
  return sq / static_cast<double>(n_experts);
}

}  // namespace

double routing_margin(const float* logits, int64_t n_experts, const int32_t* ids, int64_t top_k, double scale) {
  if (top_k >= n_experts) return std::numeric_limits<double>::infinity();  // nothing else to choose
  if (top_k <= 0) return 0.0;
  const double sd = scale > 0.0 ? scale : std::sqrt(logit_variance(logits, n_experts));
  double kth = std::numeric_limits<double>::infinity(), next = -std::numeric_limits<double>::infinity();
  for (int64_t e = 0; e < n_experts; ++e) {
    const bool chosen = std::find(ids, ids + top_k, static_cast<int32_t>(e)) != ids + top_k;
    if (chosen) kth = std::min(kth, static_cast<double>(logits[e]));
    else next = std::max(next, static_cast<double>(logits[e]));
  }
  const double m = (kth - next) / sd;
  return std::isfinite(m) && m > 0.0 ? m : 0.0;
}

double routing_swap_gap(const float* logits, int64_t n_experts, const int32_t* a, const int32_t* b, int64_t top_k,
                        double scale) {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto id = static_cast<int32_t>(e);
    const bool in_a = std::find(a, a + top_k, id) != a + top_k, in_b = std::find(b, b + top_k, id) != b + top_k;
    if (in_a == in_b) continue;
    if (!std::isfinite(logits[e])) return std::numeric_limits<double>::infinity();
    lo = std::min(lo, static_cast<double>(logits[e]));
    hi = std::max(hi, static_cast<double>(logits[e]));
  }
  if (hi < lo || hi == lo) return 0.0;  // the same set, or an exact tie
  const double sd = scale > 0.0 ? scale : std::sqrt(logit_variance(logits, n_experts));
  const double g = (hi - lo) / sd;
  return std::isfinite(g) ? g : std::numeric_limits<double>::infinity();
}

template <typename T>
std::vector<T> RoutingTrace::host_rows(const Tensor& t) {
  check(t.ndim == 2 && dtype_size(t.dtype) == sizeof(T), "model", "routing trace: unexpected tensor " + t.shape_str());
  const int64_t rows = t.dim(0), cols = t.dim(1);
  std::vector<T> out(static_cast<size_t>(rows * cols));
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(T);
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = out.data() + r * cols;
    if (t.device.is_cpu()) {
      std::memcpy(dst, t.row_ptr(r), row_bytes);
    } else {
      check(ctx_ != nullptr, "model", "routing trace: a device model needs the Context to copy with");
      kernels::copy_async(*ctx_, dst, t.row_ptr(r), row_bytes);
    }
  }
  if (!t.device.is_cpu()) kernels::synchronize(*ctx_);
  return out;
}

RoutingTrace::Layer& RoutingTrace::layer_entry(int layer) {
  for (Layer& l : layers_)
    if (l.layer == layer) return l;
  layers_.push_back(Layer{layer, 0, {}, {}, 0, {}, 0.0});
  return layers_.back();
}

void RoutingTrace::on(std::string_view name, int layer, const Tensor& t) {
  if (name == "router_logits") {
    check(t.dtype == DType::kF32, "model", "routing trace: router logits must be f32");
    pending_logits_ = host_rows<float>(t);
    pending_layer_ = layer;
    pending_experts_ = t.dim(1);
    return;
  }
  if (name != "router_ids") return;
  check(t.dtype == DType::kI32 && layer == pending_layer_, "model",
        "routing trace: router ids without the logits of their layer");
  const std::vector<int32_t> ids = host_rows<int32_t>(t);
  const int64_t n = t.dim(0), k = t.dim(1);
  check(static_cast<int64_t>(pending_logits_.size()) == n * pending_experts_, "model",
        "routing trace: router logits and ids disagree on the token count");
  Layer& l = layer_entry(layer);
  check(l.top_k == 0 || l.top_k == k, "model", "routing trace: top_k changed between steps");
  check(l.n_experts == 0 || l.n_experts == pending_experts_, "model", "routing trace: expert count changed between steps");
  l.top_k = k;
  l.n_experts = pending_experts_;
  l.ids.insert(l.ids.end(), ids.begin(), ids.end());
  l.logits.insert(l.logits.end(), pending_logits_.begin(), pending_logits_.end());
  // Every token's margin at the layer's scale over all its tokens so far (the scale moves as steps append).
  const int64_t total = static_cast<int64_t>(l.logits.size()) / l.n_experts, e = l.n_experts;
  double sum = 0.0;
  for (int64_t r = 0; r < total; ++r) {
    const double v = logit_variance(l.logits.data() + r * e, e);
    sum += std::isfinite(v) ? v : 0.0;
  }
  const double scale = total > 0 ? std::sqrt(sum / static_cast<double>(total)) : 0.0;
  l.scale = scale;
  l.margin.resize(static_cast<size_t>(total));
  for (int64_t r = 0; r < total; ++r)
    l.margin[static_cast<size_t>(r)] =  // scale 0: every token's logits are flat, so every margin is 0 (or inf)
        static_cast<float>(routing_margin(l.logits.data() + r * e, e, l.ids.data() + r * k, k, scale));
  pending_layer_ = -1;
}

double RoutingTrace::min_margin(int64_t token) const {
  double m = std::numeric_limits<double>::infinity();
  for (const Layer& l : layers_)
    if (token >= 0 && token < l.n_tokens()) m = std::min(m, static_cast<double>(l.margin[static_cast<size_t>(token)]));
  return m;
}

}  // namespace bunsen::model
