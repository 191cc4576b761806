// device.h over the CUDA backend (kernels/cuda/cuda_ops.h and device_info.h) or, without it, over host
// memory with "CUDA backend not built" errors for every CUDA request. Not an allocator policy: callers
// size their memory. Invariant: the only file above kernels/cuda/ that owns CUDA memory objects.
#include "kernels/device.h"

#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"
#endif

namespace bunsen::kernels {
namespace {

[[maybe_unused]] [[noreturn]] void not_built(const char* what) {
  throw Error("kernels", std::string(what) + ": CUDA backend not built");
}

void need_cuda_device(const char* what, Device d) {
  if (!d.is_cuda()) throw Error("kernels", std::string(what) + ": " + d.str() + " is not a CUDA device");
#ifndef BUNSEN_HAVE_CUDA
  not_built(what);
#endif
}

}  // namespace

#ifdef BUNSEN_HAVE_CUDA

bool cuda_built() {
  return true;
}
int cuda_device_count() {
  return cuda::device_count();
}
std::string cuda_device_name(int index) {
  return cuda::device_name(index);
}

void set_current_device(Device device) {
  if (!device.is_cuda()) return;
  const int n = cuda::device_count();
  if (device.index < 0 || device.index >= n)
    throw Error("kernels", strfmt("%s: no such CUDA device (%d visible)", device.str().c_str(), n));
  cuda::set_device(device.index);
}

DeviceMemory DeviceMemory::allocate(Device device, size_t bytes, bool zero) {
  DeviceMemory m;
  m.size_ = bytes;
  m.device_ = device;
  if (device.is_cpu()) {
    auto buf = std::make_shared<Buffer>(bytes, zero);
    m.data_ = buf->data();
    m.owner_ = std::move(buf);
    return m;
  }
  set_current_device(device);
  auto buf = std::make_shared<cuda::DeviceBuffer>(bytes);
  m.data_ = buf->data();
  m.owner_ = std::move(buf);
  if (zero) {
    cuda::fill_zero_async(m.data_, bytes, nullptr);
    cuda::synchronize(nullptr);
  }
  return m;
}

DeviceMemory DeviceMemory::pinned_host(size_t bytes) {
  DeviceMemory m;
  auto buf = std::make_shared<cuda::PinnedBuffer>(bytes);
  m.data_ = buf->data();
  m.size_ = bytes;
  m.owner_ = std::move(buf);
  return m;
}

DeviceStream DeviceStream::create(Device device) {
  DeviceStream s;
  if (!device.is_cuda()) return s;
  set_current_device(device);
  s.handle_ = std::shared_ptr<void>(cuda::stream_create(), [](void* h) { cuda::stream_destroy(h); });
  return s;
}

DeviceEvent DeviceEvent::create(Device device) {
  DeviceEvent e;
  if (!device.is_cuda()) return e;
  set_current_device(device);
  e.handle_ = std::shared_ptr<void>(cuda::event_create(), [](void* h) { cuda::event_destroy(h); });
  return e;
}

void DeviceEvent::record(Context& ctx) {
  if (handle_) cuda::event_record(handle_.get(), ctx.cuda_stream);
}

bool DeviceEvent::query() const { return !handle_ || cuda::event_query(handle_.get()); }

void DeviceEvent::synchronize() const {
  if (handle_) cuda::event_synchronize(handle_.get());
}

void DeviceEvent::wait_on(Context& ctx) const {
  if (handle_) cuda::stream_wait_event(ctx.cuda_stream, handle_.get());
}

void DeviceGraph::begin_capture(Context& ctx) {
  check(ctx.cuda_stream != nullptr, "kernels", "graph capture needs a stream of its own (not the default stream)");
  cuda::graph_begin_capture(ctx.cuda_stream);
}

DeviceGraph DeviceGraph::end_capture(Context& ctx) {
  DeviceGraph g;
  g.exec_ = std::shared_ptr<void>(cuda::graph_end_capture(ctx.cuda_stream), [](void* e) { cuda::graph_destroy(e); });
  return g;
}

void DeviceGraph::abort_capture(Context& ctx) { cuda::graph_abort_capture(ctx.cuda_stream); }

void DeviceGraph::launch(Context& ctx) const {
  check(exec_ != nullptr, "kernels", "launch of an empty graph");
  cuda::graph_launch(exec_.get(), ctx.cuda_stream);
}

size_t scratch_capacity(Context& ctx) { return cuda::scratch_capacity(ctx.cuda_stream); }

void reserve_sample_scratch(Context& ctx, int64_t rows, int64_t n) {
  if (rows > 0 && n > 0) cuda::reserve_scratch(ctx.cuda_stream, cuda::sample_scratch_bytes(rows, n));
}

void copy_async(Context& ctx, void* dst, const void* src, size_t bytes) {
  cuda::copy_async(dst, src, bytes, ctx.cuda_stream);
}

void copy_2d_async(Context& ctx, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height) {
  cuda::copy_2d_async(dst, dpitch, src, spitch, width, height, ctx.cuda_stream);
}

void synchronize(Context& ctx) {
  cuda::synchronize(ctx.cuda_stream);
}

void upload(Device device, std::span<const HostToDevice> ranges, size_t chunk_bytes,
            const std::function<void(size_t)>& progress) {
  need_cuda_device("upload", device);
  set_current_device(device);
  std::vector<cuda::HostToDevice> r(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) r[i] = {ranges[i].dst, ranges[i].src, ranges[i].bytes};
  cuda::upload(r.data(), r.size(), chunk_bytes, nullptr, progress);
}

double device_read_bandwidth_gbps(Device device, size_t bytes, int repeats) {
  need_cuda_device("device_read_bandwidth_gbps", device);
  set_current_device(device);
  return cuda::read_bandwidth_gbps(bytes, repeats, nullptr);
}

void profiler_range(bool start) {
  cuda::profiler_range(start);
}

#else  // !BUNSEN_HAVE_CUDA

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_device_name(int) {
  return "";
}

void set_current_device(Device device) {
  if (device.is_cuda()) not_built("set_current_device");
}

DeviceMemory DeviceMemory::allocate(Device device, size_t bytes, bool zero) {
  if (device.is_cuda()) not_built("DeviceMemory::allocate");
  DeviceMemory m;
  auto buf = std::make_shared<Buffer>(bytes, zero);
  m.data_ = buf->data();
  m.size_ = bytes;
  m.owner_ = std::move(buf);
  return m;
}

DeviceMemory DeviceMemory::pinned_host(size_t bytes) {
  return allocate(Device::cpu(), bytes);
}

DeviceStream DeviceStream::create(Device device) {
  if (device.is_cuda()) not_built("DeviceStream::create");
  return {};
}

DeviceEvent DeviceEvent::create(Device device) {
  if (device.is_cuda()) not_built("DeviceEvent::create");
  return {};
}
void DeviceEvent::record(Context&) {}
bool DeviceEvent::query() const { return true; }
void DeviceEvent::synchronize() const {}
void DeviceEvent::wait_on(Context&) const {}

void DeviceGraph::begin_capture(Context&) { not_built("DeviceGraph::begin_capture"); }
DeviceGraph DeviceGraph::end_capture(Context&) { not_built("DeviceGraph::end_capture"); }
void DeviceGraph::abort_capture(Context&) {}
void DeviceGraph::launch(Context&) const { not_built("DeviceGraph::launch"); }
size_t scratch_capacity(Context&) { return 0; }

void reserve_sample_scratch(Context&, int64_t, int64_t) {}

void copy_async(Context&, void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);  // host to host: the only kind without CUDA
}

void copy_2d_async(Context&, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height) {
  for (size_t r = 0; r < height && width > 0; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
}

void synchronize(Context&) {}

void upload(Device device, std::span<const HostToDevice>, size_t, const std::function<void(size_t)>&) {
  need_cuda_device("upload", device);
}

double device_read_bandwidth_gbps(Device device, size_t, int) {
  need_cuda_device("device_read_bandwidth_gbps", device);
  return 0;
}

void profiler_range(bool) {}

#endif

}  // namespace bunsen::kernels
