// CUDA rope (in place, HF rotate_half on the first rotary_dim dims), kv_write (rows into the paged
// cache through slot_mapping) and rope_kv_write (both ropes and the write in one launch, the decode
// path). One block per (token, head) row; rope_kv_write on a plain cache with aligned rows takes a
// vectorised kernel instead (one block row per token, 8 pairs per thread, see rope_kv_write_vec_kernel).
// Not attention. Invariants: rope uses ref's formula with angle =
// (float)pos * inv_freq[i] and full-precision sincosf; inv_freq travels by value in the launch
// parameters (so graph replays keep the values captured); kv_write skips slots < 0 and slots past the
// cache, rounding to the cache dtype to nearest-even exactly as ref's f32_to_bf16; the fused kernel writes
// the cache from k as stored (rounded to k's dtype), as rope followed by kv_write would. A quantized cache
// (--kv-quant) gets each row quantized by the whole block (kv_quant.cuh), with the CPU's codes and params.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rope_math.cuh"
#include "kernels/cuda/vec8.cuh"

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
    const float2 y = rotate_values(to_f32(xh[i]), to_f32(xh[i + half]), c, s);
    xh[i] = from_f32<XT>(y.x);
    xh[i + half] = from_f32<XT>(y.y);
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
  const float2 y = rotate_values(to_f32(xh[i]), to_f32(xh[i + half]), c, s);
  const XT y1 = from_f32<XT>(y.x), y2 = from_f32<XT>(y.y);
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

// ---- rope_kv_write on a plain cache, vectorised (the prefill path, and decode when aligned) ----
// A token's work is cut into units of 8 consecutive elements, in this order: q rotation units (pairs
// i..i+7 with i+half..i+half+7 of one q head), k rotation units (the same on k, plus the cache write), k
// pass-through units (k's dims past rotary_dim, copied to the cache) and v units (copied to the cache).
// Grid (n_tokens, ceil(units / kRopeThreads)): one unit per thread. The block computes the token's cos/sin
// table (half entries, one sincosf each) into shared memory before its programmatic-dependent-launch wait,
// then each thread loads and rotates its unit. Needs half % 8 == 0, head dims % 8 == 0 and 16-byte aligned
// rows (rope_vec_ok); the results are those of rope_kv_write_kernel bit for bit.
constexpr int kRopeThreads = 128;

struct RopeUnits {
  int rot, pass, vcols;            // per row: rotation units (half / 8), k pass-through units, v units
  int q_end, k_end, pass_end, end;  // cumulative unit counts of one token
};

__host__ __device__ inline RopeUnits rope_units(const DevRopeKv& a, int half) {
  RopeUnits u;
  u.rot = half / vec8::kVec;
  u.pass = static_cast<int>(a.k.head_dim - 2 * half) / vec8::kVec;
  u.vcols = static_cast<int>(a.v.head_dim) / vec8::kVec;
  const int kvh = static_cast<int>(a.k.n_heads);
  u.q_end = static_cast<int>(a.q.n_heads) * u.rot;
  u.k_end = u.q_end + kvh * u.rot;
  u.pass_end = u.k_end + kvh * u.pass;
  u.end = u.pass_end + kvh * u.vcols;
  return u;
}

template <typename XT, typename VT, typename CT>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kv_write_vec_kernel(const DevRopeKv a, const __grid_constant__ RopeTable table, int half) {
  __shared__ float2 cs[kMaxRotaryDim / 2];  // (cos, sin) * attention_scaling of pair i at this position
  pdl_launch_dependents();
  using vec8::kVec;
  const int64_t t = blockIdx.x;
  // The position and slot are step metadata, copied from the host before the step's first kernel (no kernel
  // writes them; the decode attention kernels read them before their wait too), so the cos/sin table is
  // computed before the wait, off the step's critical path; q, k and v are read after it.
  const DevCache& c = a.cache;
  const int64_t slot = a.slot_mapping[t];
  const bool write = slot >= 0 && slot < c.n_blocks * c.block_size;  // uniform over the block
  const int64_t block = write ? slot / c.block_size : 0, offset = write ? slot % c.block_size : 0;
  const float pos = static_cast<float>(a.positions[t]), scaling = a.attention_scaling;
  for (int i = threadIdx.x; i < half; i += kRopeThreads) {
    float s, co;
    sincosf(pos * table.inv_freq[i], &s, &co);
    cs[i] = make_float2(co * scaling, s * scaling);
  }
  pdl_wait();
  const RopeUnits n = rope_units(a, half);
  const int u = static_cast<int>(blockIdx.y) * kRopeThreads + static_cast<int>(threadIdx.x);
  // This thread's unit: its row (head) h, first column j, and the values it reads.
  enum Kind { kNone, kQ, kK, kPass, kV } kind = kNone;
  int h = 0, j = 0;
  float x1[kVec], x2[kVec];
  XT* row = nullptr;
  if (u < n.q_end) {
    kind = kQ, h = u / n.rot, j = (u - h * n.rot) * kVec;
    row = static_cast<XT*>(a.q.data) + t * a.q.token_stride + h * a.q.head_stride;
  } else if (u < n.k_end) {
    kind = kK, h = (u - n.q_end) / n.rot, j = (u - n.q_end - h * n.rot) * kVec;
    row = static_cast<XT*>(a.k.data) + t * a.k.token_stride + h * a.k.head_stride;
  } else if (u < n.pass_end) {
    kind = kPass, h = (u - n.k_end) / n.pass, j = 2 * half + (u - n.k_end - h * n.pass) * kVec;
    row = static_cast<XT*>(a.k.data) + t * a.k.token_stride + h * a.k.head_stride;
  } else if (u < n.end) {
    kind = kV, h = (u - n.pass_end) / n.vcols, j = (u - n.pass_end - h * n.vcols) * kVec;
  }
  if (kind == kQ || kind == kK) {
    vec8::load8(row + j, x1);
    vec8::load8(row + j + half, x2);
  } else if (kind == kPass) {
    vec8::load8(row + j, x1);
  } else if (kind == kV) {
    vec8::load8(static_cast<const VT*>(a.v.data) + t * a.v.token_stride + h * a.v.head_stride + j, x1);
  }
  __syncthreads();
  if (kind == kNone || (!write && (kind == kPass || kind == kV))) return;
  if (kind == kQ || kind == kK) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float2 r = cs[j + i];
      const float2 y = rotate_values(x1[i], x2[i], r.x, r.y);
      x1[i] = to_f32(from_f32<XT>(y.x));  // as stored in q / k
      x2[i] = to_f32(from_f32<XT>(y.y));
    }
    vec8::store8(row + j, x1);
    vec8::store8(row + j + half, x2);
    if (kind == kQ || !write) return;
  }
  CT* dst = kind == kV ? static_cast<CT*>(c.v) + block * c.v_strides[0] + offset * c.v_strides[1] + h * c.v_strides[2]
                       : static_cast<CT*>(c.k) + block * c.k_strides[0] + offset * c.k_strides[1] + h * c.k_strides[2];
  vec8::store8(dst + j, x1);
  if (kind == kK) vec8::store8(dst + j + half, x2);
}

// The vectorised kernel can take this call: a plain cache, half and every head dim a multiple of 8, all
// rows (q, k, v heads and tokens, cache rows) 16-byte aligned.
bool rope_vec_ok(const DevRopeKv& a, int half) {
  using vec8::aligned16;
  using vec8::stride_ok;
  const DevCache& c = a.cache;
  if (c.bits != 0 || half % vec8::kVec != 0 || a.k.head_dim % vec8::kVec != 0 || a.v.head_dim % vec8::kVec != 0 ||
      a.k.head_dim < 2 * half || a.q.head_dim < 2 * half)
    return false;
  auto heads_ok = [](const DevHeads& x) {
    return aligned16(x.data) && stride_ok(x.token_stride, x.dtype) && stride_ok(x.head_stride, x.dtype);
  };
  if (!heads_ok(a.q) || !heads_ok(a.k) || !heads_ok(a.v) || !aligned16(c.k) || !aligned16(c.v)) return false;
  for (int d = 0; d < 3; ++d)
    if (!stride_ok(c.k_strides[d], c.dtype) || !stride_ok(c.v_strides[d], c.dtype)) return false;
  return true;
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
  // The vectorised kernel needs q, k and v over the same tokens (one block row per token).
  const bool vec = a.q.n_tokens == a.k.n_tokens && a.v.n_tokens == a.k.n_tokens && a.k.n_tokens > 0 &&
                   rope_vec_ok(a, half);
  const int vec_units = vec ? rope_units(a, half).end : 0;
  const unsigned vec_splits = static_cast<unsigned>((vec_units + kRopeThreads - 1) / kRopeThreads);
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
      if (vec_splits > 0) {
        with_act_type(c.dtype, [&](auto ct) {
          const cudaError_t e = launch_pdl(rope_kv_write_vec_kernel<XT, VT, typename decltype(ct)::type>,
                                           dim3(static_cast<unsigned>(a.k.n_tokens), vec_splits), dim3(kRopeThreads),
                                           0, as_stream(stream), a, table, half);
          check_cuda(e, "rope_kv_write", [&] { return heads_desc("q", a.q); });
        });
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
