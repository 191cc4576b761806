// pdl_enabled(): whether launch_pdl asks for programmatic dependent launch (pdl.cuh). Not a launcher.
// Invariant: the environment and the device's compute capability are read once per process (the
// backend assumes one GPU model per process).

#include "core/env.h"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    if (!env_flag("BUNSEN_PDL", true)) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace bunsen::kernels::cuda
