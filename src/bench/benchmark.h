// `bunsen benchmark`: prefill and decode throughput of one model (a snapshot directory or a named
// synthetic shape) on this machine, with the roofline denominator measured by the tool itself
// (bandwidth.h). Not a unit test: results are reported, never asserted.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace bunsen::bench {

struct BenchmarkOptions {
  std::string model_dir;  // or:
  std::string synthetic;  // named shape (synthetic_shapes.h)
  DType dtype = DType::kBF16;  // synthetic weights' dtype
  int64_t prompt_len = 512;
  int64_t gen_len = 128;
  int threads = 0;  // 0 = all cores
  bool probe = true;
};

struct BenchmarkResult {
  std::string model;
  std::string dtype;
  std::string backend;
  int threads = 0;
  int64_t params = 0;
  int64_t prompt_len = 0;
  int64_t gen_len = 0;
  double prefill_tok_s = 0;
  double ttft_ms = 0;
  double decode_tok_s = 0;
  double ms_per_token = 0;
  double weight_bytes_per_token = 0;
  double decode_gbps = 0;      // weight bytes per token × decode tok/s
  double probe_read_gbps = 0;  // measured by the probe
  double decode_bw_fraction = 0;
  double prefill_gflops = 0;  // 2 × matmul params × prefill tok/s
  std::string to_json() const;
  std::string to_text() const;
};

BenchmarkResult run_benchmark(const BenchmarkOptions& opts);

}  // namespace bunsen::bench
