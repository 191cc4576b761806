// Pinned host memory, asynchronous copies, events, the staged host-to-device upload (weights from an mmap) and
// the device read-bandwidth probe. Not the per-op memory (memory.cu) and not a model loader: callers
// say which ranges go where. Invariants: a staging half is refilled only after the device copy that
// read it has completed (one event per half); the probe's sum is written out so no load is elided.
#include <cuda_profiler_api.h>

#include <cstring>
#include <utility>

#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

// ---- PinnedBuffer ----

PinnedBuffer::PinnedBuffer(size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault), "cudaHostAlloc",
             [&] { return strfmt("of %zu bytes", bytes); });
  size_ = bytes;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

// ---- asynchronous copies ----

void copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), "copy_async",
             [&] { return strfmt("of %zu bytes", bytes); });
}

void copy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   void* stream) {
  if (width == 0 || height == 0) return;
  check_cuda(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, as_stream(stream)),
             "copy_2d_async", [&] { return strfmt("of %zu rows x %zu bytes (pitches %zu, %zu)", height, width, spitch, dpitch); });
}

void fill_zero_async(void* dst, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)), "fill_zero_async",
             [&] { return strfmt("of %zu bytes", bytes); });
}

// ---- events ----

void* event_create() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event_create", [] { return std::string(); });
  return e;
}

void event_destroy(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, void* stream) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)), "event_record",
             [] { return std::string(); });
}

bool event_query(void* event) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so no later check sees it
    return false;
  }
  check_cuda(e, "event_query", [] { return std::string(); });
  return true;
}

void event_synchronize(void* event) {
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "event_synchronize",
             [] { return std::string(); });
}

void stream_wait_event(void* stream, void* event) {
  check_cuda(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0), "stream_wait_event",
             [] { return std::string(); });
}

// ---- staged upload ----

namespace {

// Two events (one per staging half), destroyed on every exit path.
struct EventPair {
  cudaEvent_t ev[2] = {nullptr, nullptr};
  EventPair() {
    for (cudaEvent_t& e : ev)
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "upload",
                 [] { return std::string(); });
  }
  ~EventPair() {
    for (cudaEvent_t e : ev)
      if (e != nullptr) cudaEventDestroy(e);
  }
};

}  // namespace

void upload(const HostToDevice* ranges, size_t n_ranges, size_t chunk_bytes, void* stream,
            const std::function<void(size_t)>& progress) {
  if (chunk_bytes == 0) throw Error("cuda", "upload: chunk_bytes must be > 0");
  PinnedBuffer stage(2 * chunk_bytes);
  EventPair events;
  cudaStream_t s = as_stream(stream);
  struct DrainOnExit {  // on an error, copies still reading `stage` finish before it is freed
    cudaStream_t s;
    ~DrainOnExit() { cudaStreamSynchronize(s); }
  } drain{s};
  size_t done = 0;
  int half = 0;
  for (size_t i = 0; i < n_ranges; ++i) {
    const HostToDevice& r = ranges[i];
    for (size_t off = 0; off < r.bytes; off += chunk_bytes, half ^= 1) {
      const size_t n = r.bytes - off < chunk_bytes ? r.bytes - off : chunk_bytes;
      char* slot = static_cast<char*>(stage.data()) + static_cast<size_t>(half) * chunk_bytes;
      auto detail = [&] { return strfmt("(range %zu, %zu bytes at offset %zu)", i, n, off); };
      check_cuda(cudaEventSynchronize(events.ev[half]), "upload", detail);  // the half's last copy is done
      std::memcpy(slot, static_cast<const char*>(r.src) + off, n);
      check_cuda(cudaMemcpyAsync(static_cast<char*>(r.dst) + off, slot, n, cudaMemcpyHostToDevice, s),
                 "upload", detail);
      check_cuda(cudaEventRecord(events.ev[half], s), "upload", detail);
      done += n;
      if (progress) progress(done);
    }
  }
  check_cuda(cudaStreamSynchronize(s), "upload", [] { return std::string("(final synchronize)"); });
}

// ---- bandwidth probe ----

namespace {

__global__ void read_kernel(const uint4* data, int64_t n, unsigned int* sink) {
  unsigned int acc = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const uint4 v = __ldcs(data + i);  // streaming: the buffer is far larger than L2 anyway
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);  // practically never true, but the loads must happen
}

struct EventTimer {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventTimer() {
    check_cuda(cudaEventCreate(&start), "read_bandwidth_gbps", [] { return std::string(); });
    check_cuda(cudaEventCreate(&stop), "read_bandwidth_gbps", [] { return std::string(); });
  }
  ~EventTimer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

}  // namespace

void profiler_range(bool start) {
  check_cuda(start ? cudaProfilerStart() : cudaProfilerStop(), "profiler_range", [] { return std::string(); });
}

double read_bandwidth_gbps(size_t bytes, int repeats, void* stream) {
  const char* op = "read_bandwidth_gbps";
  const int64_t n = static_cast<int64_t>(bytes / sizeof(uint4));
  if (n == 0 || repeats < 1) throw Error("cuda", "read_bandwidth_gbps: bytes >= 16 and repeats >= 1 needed");
  DeviceBuffer buf(static_cast<size_t>(n) * sizeof(uint4)), sink(sizeof(unsigned int));
  cudaStream_t s = as_stream(stream);
  check_cuda(cudaMemsetAsync(buf.data(), 0x5a, buf.size(), s), op, [] { return std::string("(fill)"); });
  EventTimer t;
  const int blocks = sm_count() * 4, threads = 512;
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {  // pass 0 warms up
    check_cuda(cudaEventRecord(t.start, s), op, [] { return std::string(); });
    read_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint4*>(buf.data()), n,
                                           static_cast<unsigned int*>(sink.data()));
    check_launch(op, [&] { return strfmt("(%zu bytes)", bytes); });
    check_cuda(cudaEventRecord(t.stop, s), op, [] { return std::string(); });
    check_cuda(cudaEventSynchronize(t.stop), op, [] { return std::string(); });
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, t.start, t.stop), op, [] { return std::string(); });
    const double gbps = static_cast<double>(buf.size()) / (static_cast<double>(ms) * 1e-3) / 1e9;
    if (r > 0 && gbps > best) best = gbps;
  }
  return best;
}

}  // namespace bunsen::kernels::cuda
