// The fused decode projections over gemv_body.cuh: bf16 GEMVs whose x is computed by a prologue (the residual
// add + RMSNorm, gemv_norm.cuh: gemv_multi_norm, pre- and post-norm forms) and the q/k/v projection with
// rope_kv_write folded into its store (gemv_rope_kv). They take the plain launch's path, rows per warp group
// and k split, so they give its bits; m = 1, split = 1 pre-norm launches take the strided form over a grid
// of resident blocks (gemv_strided). False (nothing launched) where a launch is not theirs: the caller
// runs the unfused ops. Not a public interface.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/gemv_body.cuh"

namespace bunsen::kernels::cuda {
namespace {

// set_gemv_stride_for_testing: -1 = BUNSEN_GEMV_STRIDE (read once), 0 off, 1 on.
std::atomic<int> g_stride{-1};

// Whether m = 1, split = 1 pre-norm launches take the strided form. Default on: against the blocked
// launches, H100 batch-1 decode 8B +0.7 / +0.9 / +1.3 % (three calls), Qwen3.5-4B +2.2 %, 1B, e4b and
// Qwen3-8B within 0.1 %.
bool gemv_strided() {
  const int mode = g_stride.load();
  if (mode >= 0) return mode == 1;
  static const bool on = env_flag("BUNSEN_GEMV_STRIDE", true);
  return on;
}

// gemv_vec_kernel with the norm prologue (bf16 weights and x); kPost: its post-norm form (nm.y_w set).
template <int kM, int kRows, bool kGlu, bool kEarly, bool kPost>
__global__ void __launch_bounds__(kThreads, kEarly ? kSmallMinBlocks : 1)
    gemv_vec_norm_kernel(const __grid_constant__ GemvMultiArgs a, int split,
                         const __grid_constant__ GemvNorm nm) {
  gemv_vec_body<Bf16, Bf16, kM, kRows, kUnroll, kGlu, kEarly, false, true, kPost>(a, split, nullptr, &nm);
}

// gemv_vec_norm_kernel's m = 1, split = 1, pre-norm form over a grid of resident blocks (gemv_strided(): the
// default; BUNSEN_GEMV_STRIDE=0 turns it off): a launch of more warp groups than resident warps (the 8B's
// gate/up: 7,168 groups of 4 rows over 2,112 warps at 2 blocks per SM, 3.4 rounds) walks them in rounds --
// warp w of block b takes groups b + w * gridDim.x, then each further one the grid's warp count on -- so
// every SM keeps about the same number of warps streaming to the last round instead of the launch ending on a
// partial wave of whole blocks. Each group sums gemv_vec_body's chunks in its order: the same bits. (Measured
// and not kept, H100: loading the warp's next group's first chunks in place of a group's last, past-the-row
// load, 8B and 1B -0.1 %; 1 gate + 1 up row per warp group, 8B -0.7 %, 1B -1.9 %.)
template <int kRows, bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_vec_norm_strided_kernel(const __grid_constant__ GemvMultiArgs a,
                                 const __grid_constant__ GemvNorm nm) {
  constexpr int kE = 16 / sizeof(Bf16), kU = kUnroll;
  extern __shared__ uint4 gemv_x_smem[];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t g = static_cast<int64_t>(warp) * gridDim.x + blockIdx.x;
  const Bf16* rows[kRows];
  int part = 0;
  int64_t n0 = 0;
  bool active = locate<Bf16, kRows, kGlu>(a, g, part, n0, rows);
  const int64_t n_chunks = a.k / kE, step = 32 * kU;
  const uint64_t pol = weight_l2_policy(a.l2_evict_first);
  uint4 wa[kU][kRows], wb[kU][kRows];
  if (active) load_chunks<Bf16, kRows, kU>(wa, rows, 0, n_chunks, lane, pol);
  char* smem = reinterpret_cast<char*>(gemv_x_smem);
  gemv_norm::prefetch_w<kThreads>(nm, 1, a.k, smem);
  pdl_wait();
  gemv_norm::prologue<kThreads, 1>(nm, 1, a.k, smem);
  const Bf16* x = reinterpret_cast<const Bf16*>(gemv_x_smem);
  while (active) {  // per warp: no block-wide step inside
    float acc[1][kRows] = {};
    for (int64_t c0 = 0; c0 < n_chunks; c0 += 2 * step) {
      load_chunks<Bf16, kRows, kU>(wb, rows, c0 + step, n_chunks, lane, pol);
      fma_chunks<Bf16, Bf16, 1, kRows, kU, true>(acc, wa, x, a.k, 1, c0, n_chunks, lane);
      load_chunks<Bf16, kRows, kU>(wa, rows, c0 + 2 * step, n_chunks, lane, pol);
      fma_chunks<Bf16, Bf16, 1, kRows, kU, true>(acc, wb, x, a.k, 1, c0 + step, n_chunks, lane);
    }
    float tot[1][kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) tot[0][r] = warp_sum(acc[0][r]);
    store_outputs<1, kRows, kGlu>(a, tot, part, n0, lane);
    g += stride;
    active = locate<Bf16, kRows, kGlu>(a, g, part, n0, rows);
    if (active) load_chunks<Bf16, kRows, kU>(wa, rows, 0, n_chunks, lane, pol);
  }
}

// The q/k/v fold (bf16 weights, x and outputs; plain launches of three parts), with or without the norm
// prologue.
template <int kM, int kRows, bool kEarly, bool kNorm>
__global__ void __launch_bounds__(kThreads, (kEarly && kNorm) ? kSmallMinBlocks : 1)
    gemv_vec_rope_kernel(const __grid_constant__ GemvMultiArgs a, int split,
                         const __grid_constant__ RopeKvArgs rk, const __grid_constant__ GemvNorm nm) {
  gemv_vec_body<Bf16, Bf16, kM, kRows, kUnroll, false, kEarly, true, kNorm>(a, split, &rk, &nm);
}

// x [m, k] bf16 and the norm weights [k].
size_t norm_smem(const GemvMultiArgs& a, const GemvNorm& n) {
  return static_cast<size_t>(a.m * a.k) * sizeof(Bf16) + static_cast<size_t>(a.k) * (n.w_bf16 ? 2 : 4);
}

// Whether a bf16 launch of a (weights already checked) can compute its x with n's prologue: see GemvNorm
// and kGemvNormMaxK.
bool norm_ok(const GemvMultiArgs& a, const GemvNorm& n) {
  constexpr size_t kMaxSmem = 48 * 1024;  // dynamic shared memory without an opt-in
  return a.w_dtype == DType::kBF16 && a.x_dtype == DType::kBF16 && a.m >= 1 && a.m <= kGemvNormMaxM &&
         a.k % 8 == 0 && a.k <= kGemvNormMaxK && norm_smem(a, n) <= kMaxSmem && gemv_norm_rows_ok(n, a.k);
}

// The fold's launch: the plain launch's path, rows per warp group and k split (so q/k/v keep its bits).
// False (nothing launched) when that would not be the vectorised kernel, head_dim does not hold whole
// groups of rows or n's prologue does not apply.
bool launch_rope(cudaStream_t stream, const GemvMultiArgs& a, const RopeKvArgs& rk, const GemvNorm* n) {
  bool vec = (n != nullptr || aligned16(a.x, a.x_stride * 2)) && a.k % 8 == 0;
  for (int p = 0; p < a.n_parts; ++p) vec = vec && aligned16(a.part[p].w, a.part[p].w_stride * 2);
  if (!vec || a.m < 1 || a.m > kGemvMaxM || (n != nullptr && (!norm_ok(a, *n) || n->y_w != nullptr)))
    return false;  // (the fold has no post-norm prologue)
  const int small = small_split<Bf16, Bf16, false>(a);
  const int rows = small > 0 ? kRowsSmall : a.m <= 2 ? kRowsFew : kRowsMany;
  if (rk.head_dim % rows != 0 || a.part[0].n % rk.head_dim != 0 || a.part[1].n % rk.head_dim != 0)
    return false;
  const int split = small > 0 ? small : launch_split<Bf16, Bf16, false>(a);
  const int64_t per = kWarps / split;
  const dim3 grid(static_cast<unsigned>((total_groups(a, rows) + per - 1) / per));
  const GemvNorm nm = n != nullptr ? *n : GemvNorm{};
  const size_t smem = n != nullptr ? norm_smem(a, *n) : 0;
  auto go = [&](auto kernel) {
    return launch_pdl(kernel, grid, dim3(kThreads), smem, stream, a, split, rk, nm);
  };
  auto pick = [&](auto norm) {
    constexpr bool kN = decltype(norm)::value;  // the prologue: m <= kGemvNormMaxM (norm_ok)
    static_assert(kGemvNormMaxM == 2, "the prologue's instances below are m = 1 and 2");
    if (small > 0) {
      constexpr int kR = kRowsSmall;
      if constexpr (kN)
        return a.m == 1 ? go(gemv_vec_rope_kernel<1, kR, true, true>)
                        : go(gemv_vec_rope_kernel<2, kR, true, true>);
      return a.m == 1   ? go(gemv_vec_rope_kernel<1, kR, true, false>)
             : a.m == 2 ? go(gemv_vec_rope_kernel<2, kR, true, false>)
             : a.m <= 4 ? go(gemv_vec_rope_kernel<4, kR, true, false>)
                        : go(gemv_vec_rope_kernel<8, kR, true, false>);
    }
    if constexpr (kN)
      return a.m == 1 ? go(gemv_vec_rope_kernel<1, kRowsFew, false, true>)
                      : go(gemv_vec_rope_kernel<2, kRowsFew, false, true>);
    return a.m == 1   ? go(gemv_vec_rope_kernel<1, kRowsFew, false, false>)
           : a.m == 2 ? go(gemv_vec_rope_kernel<2, kRowsFew, false, false>)
           : a.m <= 4 ? go(gemv_vec_rope_kernel<4, kRowsMany, false, false>)
                      : go(gemv_vec_rope_kernel<8, kRowsMany, false, false>);
  };
  const cudaError_t e = n != nullptr ? pick(std::true_type{}) : pick(std::false_type{});
  check_cuda(e, "linear_qkv_rope_kv",
             [&] { return strfmt("m %lld k %lld", (long long)a.m, (long long)a.k); });
  return true;
}

// gemv_multi_norm's launch: launch_gemv's path, rows per warp group and split for bf16 weights and x.
template <bool kGlu, bool kPost>
cudaError_t launch_norm(cudaStream_t stream, const GemvMultiArgs& a, const GemvNorm& n) {
  auto go = [&](auto kernel, int rows, int split) {
    const int64_t per = kWarps / split;
    const dim3 grid(static_cast<unsigned>((total_groups(a, rows) + per - 1) / per));
    return launch_pdl(kernel, grid, dim3(kThreads), norm_smem(a, n), stream, a, split, n);
  };
  static_assert(kGemvNormMaxM == 2, "launch_gemv's m = 1 and 2 instances (norm_ok checked m)");
  const int small = small_split<Bf16, Bf16, kGlu>(a);
  if (small > 0) {
    constexpr int kR = kRowsSmall;
    if (a.m == 1) return go(gemv_vec_norm_kernel<1, kR, kGlu, true, kPost>, kR, small);
    return go(gemv_vec_norm_kernel<2, kR, kGlu, true, kPost>, kR, small);
  }
  const int split = launch_split<Bf16, Bf16, kGlu>(a);
  constexpr int kR1 = kGlu ? kRowsGlu : kRowsFew;
  // The strided form (gemv_strided) of m = 1, split = 1 pre-norm launches: a grid of resident blocks.
  if (!kPost && gemv_strided() && a.m == 1 && split == 1) {
    constexpr auto kernel = gemv_vec_norm_strided_kernel<kR1, kGlu>;
    static const int64_t resident = static_cast<int64_t>(sm_count()) * occupancy(kernel, kThreads);
    const int64_t blocks = (total_groups(a, kR1) + kWarps - 1) / kWarps;
    const dim3 grid(static_cast<unsigned>(std::min(blocks, resident)));
    return launch_pdl(kernel, grid, dim3(kThreads), norm_smem(a, n), stream, a, n);
  }
  if (a.m == 1) return go(gemv_vec_norm_kernel<1, kR1, kGlu, false, kPost>, kR1, split);
  return go(gemv_vec_norm_kernel<2, kR1, kGlu, false, kPost>, kR1, split);
}

}  // namespace

void set_gemv_stride_for_testing(int mode) {
  g_stride.store(mode < 0 ? -1 : mode != 0 ? 1 : 0);
}

bool gemv_multi_norm(cudaStream_t stream, const GemvMultiArgs& args, const GemvNorm& n) {
  const GemvMultiArgs a = with_l2_policy(args);
  bool ok = norm_ok(a, n);
  for (int p = 0; p < a.n_parts; ++p) ok = ok && aligned16(a.part[p].w, a.part[p].w_stride * 2);
  if (!ok || total_groups(a, 2) == 0) return false;
  const bool post = n.y_w != nullptr;
  const cudaError_t e =
      a.glu ? (post ? launch_norm<true, true>(stream, a, n) : launch_norm<true, false>(stream, a, n))
            : (post ? launch_norm<false, true>(stream, a, n) : launch_norm<false, false>(stream, a, n));
  check_cuda(e, "gemv (norm prologue)", [&] {
    return strfmt("m %lld k %lld parts %d glu %d", (long long)a.m, (long long)a.k, a.n_parts, (int)a.glu);
  });
  return true;
}

bool gemv_rope_kv(cudaStream_t stream, const GemvMultiArgs& a, const DevRopeKv& r, const GemvNorm* n) {
  const DevCache& c = r.cache;
  const int64_t hd = r.k.head_dim;
  const bool ok = a.n_parts == 3 && !a.glu && a.w_dtype == DType::kBF16 && a.x_dtype == DType::kBF16 &&
                  a.out_dtype == DType::kBF16 && c.bits == 0 && c.dtype == DType::kBF16 && c.head_dim == hd &&
                  r.q.head_dim == hd && r.v.head_dim == hd && hd > 0 && hd % 2 == 0 &&
                  r.rotary_dim % 2 == 0 && r.rotary_dim >= 0 && r.rotary_dim <= hd &&
                  r.rotary_dim <= kMaxRotaryDim && a.part[0].n == r.q.n_heads * hd &&
                  a.part[1].n == r.k.n_heads * hd && a.part[2].n == r.v.n_heads * hd &&
                  r.k.n_heads == c.n_kv_heads && hd <= INT32_MAX && c.n_blocks * c.block_size <= INT32_MAX &&
                  a.part[0].n <= INT32_MAX && a.part[1].n <= INT32_MAX &&
                  a.part[2].n <= INT32_MAX;  // (32-bit index arithmetic, see RopeKvArgs)
  if (!ok) return false;
  RopeKvArgs rk;
  rk.positions = r.positions;
  rk.slots = r.slot_mapping;
  rk.k_cache = static_cast<Bf16*>(c.k);
  rk.v_cache = static_cast<Bf16*>(c.v);
  for (int i = 0; i < 3; ++i) {
    rk.k_s[i] = c.k_strides[i];
    rk.v_s[i] = c.v_strides[i];
  }
  rk.n_slots = static_cast<int>(c.n_blocks * c.block_size);
  rk.block_size = static_cast<int>(c.block_size);
  rk.head_dim = static_cast<int>(hd);
  rk.half = r.rotary_dim / 2;
  rk.scaling = r.attention_scaling;
  for (int i = 0; i < rk.half; ++i) rk.inv_freq[i] = r.inv_freq_host[i];
  return launch_rope(stream, with_l2_policy(a), rk, n);
}

}  // namespace bunsen::kernels::cuda
