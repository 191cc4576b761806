// STREAM-like memory read-bandwidth probe: the denominator of every CPU roofline figure bunsen reports.
// Not a general benchmark harness. Invariant: the buffer is several times the last-level cache, is
// touched before timing, and the best of `repeats` passes is reported.
#pragma once
#include <cstddef>

#include "core/thread_pool.h"

namespace bunsen::bench {

struct BandwidthResult {
  double read_gbps = 0;  // 1e9 bytes per second
  size_t bytes = 0;
  int threads = 0;
};

BandwidthResult measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace bunsen::bench
