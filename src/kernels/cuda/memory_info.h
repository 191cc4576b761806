// Free and total memory of one CUDA device (cudaMemGetInfo), for memory budgets (`bunsen fit`, serve's
// default --memory-budget). Not an allocator. Invariant: never throws, leaves the calling thread's current
// device as it found it, and has no CUDA headers, so code outside kernels/cuda/ can include it.
#pragma once
#include <cstddef>

namespace bunsen::kernels::cuda {

// False (and 0/0) for an invalid index or on any CUDA error (which is cleared).
bool memory_info(int index, size_t* free_bytes, size_t* total_bytes);

}  // namespace bunsen::kernels::cuda
