// CUDA device queries (see device_info.h) through the runtime API. Not initialising anything beyond
// what cudaGetDeviceCount / cudaGetDeviceProperties do. Invariant: CUDA errors become 0 / "" and are
// cleared so they do not surface in a later, unrelated cudaGetLastError().
#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"

namespace bunsen::kernels::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  if (index < 0 || index >= device_count()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

}  // namespace bunsen::kernels::cuda
