// WeightStore::to_device: one device allocation for every tensor, filled by kernels::upload from the mmap
// (or in-memory tensors) in file order, with an optional progress line on stderr.
// Not a loader policy (registry.cpp decides when to upload and whether to show progress). Invariants: the
// device copy holds the same names, dtypes and shapes; each tensor starts 256-byte aligned; the progress
// line is redrawn at most every 100 ms and always ends with the final totals and a newline.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>

#include "core/status.h"
#include "model/weights.h"

namespace bunsen::model {
namespace {

constexpr size_t kDeviceAlign = 256;
using Clock = std::chrono::steady_clock;

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// "\rloading weights to cuda:0  42%  6.71/16.06 GB  9.8 GB/s" on stderr.
class ProgressLine {
 public:
  ProgressLine(bool on, Device device, size_t total) : on_(on), device_(device), total_(total) {}

  void update(size_t done, bool final = false) {
    if (!on_) return;
    const auto now = Clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double pct = total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0;
    std::fprintf(stderr, "\rloading weights to %s %5.1f%%  %.2f/%.2f GB  %.1f GB/s%s", device_.str().c_str(),
                 pct, static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9,
                 s > 0 ? static_cast<double>(done) / 1e9 / s : 0.0, final ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool on_;
  Device device_;
  size_t total_;
  Clock::time_point start_ = Clock::now(), last_{};
};

}  // namespace

WeightStore WeightStore::to_device(Device device, const UploadOptions& opts) const {
  check(device_.is_cpu(), "weights", "to_device: the weights are already on " + device_.str());
  check(device.is_cuda(), "weights", "to_device: " + device.str() + " is not a device to upload to");
  // File order (source, address) so the mmap is read front to back.
  std::vector<std::tuple<int, const char*, const std::string*, const Entry*>> order;
  for (const auto& [name, e] : entries_)
    order.emplace_back(e.source, static_cast<const char*>(e.tensor.data), &name, &e);
  std::sort(order.begin(), order.end());
  size_t total = 0, payload = 0;
  for (const auto& o : order) {
    total = align_up(total, kDeviceAlign) + std::get<3>(o)->tensor.nbytes();
    payload += std::get<3>(o)->tensor.nbytes();
  }

  WeightStore out;
  out.root_ = root_;
  out.sources_ = sources_;
  out.device_ = device;
  out.device_memory_ = kernels::DeviceMemory::allocate(device, std::max<size_t>(total, 1));
  std::vector<kernels::HostToDevice> ranges;
  ranges.reserve(order.size());
  size_t offset = 0;
  for (const auto& [source, data, name, e] : order) {
    offset = align_up(offset, kDeviceAlign);
    void* dst = static_cast<char*>(out.device_memory_.data()) + offset;
    check(e->tensor.is_contiguous(), "weights", "to_device: tensor '" + *name + "' is not contiguous");
    ranges.push_back({dst, e->tensor.data, e->tensor.nbytes()});
    Tensor t =
        Tensor::view(dst, e->tensor.dtype, std::span<const int64_t>(e->tensor.shape, e->tensor.ndim), device);
    out.entries_.emplace(*name, Entry{t, e->source});
    offset += e->tensor.nbytes();
  }
  ProgressLine line(opts.progress, device, payload);
  kernels::upload(device, ranges, opts.chunk_bytes, [&](size_t done) { line.update(done); });
  line.update(payload, /*final=*/true);
  return out;
}

}  // namespace bunsen::model
