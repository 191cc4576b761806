// How much memory a device has and how much is free now: CUDA devices through cudaMemGetInfo, the CPU
// through /proc/meminfo (MemTotal, MemAvailable). Used for memory budgets (`bunsen fit`; a default
// --memory-budget). Not an allocator and not a reservation: the figures are a snapshot.
// Invariant: without the CUDA backend a CUDA device is an Error("kernels", ...: CUDA backend not built).
#pragma once
#include <cstddef>
#include <string_view>

#include "core/tensor.h"

namespace bunsen::kernels {

struct MemoryInfo {
  size_t total_bytes = 0;
  size_t free_bytes = 0;  // CUDA: free now (after this process's context); CPU: MemAvailable
};

// Throws Error("kernels", ...) when the device does not exist or cannot be queried.
MemoryInfo memory_info(Device device);
// /proc/meminfo text -> MemTotal and MemAvailable (MemFree when MemAvailable is absent), in bytes.
MemoryInfo parse_meminfo(std::string_view text);

}  // namespace bunsen::kernels
