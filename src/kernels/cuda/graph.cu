// CUDA streams owned by callers and CUDA graphs captured on them: the Runner captures one decode step per
// batch-size bucket and replays it with a single launch. Not a scheduler of what is captured. Invariants:
// capture is thread-local (other threads' CUDA calls are not disturbed); an aborted capture leaves the
// stream usable and clears the sticky capture error.
#include "kernels/cuda/cuda_common.cuh"

namespace bunsen::kernels::cuda {

void* stream_create() {
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate",
             [] { return std::string(); });
  return s;
}

void stream_destroy(void* stream) {
  if (stream == nullptr) return;
  release_scratch(stream);  // after the work on it: freeing device memory waits for the device
  cudaStreamDestroy(as_stream(stream));
}

void graph_begin_capture(void* stream) {
  check_cuda(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal), "graph capture",
             [] { return std::string("(begin)"); });
}

void* graph_end_capture(void* stream) {
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(as_stream(stream), &graph), "graph capture", [] { return std::string("(end)"); });
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(e, "graph capture", [] { return std::string("(instantiate)"); });
  return exec;
}

void graph_abort_capture(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(as_stream(stream), &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  }
  cudaGetLastError();
}

void graph_launch(void* exec, void* stream) {
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), as_stream(stream)), "graph launch",
             [] { return std::string(); });
}

void graph_destroy(void* exec) {
  if (exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

}  // namespace bunsen::kernels::cuda
