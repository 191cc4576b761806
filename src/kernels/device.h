// Backend-neutral device services for the layers above kernels/ (model, engine, bench, cli): which CUDA
// devices exist, owning device or pinned host memory, asynchronous copies and events, the staged upload of host
// ranges (weights) and the device bandwidth probe. Not an op (ops.h) and not CUDA-aware: no CUDA
// headers here; without the CUDA backend cuda_device_count() is 0 and every CUDA request throws
// Error("kernels", "...: CUDA backend not built"). Invariant: memory is freed by its owner's destructor.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace bunsen::kernels {

bool cuda_built();
int cuda_device_count();                  // 0 without the backend, a driver or a GPU
std::string cuda_device_name(int index);  // "" when unknown
// Makes `device` the calling thread's current CUDA device (nothing for the CPU). Device memory is
// allocated on, and ops run on, the current device.
void set_current_device(Device device);

// One owning allocation: device memory (CUDA), page-locked host memory, or ordinary aligned host memory.
// Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // `bytes` on `device` (a CUDA device becomes the current device first); zeroed when `zero`.
  static DeviceMemory allocate(Device device, size_t bytes, bool zero = false);
  // Host memory that CUDA copies can read and write asynchronously (plain host memory without CUDA).
  static DeviceMemory pinned_host(size_t bytes);
  DeviceMemory(DeviceMemory&&) noexcept = default;
  DeviceMemory& operator=(DeviceMemory&&) noexcept = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }  // cpu for pinned host memory

 private:
  std::shared_ptr<void> owner_;  // the backend's buffer object (its destructor frees the memory)
  void* data_ = nullptr;
  size_t size_ = 0;
  Device device_{};
};

// Enqueues a copy on ctx's CUDA stream (any direction between host and device memory) and returns
// without waiting; host memory involved should be pinned and must stay untouched until synchronize().
void copy_async(Context& ctx, void* dst, const void* src, size_t bytes);
// Waits for everything enqueued on ctx's CUDA stream.
void synchronize(Context& ctx);
// `height` rows of `width` bytes: row r from src + r * spitch to dst + r * dpitch, enqueued like copy_async
// (one strided copy instead of `height` small ones).
void copy_2d_async(Context& ctx, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height);

// A CUDA stream owned by its holder (graph capture cannot use the legacy default stream). Empty for the
// CPU. Move-only; destroyed with the last copy of its handle.
class DeviceStream {
 public:
  DeviceStream() = default;
  static DeviceStream create(Device device);  // CPU: an empty stream (handle() == nullptr)
  void* handle() const { return handle_.get(); }

 private:
  std::shared_ptr<void> handle_;
};

// A completion marker on a stream (a CUDA event): record() marks everything enqueued on ctx's stream so far;
// query() is true once that has run (or when never recorded), without waiting; synchronize() waits for it.
// For the CPU an empty event: always complete (CPU copies are done when they return). Move-only.
class DeviceEvent {
 public:
  DeviceEvent() = default;
  static DeviceEvent create(Device device);
  void record(Context& ctx);
  bool query() const;
  void synchronize() const;
  // Work enqueued on ctx's stream from now on waits for this event's last record (the host does not wait).
  void wait_on(Context& ctx) const;
  bool empty() const { return handle_ == nullptr; }

 private:
  std::shared_ptr<void> handle_;
};

// A decode step recorded once and replayed with one launch (a CUDA graph). begin_capture() starts
// recording ctx's stream (which must not be the legacy default stream); every op enqueued on it until
// end_capture() is recorded instead of run. abort_capture() discards a capture that threw half-way.
class DeviceGraph {
 public:
  DeviceGraph() = default;
  static void begin_capture(Context& ctx);
  static DeviceGraph end_capture(Context& ctx);
  static void abort_capture(Context& ctx);
  void launch(Context& ctx) const;
  bool empty() const { return exec_ == nullptr; }

 private:
  std::shared_ptr<void> exec_;
};
// Bytes of the per-stream scratch arena of ctx's stream (graphs captured earlier are stale once it grew).
size_t scratch_capacity(Context& ctx);
// Grows ctx's scratch arena (a CUDA context's stream) to what ops.h's sample() needs for `rows` rows of n
// logits, so that sampling allocates nothing later (and drops no captured graph); nothing without CUDA.
void reserve_sample_scratch(Context& ctx, int64_t rows, int64_t n);

// One host range (pageable, e.g. an mmap) and where it goes on the device.
struct HostToDevice {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};
// Copies the ranges to `device` through a double-buffered pinned staging buffer (2 x chunk_bytes) and
// returns when all have arrived; progress(bytes done) after each chunk.
void upload(Device device, std::span<const HostToDevice> ranges, size_t chunk_bytes,
            const std::function<void(size_t)>& progress = {});

// Read bandwidth of `device`'s memory in 1e9 bytes/s (best of `repeats` passes over `bytes`).
double device_read_bandwidth_gbps(Device device, size_t bytes = size_t{1} << 30, int repeats = 10);

// Starts / stops the range a CUDA profiler started with --profile-from-start off records (`ncu`); a no-op
// without CUDA.
void profiler_range(bool start);

}  // namespace bunsen::kernels
