// libbunsen_kernel_trace.so: a kernel timeline of any CUDA process, for the GPU machine, where Nsight Systems
// cannot import its own captures. Preload it and name the output:
//   LD_PRELOAD=libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE=trace.csv bunsen benchmark ...
// At load it asks CUPTI for concurrent-kernel activity records (kernels inside CUDA graphs included, with
// their graph ids, so programmatic-dependent-launch overlap is visible); at exit it flushes them and writes
// one CSV row per kernel: start and end (ns, GPU clock), graph id, grid and block size, registers, shared
// memory, name. scripts/kernel_trace.py turns the rows into a per-step breakdown. Not linked into bunsen:
// nothing changes unless it is preloaded. Invariant: the buffers CUPTI fills are parsed only in its
// completion callback.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  uint64_t start, end;
  uint32_t graph, stream;
  int32_t grid, block, smem;
  uint16_t regs;
  std::string name;
};

std::mutex g_mu;
std::vector<Row>* g_rows = nullptr;  // leaked on purpose: written from CUPTI's thread until exit
bool g_on = false;

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

// The kernel's name without its parameter list: templates kept (they tell the instances apart).
std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {  // cut at the '(' of the parameters (outside template brackets)
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Row> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back({k->start, k->end, k->graphId, k->streamId, k->gridX * k->gridY * k->gridZ,
                   k->blockX * k->blockY * k->blockZ, k->staticSharedMemory + k->dynamicSharedMemory,
                   k->registersPerThread, short_name(k->name)});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_rows->insert(g_rows->end(), got.begin(), got.end());
}

void write_rows() {
  if (!g_on) return;
  cuptiActivityFlushAll(1);
  // A process that ran no kernel (a wrapper such as `timeout` that inherited LD_PRELOAD) leaves the file
  // alone.
  if (g_rows->empty()) return;
  const char* path = std::getenv("BUNSEN_KERNEL_TRACE");
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "start_ns,end_ns,graph,stream,grid,block,smem,regs,name\n");
  for (const Row& r : *g_rows) {
    std::string name = r.name;
    for (char& c : name)
      if (c == '"') c = '\'';
    std::fprintf(f, "%llu,%llu,%u,%u,%d,%d,%d,%u,\"%s\"\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.graph, r.stream, r.grid, r.block, r.smem, r.regs,
                 name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels -> %s\n", g_rows->size(), path);
}

__attribute__((constructor)) void start_trace() {
  const char* path = std::getenv("BUNSEN_KERNEL_TRACE");
  if (path == nullptr || *path == '\0') return;
  g_rows = new std::vector<Row>();
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing is not available\n");
    return;
  }
  g_on = true;
  std::atexit(write_rows);
}

}  // namespace
