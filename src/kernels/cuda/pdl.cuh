// Programmatic dependent launch (Hopper): a kernel launched through launch_pdl may start while the
// kernel before it on the stream is still finishing, runs its prologue (weight loads that depend on no
// earlier kernel), then waits in pdl_wait() until that kernel has completed and its writes are visible.
// Not a scheduler. Invariants: a kernel launched with launch_pdl calls pdl_wait() on every thread path
// before it reads anything an earlier kernel writes or writes anything an earlier kernel reads;
// BUNSEN_PDL=0 turns the attribute off (plain stream order), as do devices below compute capability 9.0.
#pragma once
#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel (if launched with launch_pdl) start its prologue once every block of this one
// has called this or exited.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

bool pdl_enabled();  // BUNSEN_PDL != "0" (read once) and the current device is sm_90+

template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace bunsen::kernels::cuda
