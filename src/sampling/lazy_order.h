// Internal to sampling: candidate ids in lazily sorted descending order (LazyDescending) and a per-band
// histogram of candidate values (ValueBands) that lets a walk sort only the candidates above a cutoff
// instead of running nth_element over the whole vocab. Not a public API. Invariants: positions
// [0, sorted) of the order hold the largest candidates, sorted (value descending, lower id first on
// ties), and every later candidate is <= all of them; a band cutoff never drops a candidate the walk needs.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

namespace bunsen::sampling {

class LazyDescending {
 public:
  static constexpr int64_t kFirstSortedPrefix = 64;
  LazyDescending(int32_t* idx, int64_t n, const float* val) : idx_(idx), n_(n), val_(val) {}
  int64_t size() const { return n_; }
  bool fully_sorted() const { return sorted_ == n_; }
  int64_t sorted_size() const { return sorted_; }
  const int32_t* ids() const { return idx_; }  // the candidates, sorted only on [0, sorted)
  int32_t* ids() { return idx_; }              // reordering them ends this order's use
  // Keeps only the n largest candidates.
  void truncate(int64_t n) {
    if (n >= n_) return;
    if (sorted_ < n) grow(n);
    n_ = n;
    sorted_ = std::min(sorted_, n_);
  }
  // Sorts every candidate with val >= cutoff into the sorted prefix (one linear partition, then a sort of
  // just those), so walks that stay above the cutoff never run nth_element over the rest.
  void sort_down_to(float cutoff) {
    if (sorted_ == n_) return;
    const float* val = val_;
    int32_t* mid =
        std::partition(idx_ + sorted_, idx_ + n_, [val, cutoff](int32_t id) { return val[id] >= cutoff; });
    std::sort(idx_ + sorted_, mid, [this](int32_t a, int32_t b) { return before(a, b); });
    sorted_ = mid - idx_;
  }
  // The i-th largest candidate.
  int32_t at(int64_t i) {
    if (i >= sorted_) grow(i + 1);
    return idx_[i];
  }
  // Drops the candidates among the m largest for which drop(id) holds; the order is kept.
  template <class Drop>
  void erase_in_prefix(int64_t m, Drop drop) {
    if (m <= 0) return;
    if (sorted_ < m) grow(m);
    int32_t* kept_end = std::remove_if(idx_, idx_ + m, drop);
    int64_t removed = (idx_ + m) - kept_end;
    if (removed == 0) return;
    std::move(idx_ + m, idx_ + n_, kept_end);
    n_ -= removed;
    sorted_ -= removed;
  }

 private:
  bool before(int32_t a, int32_t b) const { return val_[a] > val_[b] || (val_[a] == val_[b] && a < b); }
  void grow(int64_t need) {
    int64_t target = std::min(n_, std::max({need, 2 * sorted_, sorted_ + kFirstSortedPrefix}));
    auto cmp = [this](int32_t a, int32_t b) { return before(a, b); };
    if (target < n_) std::nth_element(idx_ + sorted_, idx_ + target, idx_ + n_, cmp);
    std::sort(idx_ + sorted_, idx_ + target, cmp);
    sorted_ = target;
  }
  int32_t* idx_;
  int64_t n_;
  int64_t sorted_ = 0;
  const float* val_;
};

// Sums (probability mass or counts) of candidate values val <= 0 in bands of 1/kPerNat below 0; band b
// holds -(b+1)/kPerNat < val <= -b/kPerNat, the last band everything lower (and -inf).
class ValueBands {
 public:
  static constexpr int kBands = 512;
  static constexpr float kPerNat = 16.0f;  // val * 16 is exact, so band edges are exact
  static int band(float val) {
    float x = -val * kPerNat;
    return x < static_cast<float>(kBands - 1) ? static_cast<int>(x) : kBands - 1;
  }
  void add(float val, double w) {
    sum_[band(val)] += w;
    total_ += w;
  }
  void remove(float val, double w) { sum_[band(val)] -= w; }
  // The first band whose cumulative sum (bands summed in order) exceeds u, and in *before the sum of
  // the bands above it; -1 when none does (u at or past the total by rounding).
  int crossing(double u, double* before) const {
    double cum = 0.0;
    for (int b = 0; b < kBands; ++b) {
      if (cum + sum_[b] > u) {
        *before = cum;
        return b;
      }
      cum += sum_[b];
    }
    return -1;
  }
  // A cutoff such that the candidates with val >= cutoff weigh more than `target` by a margin larger
  // than any rounding of the bands' sums; -inf when that takes the last band (then: no cutoff).
  float cutoff(double target) const {
    const double want = target + kMargin * total_;
    double cum = 0.0;
    for (int b = 0; b < kBands - 1; ++b) {
      cum += sum_[b];
      if (cum > want) return -static_cast<float>(b + 1) / kPerNat;
    }
    return -std::numeric_limits<float>::infinity();
  }

 private:
  static constexpr double kMargin = 1e-9;
  std::array<double, kBands> sum_{};
  double total_ = 0.0;
};

}  // namespace bunsen::sampling
