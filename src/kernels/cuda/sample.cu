// CUDA sample(): one 1024-thread block per row draws one token with ops.h's semantics (sampling::sample given
// its uniform u) without sorting the vocabulary. Every selection (the k-th largest value, the top-p prefix,
// the draw) is a radix search over order-preserving 32-bit keys of val, 8 bits per level, on histograms of
// counts or masses built in shared memory; it stops as soon as the crossing bin holds one candidate, and ties
// at one value are resolved by id with a block-wide scan. Masses are fixed point (exp(val) in units of 2^-43
// in u64), so sums do not depend on the order of the atomics: a row's draw is deterministic. A first pass
// finds the maximum and a second writes every candidate's key and exp(val) to the stream's scratch arena; the
// later passes (6-14, all from L2) read those. Histogram atomics are warp-aggregated where a warp's lanes
// crowd into one bin (radix_search). Invariants: val is
// computed as the CPU computes it ((logit - max) / T in f32 with IEEE division), so keys, ties and order are
// the CPU's; a row's result depends only on that row and its spec; -1 for a row without a candidate.
#include <atomic>

#include "core/env.h"
#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 64;       // specs per launch (a kernel parameter); more rows: more launches
constexpr double kFixed = 0x1p43;  // a 2^20-token vocabulary of mass 1 each sums below 2^63
constexpr uint32_t kAllTies = 0xFFFFFFFFu;

struct Specs {
  SampleRow r[kMaxRows];
};

// Order-preserving keys: a > b as floats (no NaN) <=> key(a) > key(b); -0 is normalised to +0 by callers.
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float val_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
__device__ __forceinline__ uint64_t mass_of(uint32_t k) {
  return __double2ull_rn(static_cast<double>(expf(val_of(k))) * kFixed);
}
// One candidate's mass at key k as a divisor (at least 1: a mass that rounds to 0 still counts as one).
__device__ __forceinline__ uint64_t unit_mass(uint32_t k) {
  const uint64_t m = mass_of(k);
  return m > 0 ? m : 1;
}

// A row's candidates after pass 1: key[i] (0: not a candidate; a real key is never 0, which is a NaN's) and
// e[i] = exp(val), written once (the division and exp are most of a pass's work) and read by every later
// pass.
struct Row {
  const float* x;
  int64_t n;
  uint32_t* keys;
  float* e;
};

__device__ __forceinline__ uint64_t fixed_mass(float e) {
  return __double2ull_rn(static_cast<double>(e) * kFixed);
}

// Loads in flight per thread: a pass is a chain of L2 round trips otherwise (one SM reads the whole row).
constexpr int kBatch = 8;

// How radix_search aggregates a warp's histogram atomics (BUNSEN_SAMPLE_HIST=peers|first, read once).
constexpr int kHistFirst = 0, kHistPeers = 1;
std::atomic<int> g_hist{-1};  // set_sample_hist_for_testing

// f(i, key, e) for every i of the row (e = 0 unless kE), kBatch coalesced loads per thread issued before any
// is used. Every lane of every warp makes the same calls (i >= n comes with key 0), so f may use warp-wide
// intrinsics.
template <bool kE, class F>
__device__ __forceinline__ void for_each(const Row& row, F&& f) {
  const int64_t step = int64_t{blockDim.x} * kBatch;
  for (int64_t b0 = 0; b0 < row.n; b0 += step) {
    uint32_t k[kBatch];
    float e[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = b0 + int64_t{u} * blockDim.x + threadIdx.x;
      k[u] = i < row.n ? row.keys[i] : 0u;
      e[u] = kE && i < row.n ? row.e[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) f(b0 + int64_t{u} * blockDim.x + threadIdx.x, k[u], e[u]);
  }
}

struct Shared {
  unsigned long long mass[256];
  unsigned int count[256];
  unsigned long long red[kWarps];
  unsigned long long acc;
  unsigned int bin, bin_count, scan[kWarps];
  int crossed, token;
};

enum class Red { kSum, kMin, kMax };

template <Red kOp>
__device__ __forceinline__ unsigned long long red_op(unsigned long long a, unsigned long long b) {
  if constexpr (kOp == Red::kSum) return a + b;
  if constexpr (kOp == Red::kMin) return a < b ? a : b;
  return a > b ? a : b;
}

// Every thread gets the block's reduction of v.
template <Red kOp>
__device__ unsigned long long block_reduce(unsigned long long v, Shared& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = red_op<kOp>(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // sm.red of a previous reduction has been read
  if ((threadIdx.x & 31) == 0) sm.red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sm.red[0];
  for (int w = 1; w < kWarps; ++w) v = red_op<kOp>(v, sm.red[w]);
  return v;
}

struct Found {
  uint32_t prefix;  // the crossing bin's key bits above `shift`
  int shift;        // 0: prefix is one exact key
  uint64_t above;   // weight of the set's elements with larger keys than the bin
  uint32_t count;   // the set's elements in the bin
  bool crossed;     // false: want was at or past the set's total (the bin is the last one)
};

// Over the candidates in `in_set`, in descending key order, finds the bin where the cumulative weight
// (counts, or masses when kMass) first reaches `want` (exceeds it when `strict`), refining 8 key bits per
// level until the bin holds one candidate or one key.
template <bool kMass, class InSet>
__device__ Found radix_search(const Row& row, InSet in_set, uint64_t want, bool strict, int hist,
                              Shared& sm) {
  uint32_t prefix = 0;
  uint64_t above = 0;
  for (int level = 0;; ++level) {
    const int shift = 24 - 8 * level;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      sm.mass[b] = 0;
      sm.count[b] = 0;
    }
    __syncthreads();
    // Warp-aggregated where lanes crowd: a row's values crowd into a few exponent bins at level 0, and
    // per-lane atomics on one bin serialise (4.7 ms for a 128k row). kHistPeers: every group of lanes with
    // one bin adds once (__match_any_sync, slow where a spread-out row gives many small groups: 1.1 ms for a
    // 128k row); kHistFirst (BUNSEN_SAMPLE_HIST=first): the lanes sharing the first active lane's bin add
    // once, the others per lane. Counts and fixed-point masses are integers: the sums do not depend on the
    // order.
    const int lane = threadIdx.x & 31;
    for_each<kMass>(row, [&](int64_t, uint32_t k, float e) {
      int bin = -1;
      if (k != 0 && in_set(k) && (level == 0 || (k >> (shift + 8)) == prefix))
        bin = static_cast<int>((k >> shift) & 255u);
      unsigned peers;
      if (hist == kHistPeers) {
        peers = __match_any_sync(0xffffffffu, bin);
        if (bin < 0) return;
      } else {
        const unsigned active = __ballot_sync(0xffffffffu, bin >= 0);
        if (active == 0) return;
        const int first = __shfl_sync(0xffffffffu, bin, __ffs(active) - 1);
        const unsigned same = __ballot_sync(0xffffffffu, bin == first);
        if (bin < 0) return;
        if (bin != first) {  // a lane of its own
          if constexpr (kMass) atomicAdd(&sm.mass[bin], static_cast<unsigned long long>(fixed_mass(e)));
          atomicAdd(&sm.count[bin], 1u);
          return;
        }
        peers = same;
      }
      const bool leader = lane == __ffs(peers) - 1;
      if constexpr (kMass) {  // a mass is <= 2^43: 22-bit halves sum over 32 lanes without overflow
        const uint64_t m = fixed_mass(e);
        const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(m & 0x3FFFFFu));
        const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(m >> 22));
        if (leader) atomicAdd(&sm.mass[bin], (static_cast<unsigned long long>(hi) << 22) + lo);
      }
      if (leader) atomicAdd(&sm.count[bin], static_cast<unsigned>(__popc(peers)));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      int hit = -1, last = -1;
      uint64_t acc = above, at_last = above;
      for (int b = 255; b >= 0; --b) {
        if (sm.count[b] == 0) continue;
        const uint64_t w = kMass ? sm.mass[b] : sm.count[b];
        last = b;
        at_last = acc;
        if (strict ? acc + w > want : acc + w >= want) {
          hit = b;
          break;
        }
        acc += w;
      }
      sm.crossed = hit >= 0;
      if (hit < 0) {
        hit = last < 0 ? 0 : last;
        acc = at_last;
      }
      sm.bin = static_cast<unsigned>(hit);
      sm.bin_count = sm.count[hit];
      sm.acc = acc;
    }
    __syncthreads();
    prefix = (prefix << 8) | sm.bin;
    above = sm.acc;
    const uint32_t count = sm.bin_count;
    const bool crossed = sm.crossed != 0;
    __syncthreads();  // sm.bin and friends are read before the next level overwrites them
    if (count <= 1 || shift == 0) return {prefix, shift, above, count, crossed};
  }
}

// The j-th (by id) candidate whose key satisfies `match`; -1 when there are not that many. `unique`: the
// caller knows exactly one candidate matches (j = 0): one coalesced pass finds it.
template <class Match>
__device__ int nth_match(const Row& row, Match match, uint32_t j, bool unique, Shared& sm) {
  if (threadIdx.x == 0) sm.token = -1;
  __syncthreads();
  if (unique) {
    for_each<false>(row, [&](int64_t i, uint32_t k, float) {
      if (k != 0 && match(k)) sm.token = static_cast<int>(i);
    });
    __syncthreads();
    return sm.token;
  }
  // Ties: threads own consecutive id ranges; an exclusive scan of their counts finds the owner of the j-th.
  const int64_t per = (row.n + blockDim.x - 1) / blockDim.x;
  const int64_t lo = static_cast<int64_t>(threadIdx.x) * per;
  const int64_t hi = lo + per < row.n ? lo + per : row.n;
  uint32_t c = 0;
  for (int64_t i = lo; i < hi; ++i) c += row.keys[i] != 0 && match(row.keys[i]) ? 1u : 0u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t incl = c;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sm.scan[warp] = incl;
  __syncthreads();
  uint32_t base = 0;
  for (int w = 0; w < warp; ++w) base += sm.scan[w];
  const uint32_t excl = base + incl - c;
  if (j >= excl && j < excl + c) {
    uint32_t left = j - excl;
    for (int64_t i = lo; i < hi; ++i) {
      if (row.keys[i] == 0 || !match(row.keys[i])) continue;
      if (left-- == 0) {
        sm.token = static_cast<int>(i);
        break;
      }
    }
  }
  __syncthreads();
  return sm.token;
}

// The row's logits x[b0 + u * blockDim.x + threadIdx.x] for u < kBatch (NaN past its end), loaded together.
__device__ __forceinline__ void load_x(const Row& row, int64_t b0, float (&v)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const int64_t i = b0 + int64_t{u} * blockDim.x + threadIdx.x;
    v[u] = i < row.n ? row.x[i] : NAN;
  }
}

// A prefix of the descending order: every candidate with key > key, and the first `ties` (by id) at key.
struct Cut {
  uint32_t key;
  uint32_t ties;
};
__device__ __forceinline__ Cut shorter(Cut a, Cut b) {
  return a.key > b.key || (a.key == b.key && a.ties < b.ties) ? a : b;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(int32_t* out, const float* x, int64_t xs, int64_t n,
                                                          uint32_t* keys, float* e, Specs specs, int hist) {
  __shared__ Shared sm;
  const SampleRow p = specs.r[blockIdx.x];
  const Row row{x + blockIdx.x * xs, n, keys + blockIdx.x * n, e + blockIdx.x * n};

  // Pass 1: the maximum (as a key) and whether a +inf is among the values.
  const int64_t step = int64_t{blockDim.x} * kBatch;
  uint64_t max_key = 0;
  for (int64_t b0 = 0; b0 < n; b0 += step) {
    float v[kBatch];
    load_x(row, b0, v);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const uint64_t k = isnan(v[u]) ? 0 : key_of(v[u]);
      max_key = k > max_key ? k : max_key;
    }
  }
  max_key = block_reduce<Red::kMax>(max_key, sm);
  const float mx = val_of(static_cast<uint32_t>(max_key));
  const bool pos_inf = mx == INFINITY;
  // Pass 1b: every candidate's key and exp(val), val = (logit - max) / T as the CPU computes it (all +inf
  // entries at val 0 when there is one), and their count.
  uint64_t n_cand = 0;
  for (int64_t b0 = 0; b0 < n; b0 += step) {
    float v[kBatch];
    load_x(row, b0, v);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = b0 + int64_t{u} * blockDim.x + threadIdx.x;
      if (i >= n) continue;
      const bool cand = !isnan(v[u]) && v[u] != -INFINITY && (!pos_inf || v[u] == INFINITY);
      float val = 0.0f;
      if (cand && !pos_inf) {
        val = (v[u] - mx) / p.temperature;
        if (val == 0.0f) val = 0.0f;  // -0 -> +0: equal values are ties, as on the CPU
      }
      row.keys[i] = cand ? key_of(val) : 0u;
      row.e[i] = cand ? expf(val) : 0.0f;
      n_cand += cand;
    }
  }
  n_cand = block_reduce<Red::kSum>(n_cand, sm);  // its barriers also publish keys and e to the block
  if (n_cand == 0) {
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
    return;
  }

  // Top-k: every candidate with a key >= the k-th largest.
  uint32_t k_floor = 0;
  if (p.top_k > 0 && static_cast<uint64_t>(p.top_k) < n_cand) {
    const Found f = radix_search<false>(
        row, [](uint32_t) { return true; }, static_cast<uint64_t>(p.top_k), false, hist, sm);
    k_floor = f.prefix << f.shift;  // one exact key, or the floor of a bin holding one candidate
  }
  auto in_top_k = [k_floor](uint32_t k) { return k >= k_floor; };

  // Pass 2 over the top-k: its mass, and the candidates min-p keeps (their count and smallest key).
  uint64_t total = 0, n_top = 0, n_keep = 0, keep_min = ~0ull;
  for_each<true>(row, [&](int64_t, uint32_t k, float e) {
    if (k == 0 || !in_top_k(k)) return;
    ++n_top;
    total += fixed_mass(e);
    if (e >= p.min_p) {
      ++n_keep;
      keep_min = k < keep_min ? k : keep_min;
    }
  });
  total = block_reduce<Red::kSum>(total, sm);
  n_top = block_reduce<Red::kSum>(n_top, sm);
  n_keep = block_reduce<Red::kSum>(n_keep, sm);
  keep_min = block_reduce<Red::kMin>(keep_min, sm);

  Cut cut{k_floor, kAllTies};
  if (p.min_p > 0.0f && n_keep < n_top)  // none kept: the most likely candidate (val 0, lowest id) stays
    cut = shorter(cut, n_keep == 0 ? Cut{key_of(0.0f), 1} : Cut{static_cast<uint32_t>(keep_min), kAllTies});
  if (p.top_p < 1.0f) {
    const auto target = static_cast<uint64_t>(static_cast<double>(p.top_p) * static_cast<double>(total));
    const Found f = radix_search<true>(row, in_top_k, target, false, hist, sm);
    if (f.crossed) {
      Cut c{f.prefix << f.shift, kAllTies};
      if (f.shift == 0) {  // ties at one key: as many as the mass still needs (at least one)
        const uint64_t e = unit_mass(f.prefix);
        const uint64_t need = target > f.above ? target - f.above : 0;
        const uint64_t t = need == 0 ? 1 : (need + e - 1) / e;
        c.ties = static_cast<uint32_t>(t < f.count ? t : f.count);
      }
      cut = shorter(cut, c);
    }
  }

  // Pass 3: the survivors' mass (above the cut, plus the ties kept at it).
  uint64_t above = 0, ties = 0;
  for_each<true>(row, [&](int64_t, uint32_t k, float e) {
    if (k == 0) return;
    if (k > cut.key)
      above += fixed_mass(e);
    else if (k == cut.key)
      ++ties;
  });
  above = block_reduce<Red::kSum>(above, sm);
  ties = block_reduce<Red::kSum>(ties, sm);
  const uint64_t kept = ties < cut.ties ? ties : cut.ties;
  const uint64_t e_cut = kept > 0 ? mass_of(cut.key) : 0;
  const uint64_t mass = above + kept * e_cut;

  // The draw: the first survivor whose cumulative mass exceeds u * mass.
  const auto target = static_cast<uint64_t>(p.u * static_cast<double>(mass));
  int token;
  if (target >= above && kept > 0) {
    const uint64_t j = e_cut > 0 ? (target - above) / e_cut : 0;
    token = nth_match(
        row, [cut](uint32_t k) { return k == cut.key; }, static_cast<uint32_t>(j < kept ? j : kept - 1),
        ties == 1, sm);
  } else {
    auto above_cut = [cut](uint32_t k) { return k > cut.key; };
    const Found f = radix_search<true>(row, above_cut, target, true, hist, sm);
    uint64_t j = 0;
    if (f.shift == 0 && f.count > 1) {
      const uint64_t e = unit_mass(f.prefix);
      j = f.crossed ? (target - f.above) / e : f.count - 1;
      j = j < f.count ? j : f.count - 1;
    }
    const uint32_t prefix = f.prefix;
    const int shift = f.shift;
    token = nth_match(
        row, [=](uint32_t k) { return above_cut(k) && (k >> shift) == prefix; }, static_cast<uint32_t>(j),
        f.count == 1, sm);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = token;
}

}  // namespace

void set_sample_hist_for_testing(int mode) {
  g_hist.store(mode);
}

size_t sample_scratch_bytes(int64_t rows, int64_t n) {
  const int64_t m = rows < kMaxRows ? rows : kMaxRows;
  return static_cast<size_t>(m * n) * (sizeof(uint32_t) + sizeof(float));
}

void sample(void* stream, int32_t* out, DevRows x, const SampleRow* rows) {
  // kHistFirst by default: H200, 128k logits, temperature 0.8, top-p 0.95: 8B 193.3 vs 182.7 tok/s, 1B
  // 904.2 vs 909.2 (docs/PERFORMANCE.md); BUNSEN_SAMPLE_HIST=peers for the other.
  static const int env_hist = env_str("BUNSEN_SAMPLE_HIST") == "peers" ? kHistPeers : kHistFirst;
  const int forced = g_hist.load();
  const int hist = forced == kHistFirst || forced == kHistPeers ? forced : env_hist;
  for (int64_t r0 = 0; r0 < x.n_rows; r0 += kMaxRows) {
    const int64_t m = x.n_rows - r0 < kMaxRows ? x.n_rows - r0 : kMaxRows;
    Specs specs{};
    for (int64_t i = 0; i < m; ++i) specs.r[i] = rows[r0 + i];
    const size_t cells = static_cast<size_t>(m * x.n_cols);
    auto* keys = static_cast<uint32_t*>(scratch(stream, sample_scratch_bytes(m, x.n_cols), "sample"));
    sample_kernel<<<static_cast<unsigned>(m), kThreads, 0, as_stream(stream)>>>(
        out + r0, static_cast<const float*>(x.data) + r0 * x.stride, x.stride, x.n_cols, keys,
        reinterpret_cast<float*>(keys + cells), specs, hist);
    check_launch("sample", [&] { return rows_desc("x", x); });
  }
}

}  // namespace bunsen::kernels::cuda
