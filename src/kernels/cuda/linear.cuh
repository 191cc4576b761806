// Internal interface between the two halves of cuda::linear: the hand-written GEMV (gemv.cu, small m,
// also the fallback for any m) and the cuBLASLt GEMM (gemm.cu, larger m), plus the shared epilogue.
// Not public: cuda_ops.h's linear() / linear_multi() / linear_swiglu() (in gemv.cu) choose the path.
// Invariants: out = x · wᵀ (+ bias) with f32 accumulation on both paths; x, w, out are row-major with
// contiguous rows; a GEMV output's summation order depends on (n, k, dtypes) only, never on m.
#pragma once
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/l2_hint.cuh"

namespace bunsen::kernels::cuda {

// Whether an [m, n] product takes the cuBLASLt GEMM on the automatic path (bf16 linear and the quantized
// linear's dequantize + GEMM): more rows than one GEMV launch takes, and not a narrow output (a gate column,
// a router: a GEMM gains nothing there, and cuBLASLt gave wrong [m > 8, 1] results on the H200, found by
// the Qwen3-Next shared-expert gate; not reduced further).
inline bool gemm_pays(int64_t m, int64_t n) {
  return m > kGemvMaxM && n >= 16;
}

// Shared by the GEMV launchers (gemv.cu, gemv_qmma.cu).
inline bool aligned16(const void* p, int64_t stride_bytes) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride_bytes % 16 == 0;
}

// Blocks of `kernel` (launched with `threads` threads) one SM holds at once; at least 1.
template <typename Kernel>
int occupancy(Kernel kernel, int threads) {
  int b = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, 0) != cudaSuccess) b = 1;
  return b < 1 ? 1 : b;
}

// The k split (1, 2, 4, ... max_split warps per row group) with the least modelled time: the groups run in
// ceil(groups * split / resident) rounds of the GPU's resident warp slots, each round costing a warp's
// iterations plus a fixed per-task overhead (launch, reduction, pipeline fill) of about 1.5 iterations.
// Ties go to the smaller split. Depends on the launch's rows and k, never on m.
inline int choose_split(int64_t groups, int64_t iters, int64_t resident, int max_split) {
  int best = 1;
  double best_cost = 0.0;
  for (int split = 1; split <= max_split && (split == 1 || iters >= split); split *= 2) {
    const int64_t rounds = (groups * split + resident - 1) / resident;
    const double cost = static_cast<double>(rounds) * (static_cast<double>((iters + split - 1) / split) + 1.5);
    if (split == 1 || cost < best_cost) {
      best = split;
      best_cost = cost;
    }
  }
  return best;
}

// The small-launch plan (BUNSEN_GEMV_SMALL): the k split (1, 2, 4, ... max_split) that makes the launch
// take the fewest dependent DRAM round trips, and how many waves of resident blocks it then needs. A warp
// keeps two iterations in flight (both issued before the PDL wait), so ceil(iters / split / 2) round trips,
// plus about half a round per wave for the launch ramp and the cross-warp reduction. Ties go to the smaller
// split. Depends on the launch's rows and k (groups, iters) and the GPU, never on m.
struct SmallGemvPlan {
  int split = 1;
  int64_t waves = 1;
};
inline SmallGemvPlan choose_split_small(int64_t groups, int64_t iters, int64_t sms, int64_t blocks_per_sm,
                                        int warps_per_block, int max_split) {
  SmallGemvPlan best;
  double best_cost = 0.0;
  for (int split = 1; split <= max_split && (split == 1 || iters >= split); split *= 2) {
    const int64_t groups_per_block = warps_per_block / split;
    const int64_t blocks = (groups + groups_per_block - 1) / groups_per_block;
    const int64_t waves = (blocks + sms * blocks_per_sm - 1) / (sms * blocks_per_sm);
    const int64_t warp_iters = (iters + split - 1) / split;
    const double cost = static_cast<double>(waves) * (static_cast<double>((warp_iters + 1) / 2) + 0.5);
    if (split == 1 || cost < best_cost) {
      best = {split, waves};
      best_cost = cost;
    }
  }
  return best;
}

// One GEMV launch: at most kGemvMaxM rows of x.
struct GemvArgs {
  const void* w = nullptr;  // [n, k] f32|f16|bf16, row stride w_stride
  const void* x = nullptr;  // [m, k] f32|bf16, row stride x_stride
  void* out = nullptr;      // [m, n] f32|bf16, row stride out_stride
  const void* bias = nullptr;
  int64_t w_stride = 0, x_stride = 0, out_stride = 0;
  int64_t m = 0, n = 0, k = 0;
  DType w_dtype = DType::kBF16, x_dtype = DType::kF32, out_dtype = DType::kF32, bias_dtype = DType::kF32;
};

// Runs the GEMV kernels over all rows of x (chunks of kGemvMaxM rows).
void gemv(cudaStream_t stream, GemvArgs a);

// One matrix of a multi-matrix GEMV: its weights, output and bias.
struct GemvPart {
  const void* w = nullptr;     // [n, k], row stride w_stride (elements)
  void* out = nullptr;         // [m, n], row stride out_stride (elements)
  const void* bias = nullptr;  // [n] or null
  int64_t n = 0, w_stride = 0, out_stride = 0;
};

constexpr int kGemvMaxParts = 4;

// Several matrices sharing x and all dtypes, computed by one launch over their concatenated rows (each
// warp group works inside one part). glu: exactly two parts (gate, up) of the same n, and the launch
// writes out = act(gate · x + b_gate) * (up · x + b_up) into part[0].out (part[1].out is unused), act =
// silu, or gelu_tanh (activation.cuh) when gelu_tanh is set (a uniform branch in the store).
struct GemvMultiArgs {
  GemvPart part[kGemvMaxParts];
  int n_parts = 0;
  bool glu = false;
  bool gelu_tanh = false;  // glu only
  const void* x = nullptr;  // [m, k] f32|bf16, row stride x_stride
  int64_t x_stride = 0, m = 0, k = 0;
  DType w_dtype = DType::kBF16, x_dtype = DType::kF32, out_dtype = DType::kF32, bias_dtype = DType::kF32;
  // The weight loads' L2 policy (l2_hint.cuh): set per launch by gemv_multi, gemv_multi_norm and
  // gemv_rope_kv.
  bool l2_evict_first = false;
};

// Runs one launch per kGemvMaxM rows of x.
void gemv_multi(cudaStream_t stream, const GemvMultiArgs& a);

// The residual add and RMSNorm a GEMV launch computes in its prologue (ops.h AddRmsNorm): x_out = x_in + y *
// y_scale (f32; block 0 stores it), then the launch's x = bf16(rms_norm(x_out) * (w + w_offset)), computed by
// every block into shared memory with rms_norm_vec_kernel's arithmetic and reduction tree (add_rms_norm's
// bits). x_in and x_out must not overlap (blocks read x_in while block 0 writes x_out).
struct GemvNorm {
  const float* x_in = nullptr;  // [m, k], row stride x_stride (elements)
  float* x_out = nullptr;       // [m, k], row stride x_stride
  const void* y = nullptr;      // [m, k] f32|bf16, row stride y_stride
  const void* w = nullptr;      // [k] f32|bf16
  int64_t x_stride = 0, y_stride = 0;
  bool y_bf16 = false, w_bf16 = false;
  float eps = 0.0f, y_scale = 1.0f, w_offset = 0.0f;
  // The post-norm form (ops.h AddRmsNorm with y_w): x_out = (x_in + y_t(rms_norm(y) * (y_w + w_offset))) *
  // x_scale, y_t = y's dtype (post_norm_residual's bits); y_scale is 1 then.
  const void* y_w = nullptr;  // [k] f32|bf16, or null
  bool y_w_bf16 = false;
  float x_scale = 1.0f;
};

// pre as a GEMV prologue's GemvNorm for an x of shape x; false when the dtypes or shapes do not fit it (the
// launchers check sizes and alignment).
bool gemv_norm_args(const DevAddNorm& pre, DevRows x, GemvNorm& n);

// n's rows fit a prologue over k columns: strides of at least k, 16-byte aligned rows and weights (both
// forms' pointers; a null y_w passes).
inline bool gemv_norm_rows_ok(const GemvNorm& n, int64_t k) {
  return aligned16(n.x_in, n.x_stride * 4) && aligned16(n.x_out, n.x_stride * 4) &&
         aligned16(n.y, n.y_stride * (n.y_bf16 ? 2 : 4)) && aligned16(n.w, 0) && aligned16(n.y_w, 0) &&
         n.x_stride >= k && n.y_stride >= k;
}

// Launches a norm prologue takes: m <= kGemvNormMaxM (the small launches' 64-register budget holds: no spill
// at m = 1 but the gated one's 8 bytes, 16-52 bytes at m = 2; hundreds at m = 4, 8), k % 8 == 0, k <=
// kGemvNormMaxK, x (m * k bf16) and the norm weights in 48 KB of shared memory.
constexpr int64_t kGemvNormMaxM = 2, kGemvNormMaxK = 4096;

// gemv_multi of a (1 <= a.m <= kGemvNormMaxM, bf16 weights, a.x_dtype bf16; a.x unused) with its x computed
// by n's prologue. False, nothing launched, when the launch would not take the vectorised kernel or the
// shapes or alignments do not allow the prologue.
bool gemv_multi_norm(cudaStream_t stream, const GemvMultiArgs& a, const GemvNorm& n);

// a = q, k, v (3 parts, bf16 weights, x and outputs, 1 <= m <= kGemvMaxM) with r's rope_kv_write folded into
// the store (r: plain bf16 cache; r.q/k/v describe the parts' outputs): one launch whose q/k/v, rotated q
// and k and cache rows are those of gemv_multi + rope_kv_write bit for bit. False, nothing launched, when
// the shapes or the launch's path (not the vectorised kernel) do not allow it.
// With n: x computed by n's prologue as in gemv_multi_norm (false also when the prologue does not apply, and
// for n's post-norm form, which the fold does not take).
bool gemv_rope_kv(cudaStream_t stream, const GemvMultiArgs& a, const DevRopeKv& r,
                  const GemvNorm* n = nullptr);

// The path set by set_linear_path_for_testing (kAuto unless a test forces one).
LinearPath linear_path();

// out[i, j] = src[i, j] (0 when src is null) + bias[j] (when bias is not null), converted to out's
// dtype. src may be out itself (same dtype f32 and stride).
void linear_epilogue(cudaStream_t stream, DevRows out, const float* src, int64_t src_stride, const void* bias,
                     DType bias_dtype);

// out = x · wᵀ (+ bias) through cuBLASLt. False when cuBLASLt offers no algorithm for these shapes and
// alignments (the caller then uses the GEMV kernels); throws Error("cuda", ...) on a failed call.
bool gemm_cublaslt(cudaStream_t stream, DevRows out, DevRows x, DevRows w, const void* bias,
                   DType bias_dtype);

}  // namespace bunsen::kernels::cuda
