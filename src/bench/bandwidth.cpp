// Read-bandwidth probe: each thread sums its contiguous share with four SSE2 accumulators (enough to
// saturate DRAM on any x86-64 core); the checksum is kept live so the loads cannot be elided.
#include "bench/bandwidth.h"

#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/buffer.h"

namespace bunsen::bench {

BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n_vec = bytes / 64 * 4;  // __m128i count, multiple of 4
  Buffer buf(n_vec * 16, false);
  auto* data = static_cast<__m128i*>(buf.data());
  const int threads = pool.size();
  pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      size_t lo = n_vec * t / threads, hi = n_vec * (t + 1) / threads;
      std::memset(data + lo, static_cast<int>(t + 1), (hi - lo) * 16);
    }
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        size_t lo = n_vec * t / threads / 4 * 4, hi = n_vec * (t + 1) / threads / 4 * 4;
        __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = lo; i < hi; i += 4) {
          a0 = _mm_add_epi64(a0, _mm_load_si128(data + i));
          a1 = _mm_add_epi64(a1, _mm_load_si128(data + i + 1));
          a2 = _mm_add_epi64(a2, _mm_load_si128(data + i + 2));
          a3 = _mm_add_epi64(a3, _mm_load_si128(data + i + 3));
        }
        __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
        uint64_t out[2];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), s);
        sink.fetch_add(out[0] + out[1], std::memory_order_relaxed);
      }
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n_vec * 16) / s / 1e9);
  }
  BandwidthResult res;
  res.read_gbps = best;
  res.bytes = n_vec * 16;
  res.threads = threads;
  return res;
}

}  // namespace bunsen::bench
