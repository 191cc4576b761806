// cuda::linear_q's entry point and its small-m path: a bandwidth-bound GEMV over MLX affine-quantized
// weights. 4/8-bit weights go to the tensor-core kernels (gemv_qmma.cu) where they fit; everything
// else (other widths, f32 x over f32 scales, or forced by the kGemvSimt test hook) runs the CUDA-core kernel here. A group of `split` warps owns kR weight rows and splits k; each lane streams whole 32-code
// chunks (16-byte loads for 4/8 bits) of its kR rows, decodes the codes to exact f32 integers in registers
// and accumulates, per chunk, dot = sum(q * x) and xs = sum(x) (xs shared by the kR rows), then
// acc += scale * dot + bias * xs: the weights are never materialised and every loaded chunk serves all
// (<= 8) rows of x. Misaligned rows go to a plain one-warp-per-row kernel (also a test reference).
// Not a GEMM: m > kGemvMaxM goes to linear_q_gemm (dequant_q.cu). Invariant: every output element is
// written by exactly one lane; f32 accumulation throughout.
#include <atomic>

#include "kernels/cuda/gemv_qmma.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/quant_common.cuh"
#include "kernels/cuda/quant_gemm.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMinWarpsPerSm = 64;  // split k over warps until this many are in flight

std::atomic<LinearQPath> g_qpath{LinearQPath::kAuto};

struct QGemvArgs {
  QuantView w;             // [n, k] quantized
  const void* x = nullptr;  // [m, k] f32|bf16, row stride x_stride
  void* out = nullptr;      // [m, n] f32|bf16, row stride out_stride
  const void* bias = nullptr;
  int64_t x_stride = 0, out_stride = 0;
  int64_t m = 0;
  DType x_dtype = DType::kF32, out_dtype = DType::kF32, bias_dtype = DType::kF32;
};

__device__ __forceinline__ void store_out(const QGemvArgs& a, int64_t i, int64_t n, float v) {
  const float b = a.bias != nullptr ? load_any(a.bias, a.bias_dtype, n) : 0.0f;
  store_any(a.out, a.out_dtype, i * a.out_stride + n, v + b);
}

// The chunk loop of one lane: chunks c0 + u * 32 + lane of rows n0 .. n0 + kR - 1 (rows past n re-read
// row n - 1; their sums are never stored). kFull: every chunk of the iteration exists (no bounds checks).
template <int kBits, typename XT, typename SBT, int kM, int kR, int kU, bool kFull>
__device__ __forceinline__ void gemv_q_lane(const QGemvArgs& a, const uint32_t* const (&rows)[kR],
                                            const SBT* const (&srow)[kR], const SBT* const (&brow)[kR],
                                            int c0, int lane, float (&acc)[kM][kR]) {
  const int n_chunks = static_cast<int>(a.w.cols / kQuantChunk);
  uint32_t wv[kU][kR][kBits];
  float sc[kU][kR], bi[kU][kR];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = c0 + u * 32 + lane;
    if (kFull || c < n_chunks) {
#pragma unroll
      for (int r = 0; r < kR; ++r) load_chunk<kBits>(rows[r] + c * kBits, wv[u][r]);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        sc[u][r] = to_f32(srow[r][c >> a.w.group_shift]);
        bi[u][r] = to_f32(brow[r][c >> a.w.group_shift]);
      }
    }
  }
  const XT* x = static_cast<const XT*>(a.x);
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = c0 + u * 32 + lane;
    if (!kFull && c >= n_chunks) break;
    float dot[kM][kR] = {}, xs[kM] = {};
#pragma unroll
    for (int js = 0; js < kQuantChunk / 8; ++js) {
      float q[kR][8];
#pragma unroll
      for (int r = 0; r < kR; ++r) decode8<kBits>(wv[u][r], js, q[r]);
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        if (i >= a.m) break;
        float xv[8];
        load_x8(x + i * a.x_stride + c * kQuantChunk + 8 * js, xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) xs[i] += xv[e];
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) dot[i][r] = fmaf(q[r][e], xv[e], dot[i][r]);
      }
    }
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[i][r] = fmaf(sc[u][r], dot[i][r], fmaf(bi[u][r], xs[i], acc[i][r]));
  }
}

// Blocks per SM the register budget should allow (more warps in flight hide the load latency); 3 blocks
// spill a little with f32 x, so those take 2.
template <int kM, typename XT>
constexpr int min_blocks() {
  return kM == 1 && sizeof(XT) == 2 ? 3 : kM <= 2 ? 2 : 1;
}

template <int kBits, typename XT, typename SBT, int kM, int kR, int kU>
__global__ void __launch_bounds__(kThreads, min_blocks<kM, XT>()) gemv_q_kernel(const QGemvArgs a, int split) {
  __shared__ float partial[kWarps][kM][kR];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / split, part = warp % split;
  const int64_t n0 = (blockIdx.x * static_cast<int64_t>(kWarps / split) + group) * kR;
  const int n_chunks = static_cast<int>(a.w.cols / kQuantChunk);
  float acc[kM][kR] = {};
  if (n0 < a.w.rows) {
    const uint32_t* rows[kR];
    const SBT* srow[kR];
    const SBT* brow[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t row = n0 + r < a.w.rows ? n0 + r : a.w.rows - 1;
      rows[r] = a.w.packed + row * a.w.packed_stride;
      srow[r] = static_cast<const SBT*>(a.w.scales) + row * a.w.sb_stride;
      brow[r] = static_cast<const SBT*>(a.w.biases) + row * a.w.sb_stride;
    }
    const int stride = split * 32 * kU;
    int c0 = part * 32 * kU;
    for (; c0 + 32 * kU <= n_chunks; c0 += stride)
      gemv_q_lane<kBits, XT, SBT, kM, kR, kU, true>(a, rows, srow, brow, c0, lane, acc);
    if (c0 < n_chunks) gemv_q_lane<kBits, XT, SBT, kM, kR, kU, false>(a, rows, srow, brow, c0, lane, acc);
  }
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[i][r] = warp_sum(acc[i][r]);
  if (split == 1) {  // uniform over the block: no barrier needed
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (i < a.m && n0 + r < a.w.rows && lane == (i * kR + r) % 32) store_out(a, i, n0 + r, acc[i][r]);
    return;
  }
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r) partial[warp][i][r] = acc[i][r];
  __syncthreads();
  if (part != 0) return;
  for (int idx = lane; idx < kM * kR; idx += 32) {
    const int i = idx / kR, r = idx % kR;
    if (i >= a.m || n0 + r >= a.w.rows) continue;
    float v = 0.0f;
    for (int p = 0; p < split; ++p) v += partial[warp + p][i][r];
    store_out(a, i, n0 + r, v);
  }
}

// Any alignment, any bits: one warp per weight row, lane-strided codes, each weight dequantized exactly as
// the CPU does (fmaf(scale, code, bias)) and multiplied into up to kGemvMaxM rows of x.
template <typename XT>
__global__ void __launch_bounds__(kThreads) gemv_q_simple_kernel(const QGemvArgs a, int bits) {
  const int lane = threadIdx.x & 31;
  const int64_t n = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) >> 5;
  if (n >= a.w.rows) return;
  const QuantView& w = a.w;
  const uint32_t* row = w.packed + n * w.packed_stride;
  const XT* x = static_cast<const XT*>(a.x);
  float acc[kGemvMaxM] = {};
  for (int64_t c = lane; c < w.cols; c += 32) {
    const int64_t g = n * w.sb_stride + (c >> (5 + w.group_shift));
    const float wk = fmaf(load_any(w.scales, w.sb_dtype, g), static_cast<float>(quant_code_at(row, c, bits)),
                          load_any(w.biases, w.sb_dtype, g));
#pragma unroll
    for (int i = 0; i < kGemvMaxM; ++i) {
      if (i >= a.m) break;
      acc[i] = fmaf(wk, to_f32(x[i * a.x_stride + c]), acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvMaxM; ++i) {
    const float v = warp_sum(acc[i]);
    if (i < a.m && lane == i) store_out(a, i, n, v);
  }
}

bool aligned(const void* p, int64_t stride_bytes, int a) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) == 0 && stride_bytes % a == 0;
}

// kR weight rows per warp group, kU chunks per lane in flight; k split over as many warps per group as
// fill the GPU while each warp keeps at least one full iteration.
template <int kBits, typename XT, typename SBT, int kM, int kR, int kU>
void launch_vec(cudaStream_t stream, const QGemvArgs& a) {
  const int64_t groups = (a.w.rows + kR - 1) / kR;
  const int64_t iters = (a.w.cols / kQuantChunk + 32 * kU - 1) / (32 * kU);
  const int64_t target = static_cast<int64_t>(sm_count()) * kMinWarpsPerSm;
  int split = 1;
  while (split < kWarps && groups * split < target && iters >= 2 * split) split *= 2;
  const int64_t groups_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block);
  gemv_q_kernel<kBits, XT, SBT, kM, kR, kU><<<blocks, kThreads, 0, stream>>>(a, split);
}

// Picks the row tile for m (<= kGemvMaxM): more weight rows per warp as m grows (each x chunk loaded serves
// kR rows), fewer chunks in flight per lane to keep registers in check. 4 and 8 bits get every m bucket;
// the other widths run the m = 1 and m <= 8 shapes only.
template <int kBits, typename XT, typename SBT>
void launch_bits(cudaStream_t stream, const QGemvArgs& a) {
  constexpr int kU1 = kBits <= 4 ? 2 : 1;
  if constexpr (kBits == 4 || kBits == 8) {
    if (a.m == 1)
      launch_vec<kBits, XT, SBT, 1, 4, kU1>(stream, a);
    else if (a.m == 2)
      launch_vec<kBits, XT, SBT, 2, 4, kU1>(stream, a);
    else if (a.m <= 4)
      launch_vec<kBits, XT, SBT, 4, 4, 1>(stream, a);
    else
      launch_vec<kBits, XT, SBT, 8, 4, 1>(stream, a);
  } else {
    if (a.m == 1)
      launch_vec<kBits, XT, SBT, 1, 4, kU1>(stream, a);
    else
      launch_vec<kBits, XT, SBT, 8, 4, 1>(stream, a);
  }
}

// The tensor-core kernel's one-part launch for the rows of x in `part`.
QMmaArgs qmma_args(const QGemvArgs& part, int bits) {
  QMmaArgs q;
  q.part[0] = {part.w, part.out, part.bias, part.out_stride};
  q.n_parts = 1;
  q.x = part.x;
  q.x_stride = part.x_stride;
  q.m = part.m;
  q.k = part.w.cols;
  q.bits = bits;
  q.group_size = kQuantChunk << part.w.group_shift;
  q.x_dtype = part.x_dtype;
  q.out_dtype = part.out_dtype;
  q.bias_dtype = part.bias_dtype;
  return q;
}

// All rows of x, kGemvMaxM at a time: the tensor-core kernel where it fits (4/8 bits, bf16 x, aligned
// rows; unless `simt`), else the vectorised CUDA-core kernel when rows and x are aligned for it, else the
// simple one.
void gemv_q(cudaStream_t stream, const QGemvArgs& a, int bits, bool force_simple, bool simt) {
  const int64_t xs = dtype_size(a.x_dtype), os = dtype_size(a.out_dtype);
  const bool vec = !force_simple && aligned(a.w.packed, a.w.packed_stride * 4, chunk_alignment(bits)) &&
                   aligned(a.x, a.x_stride * xs, 16);
  for (int64_t i0 = 0; i0 < a.m; i0 += kGemvMaxM) {
    QGemvArgs part = a;
    part.m = a.m - i0 < kGemvMaxM ? a.m - i0 : kGemvMaxM;
    part.x = static_cast<const char*>(a.x) + i0 * a.x_stride * xs;
    part.out = static_cast<char*>(a.out) + i0 * a.out_stride * os;
    if (vec && !simt) {
      const QMmaArgs q = qmma_args(part, bits);
      if (qmma_fits(q)) {
        gemv_qmma(stream, q);
        continue;
      }
    }
    with_act_type(a.x_dtype, [&](auto xt) {
      using XT = typename decltype(xt)::type;
      if (!vec) {
        const unsigned blocks = static_cast<unsigned>((a.w.rows + kWarps - 1) / kWarps);
        gemv_q_simple_kernel<XT><<<blocks, kThreads, 0, stream>>>(part, bits);
      } else {
        with_bits(bits, [&](auto b) {
          with_float_type(a.w.sb_dtype, [&](auto st) {
            launch_bits<decltype(b)::value, XT, typename decltype(st)::type>(stream, part);
          });
        });
      }
    });
  }
}

std::string quant_desc(const DevRows& out, const DevRows& x, const DevQuant& w) {
  return rows_desc("out", out) + ", " + rows_desc("x", x) +
         strfmt(", w [%lld, %lld] %d-bit group %d (%s scales)", (long long)w.rows, (long long)w.cols, w.bits,
                w.group_size, dtype_name(w.sb_dtype));
}

}  // namespace

void set_linear_q_path_for_testing(LinearQPath path) {
  g_qpath.store(path);
}

void set_linear_q_split_for_testing(int split) {
  set_qmma_split(split);
}

LinearQPath linear_q_path() {
  return g_qpath.load();
}

void linear_q_gemv(cudaStream_t stream, DevRows out, DevRows x, const DevQuant& w, const void* bias,
                   DType bias_dtype) {
  if (x.n_rows == 0 || w.rows == 0) return;
  if (w.cols == 0) {
    linear_epilogue(stream, out, nullptr, 0, bias, bias_dtype);
    return;
  }
  QGemvArgs a;
  a.w = quant_view(w);
  a.x = x.data;
  a.out = out.data;
  a.bias = bias;
  a.x_stride = x.stride;
  a.out_stride = out.stride;
  a.m = x.n_rows;
  a.x_dtype = x.dtype;
  a.out_dtype = out.dtype;
  a.bias_dtype = bias_dtype;
  const LinearQPath path = g_qpath.load();
  gemv_q(stream, a, w.bits, path == LinearQPath::kSimple, path == LinearQPath::kGemvSimt);
  check_launch("linear_q", [&] { return quant_desc(out, x, w); });
}

void linear_q(void* stream, DevRows out, DevRows x, const DevQuant& w, const void* bias, DType bias_dtype) {
  const int64_t m = x.n_rows, n = w.rows;
  if (m == 0 || n == 0) return;
  cudaStream_t s = as_stream(stream);
  const LinearQPath path = g_qpath.load();
  const bool use_gemm =
      w.cols > 0 && (path == LinearQPath::kGemm || (path == LinearQPath::kAuto && gemm_pays(m, n)));
  const int64_t done = use_gemm ? linear_q_gemm(s, out, x, w, bias, bias_dtype) : 0;
  if (done == n) return;
  // Rows [done, n) of w: all of them, or what cuBLASLt could not take.
  DevRows rest = out;
  rest.data = static_cast<char*>(out.data) + done * static_cast<int64_t>(dtype_size(out.dtype));
  rest.n_cols = n - done;
  const void* rest_bias =
      bias != nullptr ? static_cast<const char*>(bias) + done * static_cast<int64_t>(dtype_size(bias_dtype)) : nullptr;
  linear_q_gemv(s, rest, x, quant_rows_from(w, done), rest_bias, bias_dtype);
}

}  // namespace bunsen::kernels::cuda
