// memory_info.h over cudaMemGetInfo (kernels/cuda/memory_info.h) and /proc/meminfo.
#include "kernels/memory_info.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/status.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/memory_info.h"
#endif

namespace bunsen::kernels {
namespace {

// "Key:   12345 kB" -> bytes; 0 when the key is absent.
size_t meminfo_field(std::string_view text, std::string_view key) {
  for (size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    if ((at > 0 && text[at - 1] != '\n') || at + key.size() >= text.size() || text[at + key.size()] != ':') continue;
    const std::string rest(text.substr(at + key.size() + 1, 40));
    char* end = nullptr;
    const unsigned long long v = std::strtoull(rest.c_str(), &end, 10);
    const bool kb = std::string_view(end).find("kB") != std::string_view::npos;
    return static_cast<size_t>(v) * (kb ? 1024 : 1);
  }
  return 0;
}

}  // namespace

MemoryInfo parse_meminfo(std::string_view text) {
  MemoryInfo m;
  m.total_bytes = meminfo_field(text, "MemTotal");
  m.free_bytes = meminfo_field(text, "MemAvailable");
  if (m.free_bytes == 0) m.free_bytes = meminfo_field(text, "MemFree");
  return m;
}

MemoryInfo memory_info(Device device) {
  if (device.is_cpu()) {
    std::ifstream f("/proc/meminfo");
    std::stringstream ss;
    ss << f.rdbuf();
    const MemoryInfo m = parse_meminfo(ss.str());
    check(m.total_bytes > 0, "kernels", "cannot read MemTotal from /proc/meminfo");
    return m;
  }
#ifdef BUNSEN_HAVE_CUDA
  MemoryInfo m;
  if (!cuda::memory_info(device.index, &m.free_bytes, &m.total_bytes))
    throw Error("kernels", "cannot query the memory of " + device.str());
  return m;
#else
  throw Error("kernels", "memory_info(" + device.str() + "): CUDA backend not built");
#endif
}

}  // namespace bunsen::kernels
