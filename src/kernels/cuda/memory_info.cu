// cudaMemGetInfo for one device (see memory_info.h). Creating the device's primary context is a side effect
// of the query: the free figure already excludes that context's own memory.
#include <cuda_runtime.h>

#include "kernels/cuda/memory_info.h"

namespace bunsen::kernels::cuda {

bool memory_info(int index, size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = 0;
  int n = 0, previous = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || index < 0 || index >= n || cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool ok = cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) {
    *free_bytes = *total_bytes = 0;
    cudaGetLastError();
  }
  return ok;
}

}  // namespace bunsen::kernels::cuda
