// Row dequantization of MLX affine weights on CUDA and what is built on it: dequantize, embedding_q (the
// same kernel reading rows by id) and linear_q's large-m path (chunks of weight rows dequantized to bf16 in
// the stream's scratch arena, then cuBLASLt through gemm.cu). One thread per 32-code chunk.
// Not a fused GEMM (a Marlin-class tensor-core kernel would dequantize in shared memory instead of
// round-tripping bf16 through L2/HBM). Invariants: each element is fmaf(scale, code, bias) in f32 (bit for
// bit the CPU's) before the output rounding; scratch is taken once per linear_q, its first kGemmReserve
// bytes left to gemm_cublaslt (which asks for its cuBLASLt workspace from the same arena).
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/quant_gemm.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// gemm_cublaslt needs only its 32 MiB cuBLASLt workspace here (bf16 x and w, no bias, direct output):
// twice that is kept free for it at the front of the arena.
constexpr size_t kGemmReserve = size_t{64} << 20;
constexpr size_t kChunkBytes = size_t{32} << 20;  // bf16 weight rows per GEMM call (fits in L2)
constexpr int64_t kChunkRowAlign = 128;

unsigned grid_for(int64_t total) {
  const int64_t want = (total + kThreads - 1) / kThreads, cap = static_cast<int64_t>(sm_count()) * 32;
  return static_cast<unsigned>(want < 1 ? 1 : want < cap ? want : cap);
}

template <typename OT>
__device__ __forceinline__ void store8(OT* dst, const float (&v)[8], bool vec) {
  if constexpr (sizeof(OT) == 2) {
    if (vec) {
      uint32_t p[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        p[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(p[0], p[1], p[2], p[3]);
      return;
    }
  } else {
    if (vec) {
      reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) dst[e] = from_f32<OT>(v[e]);
}

// out[i, :] = dequant(w)[row_i, :] * scale with row_i = ids[i] (ids not null; an id outside w gives a NaN
// row) or row0 + i. Thread t of the grid-stride loop handles chunk t % n_chunks of output row
// t / n_chunks. vec: out and its row stride are 16-byte aligned (vector stores).
template <int kBits, typename OT>
__global__ void __launch_bounds__(kThreads)
    dequant_rows_kernel(const QuantView w, const int32_t* ids, int64_t row0, int64_t n_out, float scale,
                        OT* out, int64_t out_stride, bool vec) {
  const int64_t n_chunks = w.cols / kQuantChunk, total = n_out * n_chunks;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total; t += step) {
    const int64_t i = t / n_chunks, c = t - i * n_chunks;
    const int64_t row = ids != nullptr ? ids[i] : row0 + i;
    OT* dst = out + i * out_stride + c * kQuantChunk;
    if (row < 0 || row >= w.rows) {
      const float nan[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
#pragma unroll
      for (int js = 0; js < kQuantChunk / 8; ++js) store8(dst + 8 * js, nan, vec);
      continue;
    }
    uint32_t wv[kBits];
    const uint32_t* p = w.packed + row * w.packed_stride + c * kBits;
#pragma unroll
    for (int j = 0; j < kBits; ++j) wv[j] = __ldg(p + j);
    const int64_t g = row * w.sb_stride + (c >> w.group_shift);
    const float s = load_any(w.scales, w.sb_dtype, g), b = load_any(w.biases, w.sb_dtype, g);
#pragma unroll
    for (int js = 0; js < kQuantChunk / 8; ++js) {
      float q[8];
      decode8<kBits>(wv, js, q);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[e] = fmaf(s, q[e], b) * scale;
      store8(dst + 8 * js, q, vec);
    }
  }
}

void launch_dequant(cudaStream_t stream, const DevQuant& w, const int32_t* ids, int64_t row0, int64_t n_out,
                    float scale, DevRows out) {
  const QuantView v = quant_view(w);
  const int64_t os = static_cast<int64_t>(dtype_size(out.dtype));
  const bool vec = reinterpret_cast<uintptr_t>(out.data) % 16 == 0 && (out.stride * os) % 16 == 0;
  const unsigned blocks = grid_for(n_out * (w.cols / kQuantChunk));
  with_bits(w.bits, [&](auto b) {
    with_act_type(out.dtype, [&](auto ot) {
      using OT = typename decltype(ot)::type;
      dequant_rows_kernel<decltype(b)::value, OT><<<blocks, kThreads, 0, stream>>>(
          v, ids, row0, n_out, scale, static_cast<OT*>(out.data), out.stride, vec);
    });
  });
}

__global__ void to_bf16_kernel(Bf16* dst, int64_t ld, const float* src, int64_t ss, int64_t n_rows,
                               int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    dst[r * ld + c] = __float2bfloat16_rn(src[r * ss + c]);
  }
}

// out[i, j] = bf16(float(out[i, j]) + bias[j]) in place (the bf16 output of a GEMM chunk).
__global__ void add_bias_bf16_kernel(Bf16* out, int64_t os, const void* bias, DType bias_dtype, int64_t n_rows,
                                     int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    out[r * os + c] = __float2bfloat16_rn(__bfloat162float(out[r * os + c]) + load_any(bias, bias_dtype, c));
  }
}

std::string quant_desc(const char* op, const DevRows& out, const DevQuant& w) {
  return std::string(op) + " " + rows_desc("out", out) +
         strfmt(", w [%lld, %lld] %d-bit group %d", (long long)w.rows, (long long)w.cols, w.bits, w.group_size);
}

}  // namespace

int64_t linear_q_gemm(cudaStream_t stream, DevRows out, DevRows x, const DevQuant& w, const void* bias,
                      DType bias_dtype) {
  const int64_t m = x.n_rows, n = w.rows, k = w.cols;
  int64_t chunk_rows = static_cast<int64_t>(kChunkBytes) / (k * 2) / kChunkRowAlign * kChunkRowAlign;
  if (chunk_rows < kChunkRowAlign) chunk_rows = kChunkRowAlign;
  if (chunk_rows > n) chunk_rows = n;
  const bool convert = x.dtype != DType::kBF16 || reinterpret_cast<uintptr_t>(x.data) % 16 != 0 ||
                       (x.stride * 2) % 16 != 0;
  const size_t x_bytes = convert ? align_up(static_cast<size_t>(m * k) * 2, 256) : 0;
  const size_t w_bytes = align_up(static_cast<size_t>(chunk_rows * k) * 2, 256);
  char* base = static_cast<char*>(scratch(stream, kGemmReserve + x_bytes + w_bytes, "linear_q"));
  Bf16* xb = convert ? reinterpret_cast<Bf16*>(base + kGemmReserve) : static_cast<Bf16*>(x.data);
  Bf16* wb = reinterpret_cast<Bf16*>(base + kGemmReserve + x_bytes);
  if (convert) {
    // x f32 (or a misaligned bf16 view, rare): rounded to bf16 once for all chunks.
    if (x.dtype == DType::kF32) {
      to_bf16_kernel<<<grid_for(m * k), kThreads, 0, stream>>>(xb, k, static_cast<const float*>(x.data),
                                                                 x.stride, m, k);
    } else {
      check_cuda(cudaMemcpy2DAsync(xb, static_cast<size_t>(k) * 2, x.data, static_cast<size_t>(x.stride) * 2,
                                   static_cast<size_t>(k) * 2, static_cast<size_t>(m), cudaMemcpyDeviceToDevice,
                                   stream),
                 "linear_q", [&] { return rows_desc("x", x); });
    }
  }
  const DevRows xr{xb, DType::kBF16, m, k, convert ? k : x.stride};
  const int64_t os = static_cast<int64_t>(dtype_size(out.dtype));
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
    const int64_t rows = n - r0 < chunk_rows ? n - r0 : chunk_rows;
    const DevRows wr{wb, DType::kBF16, rows, k, k};
    launch_dequant(stream, w, nullptr, r0, rows, 1.0f, wr);
    check_launch("linear_q", [&] { return quant_desc("linear_q (dequantize)", out, w); });
    const DevRows oc{static_cast<char*>(out.data) + r0 * os, out.dtype, m, rows, out.stride};
    if (!gemm_cublaslt(stream, oc, xr, wr, nullptr, bias_dtype)) return r0;
    if (scratch(stream, 0, "linear_q") != base)
      throw Error("cuda", "linear_q: the scratch arena moved under the GEMM (kGemmReserve is too small)");
    if (bias == nullptr) continue;
    const void* bc = static_cast<const char*>(bias) + r0 * static_cast<int64_t>(dtype_size(bias_dtype));
    if (out.dtype == DType::kF32) {
      linear_epilogue(stream, oc, static_cast<const float*>(oc.data), oc.stride, bc, bias_dtype);
    } else {
      add_bias_bf16_kernel<<<grid_for(m * rows), kThreads, 0, stream>>>(static_cast<Bf16*>(oc.data), oc.stride,
                                                                          bc, bias_dtype, m, rows);
      check_launch("linear_q", [&] { return quant_desc("linear_q (bias)", out, w); });
    }
  }
  return n;
}

void embedding_q(void* stream, DevRows out, const DevQuant& table, const int32_t* ids, float scale) {
  if (out.n_rows == 0 || out.n_cols == 0) return;
  launch_dequant(as_stream(stream), table, ids, 0, out.n_rows, scale, out);
  check_launch("embedding_q", [&] { return quant_desc("embedding_q", out, table); });
}

void dequantize(void* stream, DevRows out, const DevQuant& w) {
  if (w.rows == 0 || w.cols == 0) return;
  launch_dequant(as_stream(stream), w, nullptr, 0, w.rows, 1.0f, out);
  check_launch("dequantize", [&] { return quant_desc("dequantize", out, w); });
}

}  // namespace bunsen::kernels::cuda
