// Minimal CUDA device queries, the first piece of the CUDA backend (library bunsen_kernels_cuda, built
// only when nvcc exists; BUNSEN_HAVE_CUDA is defined for users of bunsen_kernels then).
// Not a device manager: no contexts, streams or memory here. Invariant: never throws; no CUDA headers
// leak from this file, so code outside kernels/cuda/ can include it.
#pragma once
#include <string>

namespace bunsen::kernels::cuda {

// Number of visible CUDA devices; 0 when there is no driver, no GPU, or any CUDA error.
int device_count();

// Device name as the driver reports it ("NVIDIA H200", ...); "" for an invalid index or on error.
std::string device_name(int index);

}  // namespace bunsen::kernels::cuda
