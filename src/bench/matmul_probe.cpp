// Matmul-rate probe (see matmul_probe.h): synthetic bf16 operands, one warm-up pass, the best timed pass.
#include "bench/matmul_probe.h"

#include <algorithm>
#include <chrono>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/synthetic.h"

namespace bunsen::bench {
namespace {

// Values in [-1, 1), bf16-exact: model/synthetic.h's stream (never zero-dominated).
void fill_random_bf16(uint16_t* dst, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(model::synthetic_value(key, i, {}));
}

void fill_random_f32(float* dst, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; ++i) dst[i] = model::synthetic_value(key, i, {});
}

}  // namespace

MatmulShape matmul_probe_shape(Device device) {
  return device.is_cuda() ? MatmulShape{8192, 8192, 8192} : MatmulShape{64, 4096, 2048};
}

MatmulRateResult measure_matmul_rate(Device device, ThreadPool& pool, MatmulShape shape, int repeats) {
  if (shape.m == 0 && shape.n == 0 && shape.k == 0) shape = matmul_probe_shape(device);
  check(repeats >= 1, "bench", strfmt("matmul probe: repeats %d must be >= 1", repeats));
  check(shape.m > 0 && shape.n > 0 && shape.k > 0, "bench",
        strfmt("matmul probe: shape %lld x %lld x %lld must be positive", (long long)shape.m,
               (long long)shape.n, (long long)shape.k));
  const bool cuda = device.is_cuda();
  kernels::set_current_device(device);
  // CUDA: bf16 activations as the model's prefill runs them; CPU: f32 activations (the CPU linear's only
  // form).
  const DType act = cuda ? DType::kBF16 : DType::kF32;
  const size_t x_n = static_cast<size_t>(shape.m * shape.k), w_n = static_cast<size_t>(shape.n * shape.k);
  const size_t out_n = static_cast<size_t>(shape.m * shape.n);
  kernels::DeviceMemory x = kernels::DeviceMemory::allocate(device, x_n * dtype_size(act));
  kernels::DeviceMemory w = kernels::DeviceMemory::allocate(device, w_n * sizeof(uint16_t));
  kernels::DeviceMemory out = kernels::DeviceMemory::allocate(device, out_n * dtype_size(act));
  kernels::DeviceStream stream = kernels::DeviceStream::create(device);
  kernels::Context ctx{&pool, stream.handle()};
  if (cuda) {
    kernels::DeviceMemory host = kernels::DeviceMemory::pinned_host(std::max(x_n, w_n) * sizeof(uint16_t));
    auto* h = static_cast<uint16_t*>(host.data());
    fill_random_bf16(h, x_n, 1);
    kernels::copy_async(ctx, x.data(), h, x_n * sizeof(uint16_t));
    kernels::synchronize(ctx);
    fill_random_bf16(h, w_n, 2);
    kernels::copy_async(ctx, w.data(), h, w_n * sizeof(uint16_t));
    kernels::synchronize(ctx);
  } else {
    fill_random_f32(static_cast<float*>(x.data()), x_n, 1);
    fill_random_bf16(static_cast<uint16_t*>(w.data()), w_n, 2);
  }
  const Tensor tx = Tensor::view(x.data(), act, {shape.m, shape.k}, device);
  const Tensor tw = Tensor::view(w.data(), DType::kBF16, {shape.n, shape.k}, device);
  const Tensor tout = Tensor::view(out.data(), act, {shape.m, shape.n}, device);
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {  // pass 0 warms up (cuBLASLt's plan, the CPU's threads and pages)
    const auto t0 = std::chrono::steady_clock::now();
    kernels::linear(ctx, tout, tx, tw);
    if (cuda) kernels::synchronize(ctx);  // the CPU linear returns when done
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flop = 2.0 * static_cast<double>(shape.m * shape.n) * static_cast<double>(shape.k);
    if (r > 0) best = std::max(best, flop / s / 1e9);
  }
  return {best, shape};
}

}  // namespace bunsen::bench
