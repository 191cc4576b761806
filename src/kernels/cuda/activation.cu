// CUDA element-wise activation ops: gelu_tanh_mul (GeGLU) and softcap (Gemma's logit soft-cap) over
// [n_rows, n_cols] (rows may be strided views): 8 columns per thread with 16-byte accesses (vec8.cuh)
// when every row is 16-byte aligned, else a flat grid-stride loop; math in f32, storage in each tensor's
// dtype (f32|bf16). Not validating (dispatch.cpp checks shapes). Invariant: the formulas of
// activation.cuh, i.e. those of kernels/ref, through one functor per op (both paths store the same bits).
#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/vec8.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;

int flat_blocks(int64_t total) {
  const int64_t want = (total + kThreads - 1) / kThreads, cap = static_cast<int64_t>(sm_count()) * 32;
  return static_cast<int>(want < cap ? want : cap);
}

struct GeluTanhMul {
  __device__ __forceinline__ float operator()(float g, float u) const { return gelu_tanh(g) * u; }
};

struct Softcap {
  float cap;
  __device__ __forceinline__ float operator()(float x) const { return softcap_value(x, cap); }
};

template <typename OT, typename GT, typename UT>
__global__ void gelu_tanh_mul_kernel(OT* out, int64_t os, const GT* gate, int64_t gs, const UT* up, int64_t us,
                                     int64_t n_rows, int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    out[r * os + c] = from_f32<OT>(GeluTanhMul{}(to_f32(gate[r * gs + c]), to_f32(up[r * us + c])));
  }
}

template <typename XT>
__global__ void softcap_kernel(XT* x, int64_t xs, int64_t n_rows, int64_t n_cols, float cap) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    XT* p = x + r * xs + c;
    *p = from_f32<XT>(Softcap{cap}(to_f32(*p)));
  }
}

}  // namespace

void gelu_tanh_mul(void* stream, DevRows out, DevRows gate, DevRows up) {
  if (out.n_rows == 0 || out.n_cols == 0) return;
  const bool vec = vec8::rows_ok(out) && vec8::rows_ok(gate) && vec8::rows_ok(up);
  with_act_type(out.dtype, [&](auto ot) {
    with_act_type(gate.dtype, [&](auto gt) {
      with_act_type(up.dtype, [&](auto ut) {
        using OT = typename decltype(ot)::type;
        using GT = typename decltype(gt)::type;
        using UT = typename decltype(ut)::type;
        if (vec) {
          const vec8::Grid g = vec8::grid_for(out.n_rows, out.n_cols);
          vec8::gated_kernel<<<g.blocks, g.threads, 0, as_stream(stream)>>>(
              static_cast<OT*>(out.data), out.stride, static_cast<const GT*>(gate.data), gate.stride,
              static_cast<const UT*>(up.data), up.stride, out.n_rows, out.n_cols, GeluTanhMul{});
          return;
        }
        gelu_tanh_mul_kernel<OT, GT, UT><<<flat_blocks(out.n_rows * out.n_cols), kThreads, 0, as_stream(stream)>>>(
            static_cast<OT*>(out.data), out.stride, static_cast<const GT*>(gate.data), gate.stride,
            static_cast<const UT*>(up.data), up.stride, out.n_rows, out.n_cols);
      });
    });
  });
  check_launch("gelu_tanh_mul", [&] { return rows_desc("out", out) + ", " + rows_desc("gate", gate); });
}

void softcap(void* stream, DevRows x, float cap) {
  if (x.n_rows == 0 || x.n_cols == 0) return;
  const bool vec = vec8::rows_ok(x);
  with_act_type(x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    if (vec) {
      const vec8::Grid g = vec8::grid_for(x.n_rows, x.n_cols);
      vec8::map_kernel<<<g.blocks, g.threads, 0, as_stream(stream)>>>(static_cast<XT*>(x.data), x.stride, x.n_rows,
                                                                       x.n_cols, Softcap{cap});
      return;
    }
    softcap_kernel<XT><<<flat_blocks(x.n_rows * x.n_cols), kThreads, 0, as_stream(stream)>>>(
        static_cast<XT*>(x.data), x.stride, x.n_rows, x.n_cols, cap);
  });
  check_launch("softcap", [&] { return rows_desc("x", x); });
}

}  // namespace bunsen::kernels::cuda
