// CUDA rope (in place, HF rotate_half on the first rotary_dim dims), kv_write (rows into the paged
// cache through slot_mapping) and rope_kv_write (both ropes and the write in one launch, the decode
// path). One block per (token, head) row. Not attention. Invariants: rope uses ref's formula with angle =
// (float)pos * inv_freq[i] and full-precision sincosf; inv_freq travels by value in the launch
// parameters (so graph replays keep the values captured); kv_write skips slots < 0 and slots past the
// cache, rounding to the cache dtype to nearest-even exactly as ref's f32_to_bf16; the fused kernel writes
// the cache from k as stored (rounded to k's dtype), as rope followed by kv_write would. A quantized cache
// (--kv-quant) gets each row quantized by the whole block (kv_quant.cuh), with the CPU's codes and params.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda {
namespace {

struct RopeTable {
  float inv_freq[kMaxRotaryDim / 2];
};

template <typename XT>
__global__ void rope_kernel(XT* x, int64_t token_stride, int64_t head_stride, int64_t n_heads,
                            const int32_t* positions, const __grid_constant__ RopeTable table, int half,
                            float attention_scaling) {
  const int64_t t = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  XT* xh = x + t * token_stride + h * head_stride;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * table.inv_freq[i], &s, &c);
    c *= attention_scaling;
    s *= attention_scaling;
    const float x1 = to_f32(xh[i]), x2 = to_f32(xh[i + half]);
    xh[i] = from_f32<XT>(x1 * c - x2 * s);
    xh[i + half] = from_f32<XT>(x2 * c + x1 * s);
  }
}

template <typename CT, typename KT, typename VT>
__global__ void kv_write_kernel(DevCache cache, const KT* k, const VT* v, DevHeads kh, DevHeads vh,
                                const int64_t* slots) {
  const int64_t t = blockIdx.x / kh.n_heads, h = blockIdx.x % kh.n_heads;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= cache.n_blocks * cache.block_size) return;
  const int64_t block = slot / cache.block_size, offset = slot % cache.block_size;
  CT* kd = static_cast<CT*>(cache.k) + block * cache.k_strides[0] + offset * cache.k_strides[1] +
           h * cache.k_strides[2];
  CT* vd = static_cast<CT*>(cache.v) + block * cache.v_strides[0] + offset * cache.v_strides[1] +
           h * cache.v_strides[2];
  const KT* ks = k + t * kh.token_stride + h * kh.head_stride;
  const VT* vs = v + t * vh.token_stride + h * vh.head_stride;
  for (int64_t d = threadIdx.x; d < kh.head_dim; d += blockDim.x) {
    kd[d] = from_f32<CT>(to_f32(ks[d]));
    vd[d] = from_f32<CT>(to_f32(vs[d]));
  }
}

// Row (block, offset, head) of a quantized cache part: its codes and params.
struct QuantDst {
  uint8_t* codes;
  float* params;
};

__device__ __forceinline__ QuantDst quant_dst(void* codes, float* params, const int64_t (&cs)[3],
                                              const int64_t (&ps)[3], int64_t block, int64_t offset, int64_t h) {
  return {static_cast<uint8_t*>(codes) + block * cs[0] + offset * cs[1] + h * cs[2],
          params + block * ps[0] + offset * ps[1] + h * ps[2]};
}

// kv_write into a quantized cache: one block per (token, kv head) row quantizes its K and V rows.
template <int F, typename KT, typename VT>
__global__ void kv_write_quant_kernel(DevCache cache, const KT* k, const VT* v, DevHeads kh, DevHeads vh,
                                      const int64_t* slots) {
  const int64_t t = blockIdx.x / kh.n_heads, h = blockIdx.x % kh.n_heads;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= cache.n_blocks * cache.block_size) return;  // uniform over the block
  const int64_t block = slot / cache.block_size, offset = slot % cache.block_size;
  const QuantDst kd = quant_dst(cache.k, cache.k_params, cache.k_strides, cache.kp_strides, block, offset, h);
  const QuantDst vd = quant_dst(cache.v, cache.v_params, cache.v_strides, cache.vp_strides, block, offset, h);
  const int hd = static_cast<int>(kh.head_dim), group = cache.group_size;
  kv_quantize_row_block<F>(k + t * kh.token_stride + h * kh.head_stride, hd, group, kd.codes, kd.params);
  kv_quantize_row_block<F>(v + t * vh.token_stride + h * vh.head_stride, hd, group, vd.codes, vd.params);
}

// Rotates the pair (i, i + half) of one head row in place; returns the values as stored.
template <typename XT>
__device__ __forceinline__ float2 rotate_pair(XT* xh, int i, int half, float pos, float inv_freq, float scaling) {
  float s, c;
  sincosf(pos * inv_freq, &s, &c);
  c *= scaling;
  s *= scaling;
  const float x1 = to_f32(xh[i]), x2 = to_f32(xh[i + half]);
  const XT y1 = from_f32<XT>(x1 * c - x2 * s), y2 = from_f32<XT>(x2 * c + x1 * s);
  xh[i] = y1;
  xh[i + half] = y2;
  return make_float2(to_f32(y1), to_f32(y2));
}

// Blocks [0, n_tokens * n_heads) rotate one q head row; blocks past that take one kv head row: rotate k,
// then write k and v to the slot (skipped for slots < 0 or past the cache; k is still rotated). F != plain:
// CT is uint8_t and the rotated k row (as stored in k) and the v row are quantized by the whole block.
template <typename XT, typename VT, typename CT, int F>
__global__ void rope_kv_write_kernel(const DevRopeKv a, const __grid_constant__ RopeTable table, int half) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t q_rows = a.q.n_tokens * a.q.n_heads;
  const float scaling = a.attention_scaling;
  if (blockIdx.x < q_rows) {
    const int64_t t = blockIdx.x / a.q.n_heads, h = blockIdx.x % a.q.n_heads;
    XT* qh = static_cast<XT*>(a.q.data) + t * a.q.token_stride + h * a.q.head_stride;
    const float pos = static_cast<float>(a.positions[t]);
    for (int i = threadIdx.x; i < half; i += blockDim.x) rotate_pair(qh, i, half, pos, table.inv_freq[i], scaling);
    return;
  }
  const int64_t row = blockIdx.x - q_rows, t = row / a.k.n_heads, h = row % a.k.n_heads;
  XT* kh = static_cast<XT*>(a.k.data) + t * a.k.token_stride + h * a.k.head_stride;
  const VT* vh = static_cast<const VT*>(a.v.data) + t * a.v.token_stride + h * a.v.head_stride;
  const DevCache& c = a.cache;
  const int64_t slot = a.slot_mapping[t];
  const bool write = slot >= 0 && slot < c.n_blocks * c.block_size;
  const int64_t block = write ? slot / c.block_size : 0, offset = write ? slot % c.block_size : 0;
  CT* kd = static_cast<CT*>(c.k) + block * c.k_strides[0] + offset * c.k_strides[1] + h * c.k_strides[2];
  CT* vd = static_cast<CT*>(c.v) + block * c.v_strides[0] + offset * c.v_strides[1] + h * c.v_strides[2];
  const float pos = static_cast<float>(a.positions[t]);
  if constexpr (F != kKvPlain) {
    (void)kd;
    (void)vd;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rotate_pair(kh, i, half, pos, table.inv_freq[i], scaling);
    if (!write) return;  // uniform over the block
    __syncthreads();     // the rotated row is in k (global, written by this block)
    const QuantDst kq = quant_dst(c.k, c.k_params, c.k_strides, c.kp_strides, block, offset, h);
    const QuantDst vq = quant_dst(c.v, c.v_params, c.v_strides, c.vp_strides, block, offset, h);
    kv_quantize_row_block<F>(kh, static_cast<int>(a.k.head_dim), c.group_size, kq.codes, kq.params);
    kv_quantize_row_block<F>(vh, static_cast<int>(a.v.head_dim), c.group_size, vq.codes, vq.params);
  } else {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float2 y = rotate_pair(kh, i, half, pos, table.inv_freq[i], scaling);
      if (write) {
        kd[i] = from_f32<CT>(y.x);
        kd[i + half] = from_f32<CT>(y.y);
      }
    }
    if (!write) return;
    for (int64_t d = 2 * half + threadIdx.x; d < a.k.head_dim; d += blockDim.x) kd[d] = from_f32<CT>(to_f32(kh[d]));
    for (int64_t d = threadIdx.x; d < a.v.head_dim; d += blockDim.x) vd[d] = from_f32<CT>(to_f32(vh[d]));
  }
}

}  // namespace

void rope(void* stream, DevHeads x, const int32_t* positions, const float* inv_freq_host, int rotary_dim,
          float attention_scaling) {
  const int64_t rows = x.n_tokens * x.n_heads;
  if (rows == 0) return;
  if (rotary_dim > kMaxRotaryDim || rotary_dim <= 0 || rotary_dim % 2 != 0)
    throw Error("cuda", strfmt("rope: rotary_dim %d must be even and in (0, %d]", rotary_dim, kMaxRotaryDim));
  RopeTable table{};
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) table.inv_freq[i] = inv_freq_host[i];
  with_act_type(x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    rope_kernel<XT><<<static_cast<unsigned>(rows), row_threads(half), 0, as_stream(stream)>>>(
        static_cast<XT*>(x.data), x.token_stride, x.head_stride, x.n_heads, positions, table, half,
        attention_scaling);
  });
  check_launch("rope", [&] { return heads_desc("x", x) + strfmt(", rotary_dim %d", rotary_dim); });
}

void kv_write(void* stream, const DevCache& cache, DevHeads k, DevHeads v, const int64_t* slot_mapping) {
  const int64_t rows = k.n_tokens * k.n_heads;
  if (rows == 0 || k.head_dim == 0) return;
  if (cache.bits != 0) {
    if (k.head_dim > kMaxHeadDim || cache.group_size <= 0 || k.head_dim % cache.group_size != 0)
      throw Error("cuda", strfmt("kv_write: quantized cache needs head_dim %lld <= %d and a group (%d) dividing it",
                                 (long long)k.head_dim, kMaxHeadDim, cache.group_size));
    with_quant_fmt(cache, [&](auto fmt) {
      with_act_type(k.dtype, [&](auto kt) {
        with_act_type(v.dtype, [&](auto vt) {
          using KT = typename decltype(kt)::type;
          using VT = typename decltype(vt)::type;
          kv_write_quant_kernel<decltype(fmt)::value, KT, VT>
              <<<static_cast<unsigned>(rows), row_threads(k.head_dim), 0, as_stream(stream)>>>(
                  cache, static_cast<const KT*>(k.data), static_cast<const VT*>(v.data), k, v, slot_mapping);
        });
      });
    });
    check_launch("kv_write", [&] {
      return heads_desc("k", k) + strfmt(", quantized cache [%lld, %lld, %lld, head_dim %lld] bits %d fp8 %d",
                                         (long long)cache.n_blocks, (long long)cache.block_size,
                                         (long long)cache.n_kv_heads, (long long)cache.head_dim, cache.bits,
                                         cache.fp8 ? 1 : 0);
    });
    return;
  }
  with_act_type(cache.dtype, [&](auto ct) {
    with_act_type(k.dtype, [&](auto kt) {
      with_act_type(v.dtype, [&](auto vt) {
        using CT = typename decltype(ct)::type;
        using KT = typename decltype(kt)::type;
        using VT = typename decltype(vt)::type;
        kv_write_kernel<CT, KT, VT>
            <<<static_cast<unsigned>(rows), row_threads(k.head_dim), 0, as_stream(stream)>>>(
                cache, static_cast<const KT*>(k.data), static_cast<const VT*>(v.data), k, v, slot_mapping);
      });
    });
  });
  check_launch("kv_write", [&] {
    return heads_desc("k", k) + strfmt(", cache [%lld, %lld, %lld, %lld] %s", (long long)cache.n_blocks,
                                       (long long)cache.block_size, (long long)cache.n_kv_heads,
                                       (long long)cache.head_dim, dtype_name(cache.dtype));
  });
}

void rope_kv_write(void* stream, const DevRopeKv& a) {
  const int64_t rows = a.q.n_tokens * a.q.n_heads + a.k.n_tokens * a.k.n_heads;
  if (rows == 0) return;
  const int rotary_dim = a.rotary_dim;
  if (rotary_dim > kMaxRotaryDim || rotary_dim < 0 || rotary_dim % 2 != 0 || a.q.dtype != a.k.dtype)
    throw Error("cuda", strfmt("rope_kv_write: rotary_dim %d must be even and in [0, %d], q and k one dtype",
                               rotary_dim, kMaxRotaryDim));
  RopeTable table{};
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) table.inv_freq[i] = a.inv_freq_host[i];
  const int threads = row_threads(a.k.head_dim > half ? a.k.head_dim : half);
  const DevCache& c = a.cache;
  if (c.bits != 0 && (a.k.head_dim > kMaxHeadDim || a.v.head_dim != a.k.head_dim || c.group_size <= 0 ||
                      a.k.head_dim % c.group_size != 0))
    throw Error("cuda", strfmt("rope_kv_write: quantized cache needs head_dim %lld (= v's %lld) <= %d and a group "
                               "(%d) dividing it",
                               (long long)a.k.head_dim, (long long)a.v.head_dim, kMaxHeadDim, c.group_size));
  with_act_type(a.q.dtype, [&](auto xt) {
    with_act_type(a.v.dtype, [&](auto vt) {
      using XT = typename decltype(xt)::type;
      using VT = typename decltype(vt)::type;
      auto go = [&](auto kernel) {
        check_cuda(launch_pdl(kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, as_stream(stream), a,
                              table, half),
                   "rope_kv_write", [&] { return heads_desc("q", a.q); });
      };
      if (c.bits != 0) {
        with_quant_fmt(c, [&](auto fmt) { go(rope_kv_write_kernel<XT, VT, uint8_t, decltype(fmt)::value>); });
        return;
      }
      with_act_type(c.dtype, [&](auto ct) {
        go(rope_kv_write_kernel<XT, VT, typename decltype(ct)::type, kKvPlain>);
      });
    });
  });
  check_launch("rope_kv_write", [&] {
    return heads_desc("q", a.q) + ", " + heads_desc("k", a.k) + strfmt(", rotary_dim %d", rotary_dim);
  });
}

}  // namespace bunsen::kernels::cuda
