// cpu::rope and cpu::kv_write, threaded over tokens. rope computes each token's cos/sin table once
// (thread-local scratch) and applies it to every head; kv_write converts rows to the cache dtype.
// A quantized cache is quantized row by row with ref's kv_quantize_row (bit-identical codes).
// Not validating. Invariants: rope uses exactly ref's float formula (angle = (float)pos * inv_freq[i]),
// so results are bit-identical to ref; kv_write skips slots < 0.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/float_io.h"
#include "kernels/kv_quant.h"
#include "kernels/rows.h"

namespace bunsen::kernels::cpu {

void rope(ThreadPool& pool, Tensor x, Tensor positions, const RopeParams& p) {
  const int64_t half = p.rotary_dim / 2, n_heads = x.shape[1];
  const int32_t* pos = positions.ptr<int32_t>();
  const int64_t grain = 64 / (n_heads > 0 ? n_heads : 1) + 1;
  pool.parallel_for(x.shape[0], grain, [&](int64_t b, int64_t e) {
    float* table = thread_scratch(kScratchTable, static_cast<size_t>(2 * half));
    float* cs = table;
    float* sn = table + half;
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * p.inv_freq[i];
        cs[i] = std::cos(angle) * p.attention_scaling;
        sn[i] = std::sin(angle) * p.attention_scaling;
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* xh = x.ptr<float>() + t * x.strides[0] + h * x.strides[1];
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = xh[i], x2 = xh[i + half];
          xh[i] = x1 * cs[i] - x2 * sn[i];
          xh[i + half] = x2 * cs[i] + x1 * sn[i];
        }
      }
    }
  });
}

void kv_write(ThreadPool& pool, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  const int64_t* slots = slot_mapping.ptr<int64_t>();
  const int64_t block_size = cache.k.shape[1], n_kv_heads = k.shape[1], head_dim = k.shape[2];
  const int64_t grain = 4096 / (n_kv_heads * head_dim > 0 ? n_kv_heads * head_dim : 1) + 1;
  pool.parallel_for(k.shape[0], grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
      for (int64_t h = 0; h < n_kv_heads; ++h) {
        const float* ks = k.ptr<float>() + t * k.strides[0] + h * k.strides[1];
        const float* vs = v.ptr<float>() + t * v.strides[0] + h * v.strides[1];
        char* kd = kv_row(cache.k, block, offset, h);
        char* vd = kv_row(cache.v, block, offset, h);
        if (cache.quantized()) {
          kv_quantize_row(ks, head_dim, cache.bits, cache.group_size, reinterpret_cast<uint8_t*>(kd),
                          reinterpret_cast<float*>(kv_row(cache.k_params, block, offset, h)), cache.fp8);
          kv_quantize_row(vs, head_dim, cache.bits, cache.group_size, reinterpret_cast<uint8_t*>(vd),
                          reinterpret_cast<float*>(kv_row(cache.v_params, block, offset, h)), cache.fp8);
          continue;
        }
        for (int64_t d = 0; d < head_dim; ++d) {
          store_f(kd, cache.k.dtype, d, ks[d]);
          store_f(vd, cache.v.dtype, d, vs[d]);
        }
      }
    }
  });
}

}  // namespace bunsen::kernels::cpu
