// Inputs and output of `bunsen fit`: a model's sizes from a snapshot directory (safetensors headers, else
// config.json × dtype) or a named synthetic shape, this machine's memory pools (each CUDA device's
// free/total memory, the CPU's RAM) with their measured read bandwidth, and the text/JSON report.
// Not the arithmetic (fit.h). Invariant: nothing here allocates model-sized memory (safetensors are
// mmapped; only their headers are read).
#pragma once
#include <string>
#include <vector>

#include "bench/fit.h"

namespace bunsen::bench {

// DIR/config.json; weight bytes from DIR's safetensors when it has them, else from the shape in the
// config's torch dtype.
FitModel load_fit_model(const std::string& dir);
// A synthetic shape (synthetic_shapes.h) in `dtype`.
FitModel synthetic_fit_model(const std::string& shape, DType dtype);

struct ProbeOptions {
  bool measure_bandwidth = true;  // false: no tok/s prediction for this machine
  bool cpu = true;                // include this machine's RAM as a target
  int threads = 0;                // CPU bandwidth probe threads (0 = all cores)
};
// One target per visible CUDA device (budget: 90 % of its free memory), then the CPU (75 % of RAM).
std::vector<FitTarget> probe_machine(const ProbeOptions& opts);

struct FitReport {
  FitModel model;
  FitRequest request;
  std::vector<FitResult> machine;  // this machine's targets
  std::vector<FitResult> skus;     // datasheet GPUs (empty unless asked for)
  std::string to_text() const;
  std::string to_json() const;
};

}  // namespace bunsen::bench
