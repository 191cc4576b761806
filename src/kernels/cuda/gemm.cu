// cuda::linear's large-m path through cuBLASLt, and the shared linear epilogue. Row-major
// out[m, n] = x[m, k] · w[n, k]ᵀ is the column-major product D[n, m] = op(A)·B with A = w (k × n,
// transposed) and B = x (k × m): the "TN" layout. Operands must share a dtype, so x is converted to w's
// dtype in scratch when they differ; f32 x against 16-bit weights is split instead into hi = round(x) and
// lo = round(x - hi) stacked as 2m rows of one GEMM, and the epilogue adds the two halves (x keeps ~16
// significant bits instead of 8: the GEMV takes f32 x exactly, so prefill rows would otherwise be less
// accurate than decode rows - e.g. Qwen3-Next's DeltaNet output projection). D is written straight into
// out when cuBLASLt can produce out's dtype (and no bias would be rounded twice), else into f32 scratch
// that the epilogue converts.
// Not a tuner: one heuristic answer per (shape, dtypes, alignments), cached for the process.
// Invariants: one scratch() call per linear (a second could move the first); f32 accumulation.
#include <cublasLt.h>

#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "kernels/cuda/linear.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS suggests for Hopper

struct PlanKey {
  int device;
  int64_t m, n, k, lda, ldb, ldd;
  int ab_type, d_type;
  int align_a, align_b, align_d;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    const int64_t v[] = {k.device, k.m,       k.n,      k.k,       k.lda,     k.ldb,
                         k.ldd,    k.ab_type, k.d_type, k.align_a, k.align_b, k.align_d};
    size_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

struct Planner {
  std::mutex mu;
  std::unordered_map<int, cublasLtHandle_t> handles;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;
};

Planner& planner() {
  static Planner* p = new Planner();  // never destroyed: handles outlive static destructors
  return *p;
}

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error("cuda", strfmt("linear: %s failed: %s", what, cublasLtGetStatusString(s)));
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::kF32 ? CUDA_R_32F : t == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
}

int alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

cublasLtMatrixLayout_t layout(DType t, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, cuda_type(t), static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld),
           "cublasLtMatrixLayoutCreate");
  return l;
}

Plan make_plan(cublasLtHandle_t handle, const PlanKey& k) {
  Plan p;
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
           "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
           "set TRANSB");
  const DType ab = static_cast<DType>(k.ab_type), dt = static_cast<DType>(k.d_type);
  p.a = layout(ab, k.k, k.n, k.lda);
  p.b = layout(ab, k.k, k.m, k.ldb);
  p.d = layout(dt, k.n, k.m, k.ldd);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t al_a = k.align_a, al_b = k.align_b, al_d = k.align_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (p.ok) p.algo = result.algo;
  return p;
}

// The cached plan for k (created on first use), and the device's handle.
const Plan& get_plan(const PlanKey& k, cublasLtHandle_t* handle) {
  Planner& pl = planner();
  std::lock_guard<std::mutex> lock(pl.mu);
  auto h = pl.handles.find(k.device);
  if (h == pl.handles.end()) {
    cublasLtHandle_t created = nullptr;
    check_lt(cublasLtCreate(&created), "cublasLtCreate");
    h = pl.handles.emplace(k.device, created).first;
  }
  *handle = h->second;
  auto it = pl.plans.find(k);
  if (it == pl.plans.end()) it = pl.plans.emplace(k, make_plan(h->second, k)).first;
  return it->second;
}

template <typename ST, typename DT>
__global__ void convert_rows_kernel(DT* dst, int64_t ds, const ST* src, int64_t ss, int64_t n_rows,
                                    int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    float v = to_f32(src[r * ss + c]);
    if (sizeof(DT) == 2 && !std::is_same<DT, Bf16>::value && !isnan(v))
      v = fminf(fmaxf(v, -65504.0f), 65504.0f);  // f16 saturates instead of overflowing to inf
    dst[r * ds + c] = from_f32<DT>(v);
  }
}

// hi[r, c] = round(x), lo[r, c] = round(x - hi) for f32 x (f16: saturated like convert_rows_kernel).
template <typename DT>
__global__ void split_rows_kernel(DT* hi, DT* lo, int64_t ds, const float* src, int64_t ss, int64_t n_rows,
                                  int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    float v = src[r * ss + c];
    if (!std::is_same<DT, Bf16>::value && !isnan(v)) v = fminf(fmaxf(v, -65504.0f), 65504.0f);
    const DT h = from_f32<DT>(v);
    hi[r * ds + c] = h;
    lo[r * ds + c] = from_f32<DT>(isfinite(v) ? v - to_f32(h) : 0.0f);
  }
}

// out = src (+ src_lo, the lo half of a split x) (+ bias), converted to out's dtype.
template <typename OT>
__global__ void epilogue_kernel(OT* out, int64_t os, const float* src, const float* src_lo, int64_t ss,
                                const void* bias, DType bias_dtype, int64_t n_rows, int64_t n_cols) {
  const int64_t total = n_rows * n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n_cols, c = i - r * n_cols;
    float v = src != nullptr ? src[r * ss + c] : 0.0f;
    if (src_lo != nullptr) v += src_lo[r * ss + c];
    if (bias != nullptr) v += load_any(bias, bias_dtype, c);
    out[r * os + c] = from_f32<OT>(v);
  }
}

unsigned flat_blocks(int64_t total) {
  const int64_t want = (total + 255) / 256, cap = static_cast<int64_t>(sm_count()) * 16;
  return static_cast<unsigned>(want < cap ? want : cap);
}

void split_x(cudaStream_t s, void* dst, int64_t ld, DType dst_type, const DevRows& x) {
  with_float_type(dst_type, [&](auto dt) {
    using DT = typename decltype(dt)::type;
    if constexpr (sizeof(DT) == 2)
      split_rows_kernel<DT><<<flat_blocks(x.n_rows * x.n_cols), 256, 0, s>>>(
          static_cast<DT*>(dst), static_cast<DT*>(dst) + x.n_rows * ld, ld, static_cast<const float*>(x.data),
          x.stride, x.n_rows, x.n_cols);
  });
}

void epilogue(cudaStream_t stream, DevRows out, const float* src, const float* src_lo, int64_t src_stride,
              const void* bias, DType bias_dtype) {
  with_act_type(out.dtype, [&](auto ot) {
    using OT = typename decltype(ot)::type;
    epilogue_kernel<OT><<<flat_blocks(out.n_rows * out.n_cols), 256, 0, stream>>>(
        static_cast<OT*>(out.data), out.stride, src, src_lo, src_stride, bias, bias_dtype, out.n_rows, out.n_cols);
  });
  check_launch("linear", [&] { return rows_desc("out", out) + " (epilogue)"; });
}

void convert_x(cudaStream_t s, void* dst, int64_t ld, DType dst_type, const DevRows& x) {
  with_act_type(x.dtype, [&](auto st) {
    with_float_type(dst_type, [&](auto dt) {
      using ST = typename decltype(st)::type;
      using DT = typename decltype(dt)::type;
      convert_rows_kernel<ST, DT><<<flat_blocks(x.n_rows * x.n_cols), 256, 0, s>>>(
          static_cast<DT*>(dst), ld, static_cast<const ST*>(x.data), x.stride, x.n_rows, x.n_cols);
    });
  });
}

}  // namespace

void linear_epilogue(cudaStream_t stream, DevRows out, const float* src, int64_t src_stride, const void* bias,
                     DType bias_dtype) {
  epilogue(stream, out, src, nullptr, src_stride, bias, bias_dtype);
}

bool gemm_cublaslt(cudaStream_t stream, DevRows out, DevRows x, DevRows w, const void* bias,
                   DType bias_dtype) {
  const int64_t n = w.n_rows, k = x.n_cols;
  const DType ab = w.dtype;
  const bool convert = x.dtype != ab;
  const bool split = x.dtype == DType::kF32 && ab != DType::kF32;  // hi and lo rows: m = 2 x's rows
  const int64_t m = split ? 2 * x.n_rows : x.n_rows;
  const bool direct =
      !split && (out.dtype == DType::kF32 || (out.dtype == DType::kBF16 && ab == DType::kBF16 && !bias));
  const int64_t ldx = convert ? static_cast<int64_t>(align_up(k, 8)) : x.stride;
  const int64_t ldd = direct ? out.stride : static_cast<int64_t>(align_up(n, 4));
  const size_t x_bytes = convert ? align_up(m * ldx * dtype_size(ab), 256) : 0;
  const size_t d_bytes = direct ? 0 : align_up(m * ldd * sizeof(float), 256);
  char* base = static_cast<char*>(scratch(stream, x_bytes + d_bytes + kWorkspaceBytes, "linear"));
  void* xp = convert ? base : x.data;
  void* dp = direct ? out.data : base + x_bytes;
  void* ws = base + x_bytes + d_bytes;

  PlanKey key{};
  key.device = current_device();
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = w.stride;
  key.ldb = ldx;
  key.ldd = ldd;
  key.ab_type = static_cast<int>(ab);
  key.d_type = static_cast<int>(direct ? out.dtype : DType::kF32);
  key.align_a = alignment(w.data);
  key.align_b = alignment(xp);
  key.align_d = alignment(dp);
  cublasLtHandle_t handle = nullptr;
  const Plan& plan = get_plan(key, &handle);
  if (!plan.ok) return false;
  if (split) split_x(stream, xp, ldx, ab, x);
  else if (convert) convert_x(stream, xp, ldx, ab, x);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(handle, plan.desc, &alpha, w.data, plan.a, xp, plan.b, &beta, dp,
                                           plan.d, dp, plan.d, &plan.algo, ws, kWorkspaceBytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error("cuda", strfmt("linear: cublasLtMatmul failed: %s ", cublasLtGetStatusString(st)) +
                            rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("w", w));
  if (!direct)
    epilogue(stream, out, static_cast<const float*>(dp), split ? static_cast<const float*>(dp) + x.n_rows * ldd : nullptr,
             ldd, bias, bias_dtype);
  else if (bias != nullptr)
    linear_epilogue(stream, out, static_cast<const float*>(out.data), out.stride, bias, bias_dtype);
  check_launch("linear",
               [&] { return rows_desc("out", out) + ", " + rows_desc("x", x) + ", " + rows_desc("w", w); });
  return true;
}

}  // namespace bunsen::kernels::cuda
