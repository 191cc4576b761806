// Model sizes from disk or a synthetic shape, and this machine's memory pools (see fit_probe.h).
#include "bench/fit_probe.h"

#include <filesystem>

#include "bench/bandwidth.h"
#include "bench/synthetic_shapes.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/device.h"
#include "kernels/memory_info.h"
#include "model/config.h"
#include "model/weights.h"

namespace bunsen::bench {
namespace fs = std::filesystem;

FitModel load_fit_model(const std::string& dir) {
  const model::ModelConfig cfg = model::load_config(dir);
  const std::string name = fs::path(dir).filename().string().empty() ? fs::path(dir).parent_path().filename().string()
                                                                     : fs::path(dir).filename().string();
  const bool has_weights =
      fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "model.safetensors.index.json");
  if (!has_weights) return fit_model_from_config(cfg, cfg.torch_dtype, name);
  const model::WeightStore ws = model::WeightStore::open(dir);  // mmap: only the headers are read
  std::vector<std::pair<std::string, uint64_t>> tensors;
  for (const std::string& n : ws.names()) tensors.emplace_back(n, ws.get(n).nbytes());
  FitModel m = fit_model_from_tensors(cfg, tensors, name);
  for (const std::string& n : ws.names()) m.params += static_cast<uint64_t>(ws.get(n).numel());
  return m;
}

FitModel synthetic_fit_model(const std::string& shape, DType dtype) {
  const model::ModelConfig cfg = model::parse_config(synthetic_config_json(shape), "synthetic shape " + shape);
  return fit_model_from_config(cfg, dtype, shape);
}

std::vector<FitTarget> probe_machine(const ProbeOptions& opts) {
  std::vector<FitTarget> out;
  for (int i = 0; i < kernels::cuda_device_count(); ++i) {
    const Device d = Device::cuda(i);
    const kernels::MemoryInfo mi = kernels::memory_info(d);
    FitTarget t;
    t.name = d.str() + " " + kernels::cuda_device_name(i);
    t.gpu = true;
    t.total_bytes = mi.total_bytes;
    t.free_bytes = mi.free_bytes;
    t.budget_fraction = kGpuBudgetFraction;
    if (opts.measure_bandwidth) t.bandwidth_gbps = kernels::device_read_bandwidth_gbps(d);
    out.push_back(t);
  }
  if (opts.cpu) {
    const kernels::MemoryInfo mi = kernels::memory_info(Device::cpu());
    FitTarget t;
    t.name = "cpu";
    t.gpu = false;
    t.total_bytes = t.free_bytes = mi.total_bytes;  // the CPU budget is a fraction of total RAM
    t.budget_fraction = kCpuBudgetFraction;
    if (opts.measure_bandwidth) {
      ThreadPool pool(opts.threads);
      t.bandwidth_gbps = measure_read_bandwidth(pool).read_gbps;
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace bunsen::bench
