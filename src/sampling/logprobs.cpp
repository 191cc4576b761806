// Log-softmax of a raw logits row for logprobs: a max pass, then one pass that accumulates sum(exp) in
// double and keeps the n most likely ids in a small sorted array. Not the samplers. Invariants: a row
// with +inf logits gives those ids log(1/count) and every other id -inf; NaN ids are never listed.
#include "sampling/logprobs.h"

#include <array>
#include <cmath>
#include <limits>

#include "core/status.h"

namespace bunsen::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The n most likely (value, id) pairs seen so far, descending; ids arrive ascending, so an equal value
// goes after the ones already held (ties: lower id first).
class TopN {
 public:
  explicit TopN(int n) : n_(n) {}
  void offer(float v, int32_t id) {
    if (n_ == 0 || (size_ == n_ && !(v > items_[size_ - 1].first))) return;
    int pos = size_ < n_ ? size_++ : n_ - 1;
    while (pos > 0 && v > items_[pos - 1].first) {
      items_[pos] = items_[pos - 1];
      --pos;
    }
    items_[pos] = {v, id};
  }
  int size() const { return size_; }
  const std::pair<float, int32_t>& operator[](int i) const { return items_[i]; }

 private:
  std::array<std::pair<float, int32_t>, kMaxTopLogprobs> items_{};
  int n_;
  int size_ = 0;
};

}  // namespace

void fill_logprobs(const float* raw, int64_t vocab, int n_top, SampleResult& r) {
  if (n_top < 0 || n_top > kMaxTopLogprobs)
    throw Error("sampling", strfmt("top_logprobs must be in [0, %d], got %d", kMaxTopLogprobs, n_top));
  float max = -kInf;
  int64_t n_pos_inf = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (raw[i] > max) max = raw[i];  // false for NaN
    n_pos_inf += (raw[i] == kInf);
  }
  TopN top(n_top);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    float v = raw[i];
    if (std::isnan(v)) continue;
    if (n_pos_inf == 0 && max > -kInf) sum += std::exp(v - max);
    top.offer(v, static_cast<int32_t>(i));
  }
  // logprob(v) = v - lse; with +inf logits the +inf ids share the whole mass.
  auto logprob = [&](float v) -> float {
    if (n_pos_inf > 0)
      return v == kInf ? static_cast<float>(-std::log(static_cast<double>(n_pos_inf))) : -kInf;
    if (max == -kInf) return -kInf;
    return static_cast<float>(static_cast<double>(v) - static_cast<double>(max) - std::log(sum));
  };
  r.logprob = logprob(raw[r.token]);
  r.top.resize(static_cast<size_t>(top.size()));
  for (int i = 0; i < top.size(); ++i) r.top[i] = {top[i].second, logprob(top[i].first)};
}

}  // namespace bunsen::sampling
