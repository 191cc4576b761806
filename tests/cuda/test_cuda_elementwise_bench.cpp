// Prefill micro-benchmark of the memory-bound element-wise kernels on the Llama-3.1-8B shapes (bf16):
// silu_mul and gelu_tanh_mul at 2048 x 14336, add_scaled at 2048 x 4096, and rope_kv_write at 2048
// tokens (32 q heads, 8 kv heads, head_dim 128, paged bf16 cache) plus its decode sizes (1, 16, 64
// tokens). Each op runs on 16-byte aligned rows (the vectorised kernels) and on rows shifted by one
// element (the scalar / per-row kernels they replace); prints us and GB/s (bytes read + written).
// A measurement tool, not a speed assertion: runs only with BUNSEN_BENCH_GEMV=1. Operand sets cycle so
// that no call finds its inputs in the 50 MB L2.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "graph_bench_util.h"

namespace bunsen::kernels::test {
namespace {

// One device allocation of `bytes` (+ slack for a shifted view), filled with a constant byte pattern.
struct Dev {
  cuda::DeviceBuffer buf;
  static Dev make(size_t bytes, int byte = 0x3c) {
    Dev d;
    d.buf = cuda::DeviceBuffer(bytes + 256);
    EXPECT_EQ(cudaMemset(d.buf.data(), byte, d.buf.size()), cudaSuccess);
    return d;
  }
  // A [rows, cols] view with row stride `stride`, starting `lead` elements in.
  Tensor rows(DType dt, int64_t n_rows, int64_t cols, int64_t stride, int64_t lead = 0) const {
    Tensor t = Tensor::view(static_cast<char*>(buf.data()) + lead * dtype_size(dt), dt, {n_rows, cols},
                            Device::cuda(cuda::current_device()));
    t.strides[0] = stride;
    return t;
  }
};

class ElementwiseBench : public GraphBench {
 protected:
  double time_us(const std::function<void(int)>& fn) { return GraphBench::time_us(fn, 20); }

  static void report(const std::string& what, double us, double bytes) {
    std::printf("[bench] %-58s %9.2f us %6.0f GB/s\n", what.c_str(), us, bytes / us / 1e3);
  }

};

constexpr int kSets = 3;  // operand sets cycled per call (each set larger than L2 / kSets)

// silu_mul / gelu_tanh_mul on the gate and up halves of a fused [m, 2f] projection (the model's layout),
// and add_scaled on the residual; lead 1 shifts every row by one element (the scalar kernel).
TEST_F(ElementwiseBench, GatedActivationsAndResidualAtPrefill) {
  const int64_t m = 2048, f = 14336, d = 4096;
  for (int64_t lead : {int64_t{0}, int64_t{1}}) {
    const char* path = lead == 0 ? "vec8" : "scalar (unaligned)";
    std::vector<Dev> gu, out;
    for (int s = 0; s < kSets; ++s) {
      gu.push_back(Dev::make(static_cast<size_t>(m * 2 * f) * 2));
      out.push_back(Dev::make(static_cast<size_t>(m * f) * 2));
    }
    auto gate = [&](int i) { return gu[i % kSets].rows(DType::kBF16, m, f, 2 * f, lead); };
    auto up = [&](int i) { return gu[i % kSets].rows(DType::kBF16, m, f, 2 * f, lead + f); };
    auto o = [&](int i) { return out[i % kSets].rows(DType::kBF16, m, f, f, lead); };
    const double bytes = 3.0 * m * f * 2;
    report(strfmt("silu_mul 2048 x 14336 bf16 %s", path), time_us([&](int i) { silu_mul(ctx_, o(i), gate(i), up(i)); }),
           bytes);
    report(strfmt("gelu_tanh_mul 2048 x 14336 bf16 %s", path),
           time_us([&](int i) { gelu_tanh_mul(ctx_, o(i), gate(i), up(i)); }), bytes);
    // add_scaled x [m, d] f32 += y bf16 (the residual stream); reads x and y, writes x.
    std::vector<Dev> xs, ys;
    for (int s = 0; s < kSets * 2; ++s) {
      xs.push_back(Dev::make(static_cast<size_t>(m * d) * 4, 0));
      ys.push_back(Dev::make(static_cast<size_t>(m * d) * 2));
    }
    report(strfmt("add_scaled 2048 x 4096 f32 += bf16 %s", path), time_us([&](int i) {
             add_scaled(ctx_, xs[i % (2 * kSets)].rows(DType::kF32, m, d, d, lead),
                        ys[i % (2 * kSets)].rows(DType::kBF16, m, d, d, lead), 1.0f);
           }),
           m * d * (4.0 + 2.0 + 4.0));
  }
}

// rope_kv_write on the 8B shape: q, k, v as head views of fused qkv rows [n, 6144] bf16, a bf16 paged
// cache of 16-token blocks; bytes = q, k read + written, v read, k and v written to the cache.
TEST_F(ElementwiseBench, RopeKvWriteAtPrefillAndDecode) {
  const int64_t nh = 32, kvh = 8, hd = 128, width = (nh + 2 * kvh) * hd, block = 16;
  std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / hd);
  const RopeParams rp{inv_freq.data(), static_cast<int>(hd), 1.0f};
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{64}, int64_t{2048}}) {
    const int64_t n_blocks = (n + block - 1) / block;
    OwnedTensor pos_h = OwnedTensor::make(DType::kI32, {n}), slot_h = OwnedTensor::make(DType::kI64, {n});
    for (int64_t t = 0; t < n; ++t) {
      pos_h.tensor.ptr<int32_t>()[t] = static_cast<int32_t>(1000 + t);
      slot_h.tensor.ptr<int64_t>()[t] = t;
    }
    DeviceTensor pos = DeviceTensor::upload(pos_h.tensor), slot = DeviceTensor::upload(slot_h.tensor);
    const int sets = n >= 1024 ? kSets : 1;
    std::vector<Dev> qkv, kc, vc;
    for (int s = 0; s < sets; ++s) {
      qkv.push_back(Dev::make(static_cast<size_t>(n * (width + 1)) * 2, 0x3c));  // room for shifted rows
      kc.push_back(Dev::make(static_cast<size_t>(n_blocks * block * kvh * hd) * 2));
      vc.push_back(Dev::make(static_cast<size_t>(n_blocks * block * kvh * hd) * 2));
    }
    const double bytes = n * (2.0 * nh * hd + 2.0 * kvh * hd + kvh * hd + 2.0 * kvh * hd) * 2;
    for (int64_t lead : {int64_t{0}, int64_t{1}}) {
      auto heads = [&](int i, int64_t head0, int64_t n_heads) {
        Tensor t = qkv[i % sets].rows(DType::kBF16, n, n_heads * hd, width + lead, lead + head0 * hd);
        t.ndim = 3;
        t.shape[1] = n_heads;
        t.shape[2] = hd;
        t.strides[0] = width + lead;
        t.strides[1] = hd;
        t.strides[2] = 1;
        return t;
      };
      auto cache = [&](const Dev& c) {
        return Tensor::view(c.buf.data(), DType::kBF16, {n_blocks, block, kvh, hd}, Device::cuda(cuda::current_device()));
      };
      const double us = time_us([&](int i) {
        rope_kv_write(ctx_, heads(i, 0, nh), heads(i, nh, kvh), heads(i, nh + kvh, kvh),
                      {cache(kc[i % sets]), cache(vc[i % sets])}, pos.tensor, slot.tensor, rp);
      });
      report(strfmt("rope_kv_write %lld tokens 8B bf16 %s", (long long)n, lead == 0 ? "vec8" : "per-row (unaligned)"),
             us, bytes);
    }
  }
}

}  // namespace
}  // namespace bunsen::kernels::test
