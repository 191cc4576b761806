// Device memory for the CUDA backend: DeviceBuffer, synchronous copies, the per-(device, stream)
// scratch arena, cached device properties and the error/description helpers of cuda_common.cuh.
// Not an allocator for model state (the Runner and KvStorage own that through DeviceBuffer).
// Invariants: the arena only grows, and only when its stream is not capturing (it synchronises the
// stream before freeing the old block); the maps here are never destroyed, so nothing is freed after
// the CUDA runtime has shut down at process exit.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

void throw_cuda(const char* op, cudaError_t e, const std::string& detail) {
  cudaGetLastError();  // clear a non-sticky error so it does not resurface in an unrelated check
  std::string msg = std::string(op) + ": " + cudaGetErrorString(e);
  if (!detail.empty()) msg += " " + detail;
  throw Error("cuda", msg);
}

std::string rows_desc(const char* name, const DevRows& r) {
  return strfmt("%s [%lld, %lld] %s (stride %lld)", name, (long long)r.n_rows, (long long)r.n_cols,
                dtype_name(r.dtype), (long long)r.stride);
}

std::string heads_desc(const char* name, const DevHeads& h) {
  return strfmt("%s [%lld, %lld, %lld] %s", name, (long long)h.n_tokens, (long long)h.n_heads,
                (long long)h.head_dim, dtype_name(h.dtype));
}

// ---- DeviceBuffer ----

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

uint64_t DeviceBuffer::allocations() {
  return g_allocations.load();
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  g_allocations.fetch_add(1);
  check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc", [&] { return strfmt("of %zu bytes", bytes); });
  size_ = bytes;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);  // errors at exit (runtime already gone) are ignored
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

// ---- copies ----

namespace {

void copy(void* dst, const void* src, size_t bytes, void* stream, cudaMemcpyKind kind, const char* op) {
  if (bytes == 0) return;
  auto detail = [&] { return strfmt("of %zu bytes", bytes); };
  check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, as_stream(stream)), op, detail);
  check_cuda(cudaStreamSynchronize(as_stream(stream)), op, detail);
}

}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  copy(dst, src, bytes, stream, cudaMemcpyHostToDevice, "copy_to_device");
}

void copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  copy(dst, src, bytes, stream, cudaMemcpyDeviceToHost, "copy_to_host");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  copy(dst, src, bytes, stream, cudaMemcpyDeviceToDevice, "copy_device_to_device");
}

void synchronize(void* stream) {
  check_cuda(cudaStreamSynchronize(as_stream(stream)), "synchronize", [] { return std::string(); });
}

int current_device() {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice", [] { return std::string(); });
  return dev;
}

void set_device(int index) {
  check_cuda(cudaSetDevice(index), "cudaSetDevice", [&] { return strfmt("(cuda:%d)", index); });
}

// ---- scratch arena ----

namespace {

struct Arenas {
  std::mutex mu;
  std::map<std::pair<int, void*>, DeviceBuffer> by_stream;
};

Arenas& arenas() {
  static Arenas* a = new Arenas();  // leaked on purpose: see the file comment
  return *a;
}

constexpr size_t kArenaGranule = size_t{1} << 20;

}  // namespace

void* scratch(void* stream, size_t bytes, const char* op) {
  const int dev = current_device();
  Arenas& a = arenas();
  std::lock_guard<std::mutex> lock(a.mu);
  DeviceBuffer& buf = a.by_stream[{dev, stream}];
  if (buf.size() >= bytes && buf.data() != nullptr) return buf.data();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(as_stream(stream), &status);
  if (e != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    throw Error("cuda",
                strfmt("%s: needs %zu bytes of scratch while the stream is capturing a graph, but its "
                       "arena holds %zu; run the step once (or reserve_scratch) before capturing",
                       op, bytes, buf.size()));
  }
  check_cuda(cudaStreamSynchronize(as_stream(stream)), op, [] { return std::string("(growing scratch)"); });
  const size_t want = align_up(bytes > 2 * buf.size() ? bytes : 2 * buf.size(), kArenaGranule);
  buf = DeviceBuffer();  // free first: the old block may be most of the free memory
  buf = DeviceBuffer(want);
  return buf.data();
}

void reserve_scratch(void* stream, size_t bytes) {
  scratch(stream, bytes, "reserve_scratch");
}

void release_scratch(void* stream) {
  const int dev = current_device();
  Arenas& a = arenas();
  DeviceBuffer gone;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.by_stream.find({dev, stream});
    if (it == a.by_stream.end()) return;
    gone = std::move(it->second);
    a.by_stream.erase(it);
  }
}

size_t scratch_capacity(void* stream) {
  const int dev = current_device();
  Arenas& a = arenas();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.by_stream.find({dev, stream});
  return it == a.by_stream.end() ? 0 : it->second.size();
}

// ---- device properties ----

namespace {
constexpr int kMaxDevices = 64;
}

int sm_count() {
  static int cache[kMaxDevices] = {};  // 0 = not read yet; a racing second read stores the same value
  const int dev = current_device();
  if (dev < kMaxDevices && cache[dev] > 0) return cache[dev];
  int n = 0;
  check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute",
             [] { return std::string("(multiprocessor count)"); });
  if (dev < kMaxDevices) cache[dev] = n;
  return n;
}

void allow_dynamic_smem(const void* kernel, size_t bytes, const char* op) {
  static std::mutex mu;
  static auto* done = new std::set<std::pair<const void*, int>>();
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (done->count({kernel, dev}) != 0) return;
  // Every caller asks for the same per-kernel maximum, so setting it once per device is enough.
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), op,
      [&] { return strfmt("(raising dynamic shared memory to %zu bytes)", bytes); });
  done->insert({kernel, dev});
}

}  // namespace bunsen::kernels::cuda
