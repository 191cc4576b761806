// Flash-decoding over a paged bf16 or quantized (--kv-quant int8/int4/fp8) cache: one block per (query row,
// kv head, key slice). This file holds the SIMT slice kernel (any head_dim % 8 == 0 up to 256, any q dtype;
// it dequantizes a quantized cache's codes in registers: every quantized step but the batched ones
// of attention_decode_qmma.cu's packed tensor-core kernel) and the host side;
// attention_decode_mma.cu the tensor-core slice kernel used for head_dim 64/128/256/512 (<= 16 query heads
// per kv head), bf16 q and cache; attention_combine.cu the combine kernel. SIMT:
// each warp reads kUnroll x (32 / kL) key rows at a time, kL lanes per row with kE dims (16 or 8 bytes) per
// lane, scores them against all query heads of the GQA group (each K/V row is read once for the group)
// and keeps an online softmax per lane group in f32; groups and warps merge at the end. A row uses
// min(n_splits, ceil(visible keys / min_keys)) slices, decided on the device from its position, so the
// grid (fixed by host scalars) fits any context within the block table and CUDA-graph replays stay valid;
// surplus slice blocks exit at once. A row with several slices is merged with log-sum-exp weights by
// combine_kernel in a second launch (the default), or by the last of its slice blocks to finish (fused
// combine, BUNSEN_DECODE_FUSED_COMBINE=1 or the testing switch: one launch per call, but on the H200 it
// measured 0.5-2.4 us per layer slower than the two launches at batch 1 x 256..4k keys; its lean instance,
// merge_if_last_lean, still 2.2-4.4 % slower end to end on the H100: the last block's count and merge end
// ~3.8 us after the other blocks, the combine kernel ~3.2 us after the slice grid). Slice kernels are
// launched with programmatic dependent launch (BUNSEN_PDL=0: plain stream order) and wait before their first
// read. The cluster path (bf16 tensor-core shapes, <= 16 slices per row) runs a row's slices as one
// thread-block cluster merged through distributed shared memory (one launch, no partials) and starts its
// copies of older keys before the wait. The default for steps of <= 2 rows x kv heads over short block
// tables (cluster_path: Gemma 4 e4b's 1-2 kv heads, +10.5 % end to end on the H200); elsewhere off
// (BUNSEN_DECODE_ATTN=cluster|split forces): on the H200 it is faster at batch 1 up to 1k keys (8B shape:
// 8.2 vs 11.9 us per layer) but slower at 4k keys and at batch >= 8, and end to end 1-3 % slower on the
// Llama-3.1-8B shape (mixed on Llama-3.2-1B). The packed tensor-core
// kernel (batched steps: head_dim 64/128, one kv head per warp, a row's kv heads 4 (or 8) per block, slices
// only to fill one wave of blocks, merged by combine_kernel) serves steps of >= 128 rows x kv heads (16 rows
// of the 8B shape: 46.0 -> 31.2 us per layer at 16 x 1k keys, 423 -> 383 at 256 x 1k; batch 1 stays on the
// split kernel, 12.0 vs 18.2 us) (BUNSEN_DECODE_BATCHED=1: wherever it applies, 8: the same with 8-warp
// blocks, 0: never; or the testing switch).
// Invariants: masks as ref; a visible key whose sequence or block id is invalid makes its row NaN and is
// never dereferenced; no allocation but the stream's scratch arena (partials), sized by the eager step, and
// the stream's arrival counters (fused combine), allocated zeroed once and left zero by every launch.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/env.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_decode_common.cuh"
#include "kernels/cuda/kv_quant.cuh"

namespace bunsen::kernels::cuda {
namespace {

using namespace decode;

constexpr int kSimtBlocksPerSm = 4;  // the SIMT kernel's residency (128 registers x 128 threads)

std::atomic<int> g_variant{0};  // 0: tensor cores where they apply, else SIMT; 1: SIMT always
std::atomic<int> g_lean{0};     // set_attention_decode_lean_for_testing
std::atomic<int> g_combine{0};  // 0: BUNSEN_DECODE_FUSED_COMBINE (default combine_kernel); 1: fused; 2: combine_kernel
std::atomic<int> g_path{0};     // 0: BUNSEN_DECODE_ATTN (unset: by shape); 1: split slices; 2: cluster
std::atomic<int> g_batched{0};  // 0: BUNSEN_DECODE_BATCHED (unset: by shape); 1: never; 2: packed; 3: 8 warps
constexpr int kBatchedMinKeys = 64;  // the packed kernel's shortest slice: 4 tiles per warp
constexpr int64_t kBatchedMinRowHeads = 128;  // rows x kv heads from which the packed kernel is the default

constexpr int64_t kClusterMaxRowHeads = 2;  // rows x kv heads up to which the cluster path is the default
constexpr int64_t kClusterMaxKeys = 2048;   // ... over a block table of at most this many keys

// Whether the device launches thread-block clusters (sm_90+; read once per process, as pdl_enabled).
bool cluster_launch_ok() {
  static const bool ok = [] {
    int dev = 0, v = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev) == cudaSuccess && v != 0;
  }();
  return ok;
}

// Whether the cluster path serves this call (tensor-core shapes only; the caller checks): the testing switch,
// else BUNSEN_DECODE_ATTN ("cluster" | "split", read once), else by shape on a device with cluster launch:
// steps of <= 2 rows x kv heads over a short block table. There the split path spreads a row over up to 134
// slices of a few keys each and merges them in a second launch; H200, gemma4-e4b (2 / 1 kv heads of 256 /
// 512) batch 1 at 1k keys: split 234.5, cluster (<= 8 slices) 244.9, (<= 16) 259.3 tok/s. With 8 kv heads
// (Llama 3 8B / 1B) the split path stays ahead (8B 210.3 vs 208.5 at <= 16 slices), and at 4k keys the
// cluster path's longer slices lose.
bool cluster_path(const DevAttention& at) {
  const int mode = g_path.load();
  if (mode != 0) return mode == 2;
  static const int env_mode = [] {
    const std::string_view v = env_str("BUNSEN_DECODE_ATTN");
    return v == "cluster" ? 2 : v == "split" ? 1 : 0;
  }();
  if (env_mode != 0) return env_mode == 2;
  return at.q.n_tokens * at.cache.n_kv_heads <= kClusterMaxRowHeads &&
         at.meta.max_blocks * at.cache.block_size <= kClusterMaxKeys && cluster_launch_ok();
}

// The most slices (cluster blocks) per row the cluster path chooses by itself: BUNSEN_DECODE_CLUSTER_MAX
// (1..16; default 16, which needs the non-portable cluster size attribute, which the launch sets).
int cluster_cap() {
  static const int cap = [] {
    const int v = env_int("BUNSEN_DECODE_CLUSTER_MAX", kMaxCluster);
    return v >= 1 && v <= kMaxCluster ? v : kMaxCluster;
  }();
  return cap;
}

// Warps per block of the packed kernel for this step (4 or 8), or 0 for the split kernel. Forced by the
// testing switch or BUNSEN_DECODE_BATCHED (1: 4 warps, 8: 8 warps, 0: never; read once); unset: 4 warps
// from kBatchedMinRowHeads rows x kv heads (16 rows on the 8B shape), so batch 1 (latency: the split
// kernel's slices spread one row over the GPU) and small batches keep the split kernel.
int batched_warps(const DevAttention& at) {
  const int64_t group = at.q.n_heads / at.cache.n_kv_heads;
  const bool eligible = at.cache.bits == 0 ? mma_packed_ok(at.q.head_dim, group)
                                           : g_variant.load() == 0 &&  // (variant 1: SIMT for every cache)
                                                 qmma_packed_ok(at.cache, at.q.head_dim, group, at.q.dtype);
  if (!eligible) return 0;
  int mode = g_batched.load();
  static const int env_mode = [] {
    const std::string_view v = env_str("BUNSEN_DECODE_BATCHED");
    return v == "1" ? 2 : v == "8" ? 3 : v == "0" ? 1 : 0;
  }();
  if (mode == 0) mode = env_mode;
  if (mode != 0) return mode == 2 ? 4 : mode == 3 ? 8 : 0;
  // H200, Llama-3.1-8B shape (8 kv heads x 128), us per layer split vs packed: batch 1 x 1k 12.0 vs 18.2,
  // 16 x 1k 46.0 vs 31.2, 64 x 1k 107.8 vs 105.4, 256 x 1k 423 vs 383, 64 x 4k 389 vs 376: packed from 16 rows.
  return at.q.n_tokens * at.cache.n_kv_heads >= kBatchedMinRowHeads ? 4 : 0;
}

// Slices per row for the packed kernel: as many as keep rows x ceil(kv heads / warps) x slices within one
// wave of `slots` resident blocks (no tail wave; 1 past that), none shorter than kBatchedMinKeys over the
// block table's width. Host scalars only (graph-safe), as choose_splits.
int choose_batched_splits(const DevAttention& at, int warps, int slots, int forced) {
  if (forced > 0) return std::min(forced, kMaxSplits);
  const int64_t per = std::max<int64_t>(1, at.q.n_tokens * ((at.cache.n_kv_heads + warps - 1) / warps));
  const int64_t max_ctx = at.meta.max_blocks * at.cache.block_size;
  int64_t s = std::max<int64_t>(1, slots / per);
  s = std::min<int64_t>({s, (max_ctx + kBatchedMinKeys - 1) / kBatchedMinKeys, kMaxSplits});
  return static_cast<int>(std::max<int64_t>(s, 1));
}

bool fused_combine() {
  const int mode = g_combine.load();
  if (mode != 0) return mode == 1;
  static const bool env_on = env_flag("BUNSEN_DECODE_FUSED_COMBINE", false);
  return env_on;
}

// The fused combine's arrival counters of (device, stream): at least `n` zeroed unsigned ints, at least
// kMinCounters, so the buffer is set up by the first eager step and never grows under a captured graph:
// choose_splits gives n_splits > 1 only while rows x kv heads < a wave of blocks (a few hundred), so more
// takes a forced slice count (tests). Like the scratch arena, valid for work on that stream until a call
// that grows it (which waits for the stream first); unlike it, growth is not seen by the runner's
// scratch_capacity check, hence the margin.
constexpr int64_t kMinCounters = int64_t{1} << 16;

unsigned* arrival_counters(cudaStream_t stream, int64_t n, const char* op) {
  static std::mutex mu;
  static auto* by_stream = new std::map<std::pair<int, void*>, DeviceBuffer>();  // leaked, as the arena
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(mu);
  DeviceBuffer& buf = (*by_stream)[{dev, static_cast<void*>(stream)}];
  const size_t bytes = static_cast<size_t>(std::max(n, kMinCounters)) * sizeof(unsigned);
  if (buf.data() != nullptr && buf.size() >= static_cast<size_t>(n) * sizeof(unsigned))
    return static_cast<unsigned*>(buf.data());
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &status);
  if (e != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    throw Error("cuda",
                strfmt("%s: needs %lld decode arrival counters while the stream is capturing a graph, "
                       "but holds %zu; run the step once before capturing",
                       op, static_cast<long long>(n), buf.size() / sizeof(unsigned)));
  }
  auto detail = [] { return std::string("(decode arrival counters)"); };
  check_cuda(cudaStreamSynchronize(stream), op, detail);  // earlier work may still count in the old buffer
  buf = DeviceBuffer();
  buf = DeviceBuffer(bytes);
  check_cuda(cudaMemsetAsync(buf.data(), 0, bytes, stream), op, detail);
  return static_cast<unsigned*>(buf.data());
}

// kE bf16 of a row as kE / 2 words (one 16- or 8-byte load), and their f32 values.
template <int kE>
__device__ __forceinline__ void load_words(const Bf16* p, uint32_t (&w)[kE / 2]) {
  if constexpr (kE == 8) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = x.x;
    w[1] = x.y;
    w[2] = x.z;
    w[3] = x.w;
  } else {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = x.x;
    w[1] = x.y;
  }
}

template <int kE>
__device__ __forceinline__ void unpack(const uint32_t (&w)[kE / 2], float (&f)[kE]) {
#pragma unroll
  for (int i = 0; i < kE / 2; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// One lane's kE elements of one K or V row as loaded: bf16 pairs, or codes (int8/fp8: 4 per word; int4: 8
// per word) with their group's scale and bias (kE divides the group, so one pair covers them).
template <int kE, int F>
struct KvPack {
  static constexpr int kWords = F == kKvPlain ? kE / 2 : F == kKvI4 ? 1 : kE / 4;
  uint32_t w[kWords];
  float s, b;
};

// Row `row` (element type CT: bf16, or the row's bytes of codes) from dim d0; params: the row's (scale,
// bias) pairs (quantized only).
template <int kE, int F, typename CT>
__device__ __forceinline__ void load_pack(const CT* row, const float* params, int d0, int group,
                                          KvPack<kE, F>& p) {
  if constexpr (F == kKvPlain) {
    load_words<kE>(row + d0, p.w);
  } else {
    if constexpr (F == kKvI4 && kE == 4) {
      p.w[0] = __ldg(reinterpret_cast<const unsigned short*>(row + d0 / 2));
    } else if constexpr (F == kKvI4 || kE == 4) {  // 4 bytes: int4 x 8, int8/fp8 x 4
      p.w[0] = __ldg(reinterpret_cast<const unsigned int*>(row + (F == kKvI4 ? d0 / 2 : d0)));
    } else {  // int8/fp8 x 8
      const uint2 x = __ldg(reinterpret_cast<const uint2*>(row + d0));
      p.w[0] = x.x;
      p.w[1] = x.y;
    }
    const int gi = d0 / group;
    p.s = __ldg(params + 2 * gi);
    p.b = __ldg(params + 2 * gi + 1);
  }
}

template <int kE, int F>
__device__ __forceinline__ void zero_pack(KvPack<kE, F>& p) {
#pragma unroll
  for (int i = 0; i < KvPack<kE, F>::kWords; ++i) p.w[i] = 0u;
  p.s = p.b = 0.0f;
}

// The kE values of a pack in f32 (quantized: fmaf(scale, code value, bias), as kv_dequantize_row).
template <int kE, int F>
__device__ __forceinline__ void unpack_pack(const KvPack<kE, F>& p, float (&f)[kE]) {
  if constexpr (F == kKvPlain) {
    unpack<kE>(p.w, f);
  } else if constexpr (F == kKvI4) {
#pragma unroll
    for (int i = 0; i < kE; ++i) f[i] = fmaf(p.s, static_cast<float>((p.w[0] >> (4 * i)) & 0xfu), p.b);
  } else if constexpr (F == kKvF8) {
#pragma unroll
    for (int i = 0; i < kE; i += 2) {
      const float2 v = e4m3x2_to_f32_dev(p.w[i / 4] >> (8 * (i % 4)));
      f[i] = fmaf(p.s, v.x, p.b);
      f[i + 1] = fmaf(p.s, v.y, p.b);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kE; ++i) f[i] = fmaf(p.s, static_cast<float>((p.w[i / 4] >> (8 * (i % 4))) & 0xffu), p.b);
  }
}

// Compile-time layout of one kernel instance.
template <int kE, int kL, int kG>
struct Shape {
  static constexpr int kKw = 32 / kL;                    // key rows a warp reads at once (one per lane group)
  static constexpr int kUnroll = kG * kE >= 64 ? 2 : 4;  // rows per lane group per iteration (registers)
  static constexpr int kStep = kKw * kUnroll;            // keys per warp per iteration
  static constexpr int kD = kE * kL;                     // dims one lane group covers (>= head_dim)
  static constexpr size_t kRed = size_t{kWarps} * kG * (kD + 2) * sizeof(float);
};

// The per-lane online-softmax state for all kG query heads of the group, over this lane's kE dims.
template <int kE, int kG>
struct RowState {
  float q[kG][kE], acc[kG][kE], m[kG], l[kG];
};

// This lane's place in the SIMT kernel: lane group grp (one key row), dims [d0, d0 + kE).
struct LaneAt {
  int warp, lane, grp, d0;
  bool dims;
};

template <int kE, int kL>
__device__ __forceinline__ LaneAt lane_at(const DecodeArgs& a) {
  LaneAt l;
  l.warp = threadIdx.x >> 5;
  l.lane = threadIdx.x & 31;
  l.grp = l.lane / kL;
  l.d0 = (l.lane % kL) * kE;
  l.dims = l.d0 < a.head_dim;  // head_dim % kE == 0
  return l;
}

template <int kE, int kG>
__device__ __forceinline__ void init_state(const DecodeArgs& a, const Where& w, const LaneAt& ln,
                                           RowState<kE, kG>& st) {
  const float qmul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;
  const int G = a.group;
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      st.acc[h][e] = 0.0f;
      st.q[h][e] = h < G && ln.dims
                       ? load_any(a.q, a.q_dtype, w.t * a.q_ts + (w.g * G + h) * a.q_hs + ln.d0 + e) * qmul
                       : 0.0f;
    }
  }
}

// One iteration: kU rows per lane group, scored against all heads (a kL-lane reduction each), then
// the online softmax (log2 domain) and P·V. Rows with !in are masked; rows with bad score NaN.
template <int kE, int kL, int kG, int kU, int F>
__device__ __forceinline__ void consume(const DecodeArgs& a, RowState<kE, kG>& st, const KvPack<kE, F> (&kw)[kU],
                                        const KvPack<kE, F> (&vw)[kU], const bool (&in)[kU], const bool (&bad)[kU]) {
  float s[kU][kG];  // scores, then probabilities
#pragma unroll
  for (int j = 0; j < kU; ++j) {
    float kf[kE];
    unpack_pack<kE, F>(kw[j], kf);
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < kE; ++e) d = fmaf(st.q[h][e], kf[e], d);
#pragma unroll
      for (int o = kL / 2; o > 0; o >>= 1) d += __shfl_xor_sync(kFull, d, o);
      if (a.softcap > 0.0f) d = a.softcap * tanhf(d * a.scale / a.softcap) * kLog2e;
      s[j][h] = in[j] ? (bad[j] ? NAN : d) : -INFINITY;
    }
  }
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    float mx = st.m[h];
#pragma unroll
    for (int j = 0; j < kU; ++j) mx = fmaxf(mx, s[j][h]);  // ignores NaN: it poisons l, not m
    const float alpha = rescale(st.m[h], mx);
    st.l[h] *= alpha;
#pragma unroll
    for (int e = 0; e < kE; ++e) st.acc[h][e] *= alpha;
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      s[j][h] = s[j][h] == -INFINITY ? 0.0f : exp2f(s[j][h] - mx);
      st.l[h] += s[j][h];
    }
    st.m[h] = mx;
  }
#pragma unroll
  for (int j = 0; j < kU; ++j) {
    float vf[kE];
    unpack_pack<kE, F>(vw[j], vf);
#pragma unroll
    for (int h = 0; h < kG; ++h)
#pragma unroll
      for (int e = 0; e < kE; ++e) st.acc[h][e] = fmaf(s[j][h], vf[e], st.acc[h][e]);
  }
}

// Merges the lane groups of each warp (same dims, other keys) with shuffles, then the warps through
// shared memory (write_block), which writes the output row or this slice's partial.
template <int kE, int kL, int kG>
__device__ __forceinline__ void finish(const DecodeArgs& a, RowState<kE, kG>& st, float* red, const Where& w,
                                       const LaneAt& ln) {
  constexpr int kD = Shape<kE, kL, kG>::kD;
#pragma unroll
  for (int o = kL; o < 32; o <<= 1)
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      const float mo = __shfl_xor_sync(kFull, st.m[h], o), lo = __shfl_xor_sync(kFull, st.l[h], o);
      const float mx = fmaxf(st.m[h], mo), wa = rescale(st.m[h], mx), wb = rescale(mo, mx);
      st.l[h] = st.l[h] * wa + lo * wb;
#pragma unroll
      for (int e = 0; e < kE; ++e)
        st.acc[h][e] = st.acc[h][e] * wa + __shfl_xor_sync(kFull, st.acc[h][e], o) * wb;
      st.m[h] = mx;
    }
  if (ln.grp == 0)
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      float* r = red + (ln.warp * kG + h) * (kD + 2);
      if (ln.lane == 0) {
        r[0] = st.m[h];
        r[1] = st.l[h];
      }
#pragma unroll
      for (int e = 0; e < kE; ++e) r[2 + ln.d0 + e] = st.acc[h][e];
    }
  write_block<kG, kD>(a, red, w);
}

// The SIMT slice kernel: each warp loads its rows straight into registers, kUnroll per lane group.
// F: the cache format (plain = bf16; else u8 codes, strides in bytes, plus params).
template <int kE, int kL, int kG, int F>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeArgs a) {
  using CT = std::conditional_t<F == kKvPlain, Bf16, uint8_t>;
  using S = Shape<kE, kL, kG>;
  constexpr int kU = S::kUnroll;
  __shared__ float red[S::kRed / sizeof(float)];
  slice_prologue();
  const Where w = where_am_i(a);
  if (!w.live) return;  // uniform over the block
  const LaneAt ln = lane_at<kE, kL>(a);
  RowState<kE, kG> st;
  init_state<kE, kG>(a, w, ln, st);
  const CT* kc = static_cast<const CT*>(a.k_cache) + w.g * a.k_s2;
  const CT* vc = static_cast<const CT*>(a.v_cache) + w.g * a.v_s2;
  const float* kp = F == kKvPlain ? nullptr : a.k_params + w.g * a.kp_s2;
  const float* vp = F == kKvPlain ? nullptr : a.v_params + w.g * a.vp_s2;
  const bool seq_ok = w.seq >= 0 && w.seq < a.n_seqs;
  const int32_t* table = a.block_tables + (seq_ok ? static_cast<int64_t>(w.seq) * a.table_stride : 0);
  for (int base = w.k0 + ln.warp * S::kStep; base < w.k1; base += kWarps * S::kStep) {  // warp-uniform
    KvPack<kE, F> kw[kU], vw[kU];
    bool in[kU], bad[kU];
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const int key = base + j * S::kKw + ln.grp;
      int off = 0;
      in[j] = key < w.k1;
      const int blk = in[j] ? block_of(a, table, seq_ok, key, off) : -1;
      bad[j] = in[j] && blk < 0;
      if (blk >= 0 && ln.dims) {
        load_pack<kE, F>(kc + blk * a.k_s0 + off * a.k_s1, F == kKvPlain ? nullptr : kp + blk * a.kp_s0 + off * a.kp_s1,
                         ln.d0, a.kv_group, kw[j]);
        load_pack<kE, F>(vc + blk * a.v_s0 + off * a.v_s1, F == kKvPlain ? nullptr : vp + blk * a.vp_s0 + off * a.vp_s1,
                         ln.d0, a.kv_group, vw[j]);
      } else {
        zero_pack(kw[j]);
        zero_pack(vw[j]);
      }
    }
    consume<kE, kL, kG, kU, F>(a, st, kw, vw, in, bad);
  }
  finish<kE, kL, kG>(a, st, red, w, ln);
}

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// The kernel's tiling for a head_dim and GQA group: kG = group rounded up to a power of two, kE dims per
// lane (8 = 16-byte loads; 4 for 8-head groups, which would not fit the registers otherwise), kL lanes.
struct Tiling {
  int e, l, g;
};

Tiling tiling_for(int64_t head_dim, int64_t group) {
  Tiling t;
  t.g = pow2_at_least(group);
  t.e = t.g == 8 && head_dim <= 128 ? 4 : 8;
  t.l = std::max(8, pow2_at_least(head_dim / t.e));
  return t;
}

template <int kE, int kL, int kG, int F>
void launch(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  check_cuda(launch_pdl(decode_kernel<kE, kL, kG, F>, dim3(a.n_tokens, n_kv_heads, a.n_splits), dim3(kThreads), 0,
                        s, a),
             "paged_attention", [] { return std::string("(flash-decoding slice kernel)"); });
}

template <int kE, int kG, int F>
void launch_lanes(cudaStream_t s, const DecodeArgs& a, int lanes, int n_kv_heads) {
  if (lanes == 8)
    launch<kE, 8, kG, F>(s, a, n_kv_heads);
  else if (lanes == 16)
    launch<kE, 16, kG, F>(s, a, n_kv_heads);
  else
    launch<kE, 32, kG, F>(s, a, n_kv_heads);
}

template <int F>
void launch_tiling(cudaStream_t s, const DecodeArgs& a, Tiling ti, int n_kv_heads) {
  if (ti.g == 8 && ti.e == 4)
    launch_lanes<4, 8, F>(s, a, ti.l, n_kv_heads);
  else if (ti.g == 8)  // head_dim > 128: 32 lanes
    launch<8, 32, 8, F>(s, a, n_kv_heads);
  else if (ti.g == 4)
    launch_lanes<8, 4, F>(s, a, ti.l, n_kv_heads);
  else if (ti.g == 2)
    launch_lanes<8, 2, F>(s, a, ti.l, n_kv_heads);
  else
    launch_lanes<8, 1, F>(s, a, ti.l, n_kv_heads);
}

// Slices per row: enough blocks for one full wave (`fill` resident blocks per SM; more would mostly add
// surplus blocks that still occupy a slot to exit), no slice shorter than min_keys over the block table's
// width. Host scalars only, so a captured graph keeps its grid for longer contexts.
int choose_splits(const DevAttention& at, int min_keys, int fill, int forced) {
  if (forced > 0) return std::min(forced, kMaxSplits);
  const int64_t rows = std::max<int64_t>(1, at.q.n_tokens * at.cache.n_kv_heads);
  const int64_t max_ctx = at.meta.max_blocks * at.cache.block_size;
  int64_t s = (static_cast<int64_t>(fill) * sm_count() + rows - 1) / rows;
  s = std::min<int64_t>({s, (max_ctx + min_keys - 1) / min_keys, kMaxSplits});
  return static_cast<int>(std::max<int64_t>(s, 1));
}

// The tensor-core slice kernel takes bf16 q over a bf16 cache at head_dim 64/128/256/512, <= 16 heads per
// kv head (unless the testing switch asks for SIMT).
bool use_mma(const DevAttention& at) {
  const int64_t n_kv = at.cache.n_kv_heads;
  return g_variant.load() == 0 && at.cache.bits == 0 && at.cache.dtype == DType::kBF16 &&
         at.q.dtype == DType::kBF16 && n_kv > 0 && at.q.n_heads % n_kv == 0 &&
         mma_decode_ok(at.q.head_dim, at.q.n_heads / n_kv);
}

// BUNSEN_DECODE_SPLITS=N (read once, N > 0): at most N key slices per row instead of the count that fills the
// GPU (A/B runs; the test hook's count wins).
int env_splits() {
  static const int n = [] {
    const int v = env_int("BUNSEN_DECODE_SPLITS", 0);
    return v > 0 ? v : 0;
  }();
  return n;
}

// BUNSEN_DECODE_TIMING=file.csv (diagnostics, see decode_timing.cuh): the slice and combine kernels' block
// timelines, one CSV row per block (kind, layer, x, y, z, smid, keys, t0..t4 in ns from the first entry),
// written at process exit. The device buffer (2^20 records) is allocated by the first launch that is not
// being captured.
class TimingLog {
 public:
  explicit TimingLog(std::string path) : path_(std::move(path)) {}
  TimingLog(const TimingLog&) = delete;
  TimingLog& operator=(const TimingLog&) = delete;
  ~TimingLog() { write(); }

  // Null when BUNSEN_DECODE_TIMING is unset (read once).
  static TimingLog* get() {
    static const std::string path{env_str("BUNSEN_DECODE_TIMING")};
    if (path.empty()) return nullptr;
    static TimingLog log(path);
    return &log;
  }

  // Sets a.timing and a.timing_layer (the cache pointer's ordinal, in first-launch order).
  void arm(cudaStream_t s, const void* k_cache, DecodeArgs& a) {
    std::lock_guard<std::mutex> lock(mu_);
    if (dev_ == nullptr) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      check_cuda(cudaStreamIsCapturing(s, &st), "decode timing",
                 [] { return std::string("(capture status)"); });
      if (st != cudaStreamCaptureStatusNone) return;
      const size_t bytes = sizeof(TimingBuffer) + (kCap - 1) * sizeof(BlockTimes);
      check_cuda(cudaMalloc(&dev_, bytes), "decode timing", [&] { return strfmt("(%zu bytes)", bytes); });
      TimingBuffer head{};
      head.cap = kCap;
      check_cuda(cudaMemcpy(dev_, &head, offsetof(TimingBuffer, rec), cudaMemcpyHostToDevice),
                 "decode timing", [] { return std::string("(header)"); });
      device_ = current_device();
    }
    a.timing = dev_;
    a.timing_layer = layers_.emplace(k_cache, static_cast<int>(layers_.size())).first->second;
  }

 private:
  static constexpr unsigned kCap = 1u << 20;

  void write() {
    if (dev_ == nullptr) return;
    cudaSetDevice(device_);
    TimingBuffer head{};
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(&head, dev_, offsetof(TimingBuffer, rec), cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::fprintf(stderr, "BUNSEN_DECODE_TIMING: could not read the records back\n");
      return;
    }
    std::vector<BlockTimes> rec(std::min(head.next, kCap));
    if (!rec.empty() && cudaMemcpy(rec.data(), dev_->rec, rec.size() * sizeof(BlockTimes),
                                   cudaMemcpyDeviceToHost) != cudaSuccess)
      return;
    uint64_t t_min = UINT64_MAX;
    for (const BlockTimes& r : rec) t_min = std::min(t_min, r.t[0]);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "BUNSEN_DECODE_TIMING: cannot write %s\n", path_.c_str());
      return;
    }
    std::fprintf(f, "kind,layer,x,y,z,smid,keys,t0,t1,t2,t3,t4\n");
    for (const BlockTimes& r : rec) {
      const bool slice = (r.tag & 15u) == kTimingSlice;
      std::fprintf(f, "%s,%u,%u,%u,%u,%u,%u", slice ? "slice" : "combine", r.tag >> 4,
                   slice ? r.block & 4095u : r.block, slice ? (r.block >> 12) & 1023u : 0u,
                   slice ? r.block >> 22 : 0u, r.smid, r.keys);
      for (uint64_t t : r.t) std::fprintf(f, ",%llu", static_cast<unsigned long long>(t - t_min));
      std::fputc('\n', f);
    }
    std::fclose(f);
    std::fprintf(stderr, "BUNSEN_DECODE_TIMING: %zu block records in %s%s\n", rec.size(), path_.c_str(),
                 head.next > kCap ? " (buffer full: later launches dropped)" : "");
  }

  std::string path_;
  std::mutex mu_;
  TimingBuffer* dev_ = nullptr;
  int device_ = 0;
  std::map<const void*, int> layers_;
};

}  // namespace

void set_attention_decode_variant_for_testing(int variant) {
  g_variant.store(variant);
}

void set_attention_decode_combine_for_testing(int mode) {
  g_combine.store(mode);
}

void set_attention_decode_lean_for_testing(int mode) {
  g_lean.store(mode);
}

bool attention_decode_lean() {
  const int mode = g_lean.load();
  if (mode != 0) return mode == 2;
  static const bool on = env_flag("BUNSEN_DECODE_LEAN", true);
  return on;
}

void set_attention_decode_path_for_testing(int mode) {
  g_path.store(mode);
}

void set_attention_decode_batched_for_testing(int mode) {
  g_batched.store(mode);
}

bool decode_attention_ok(const DevAttention& at) {
  const DevCache& c = at.cache;
  const int64_t hd = at.q.head_dim;
  if (c.n_kv_heads <= 0 || at.q.n_heads % c.n_kv_heads != 0) return false;
  const int64_t group = at.q.n_heads / c.n_kv_heads;
  bool aligned = reinterpret_cast<uintptr_t>(c.k) % 16 == 0 && reinterpret_cast<uintptr_t>(c.v) % 16 == 0;
  for (int i = 0; i < 3; ++i) aligned = aligned && c.k_strides[i] % 8 == 0 && c.v_strides[i] % 8 == 0;
  // Quantized: a lane's kE (4 or 8) dims stay in one group; int4 loads 4 bytes at most, int8/fp8 8 bytes.
  const bool quant_ok = c.bits != 0 && c.dtype == DType::kU8 && c.group_size > 0 && c.group_size % 8 == 0 &&
                        hd % c.group_size == 0 && c.k_params != nullptr && c.v_params != nullptr &&
                        reinterpret_cast<uintptr_t>(c.k_params) % 4 == 0 &&
                        reinterpret_cast<uintptr_t>(c.v_params) % 4 == 0;
  if (c.bits != 0) {
    const int64_t need = c.bits == 4 && !c.fp8 ? 4 : 8;
    aligned = reinterpret_cast<uintptr_t>(c.k) % need == 0 && reinterpret_cast<uintptr_t>(c.v) % need == 0;
    for (int i = 0; i < 3; ++i) aligned = aligned && c.k_strides[i] % need == 0 && c.v_strides[i] % need == 0;
  }
  const bool simt = hd % 8 == 0 && hd >= 8 && hd <= 256 && group >= 1 && group <= 8;
  return (c.bits == 0 ? c.dtype == DType::kBF16 : quant_ok) && at.q.n_tokens <= at.meta.n_seqs &&
         (simt || use_mma(at)) && aligned && at.q.n_tokens < (int64_t{1} << 31) && c.n_kv_heads <= 65535;
}

void decode_attention(void* stream, const DevAttention& at, int forced_splits) {
  if (forced_splits <= 0) forced_splits = env_splits();
  const char* op = "paged_attention";
  auto detail = [&] { return heads_desc("q", at.q) + " (flash-decoding)"; };
  DecodeArgs a;
  static_cast<PagedArgs&>(a) = paged_args(at);
  a.q_dtype = at.q.dtype;
  a.n_heads = static_cast<int>(at.q.n_heads);
  a.head_dim = static_cast<int>(at.q.head_dim);
  const bool mma = use_mma(at);
  const Tiling ti = tiling_for(at.q.head_dim, a.group);
  const int unroll = ti.g * ti.e >= 64 ? 2 : 4;  // as Shape::kUnroll
  const int mma_per_sm = mma ? mma_blocks_per_sm(a.head_dim, a.group) : 0;
  // packed kernel: warps per block (a quantized cache: attention_decode_qmma.cu's kernel)
  const int pack = mma || at.cache.bits != 0 ? batched_warps(at) : 0;
  const bool packed = pack > 0, quant = at.cache.bits != 0;
  a.min_keys = packed ? kBatchedMinKeys
               : mma  ? mma_min_keys(a.head_dim, a.group)
                      : std::max(32, kWarps * (32 / ti.l) * unroll);
  const int packed_per_sm = !packed ? 0
                            : quant ? qmma_packed_blocks_per_sm(a.head_dim, pack, at.cache.bits)
                                    : mma_packed_blocks_per_sm(a.head_dim, a.group, pack);
  a.n_splits = packed ? choose_batched_splits(at, pack, packed_per_sm * sm_count(), forced_splits)
                      : choose_splits(at, a.min_keys, mma ? mma_per_sm : kSimtBlocksPerSm, forced_splits);
  const int64_t table_keys = at.meta.max_blocks * at.cache.block_size;
  a.max_slice_keys =
      static_cast<int>(std::min<int64_t>((table_keys + a.n_splits - 1) / a.n_splits, INT32_MAX));
  const int bs = a.block_size;
  a.block_shift = (bs & (bs - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(bs)) : -1;
  cudaStream_t s = as_stream(stream);
  if (TimingLog* log = TimingLog::get()) log->arm(s, at.cache.k, a);
  const int n_kv_heads = static_cast<int>(at.cache.n_kv_heads);
  // The cluster path: as many slices as the split path would use, at most cluster_cap() (a forced count
  // above kMaxCluster keeps the split path).
  if (mma && !packed && cluster_path(at) && forced_splits <= kMaxCluster) {
    if (forced_splits <= 0) a.n_splits = std::min(a.n_splits, cluster_cap());
    launch_decode_mma_cluster(s, a, n_kv_heads);
    check_launch(op, detail);
    return;
  }
  const bool fused = a.n_splits > 1 && !packed && fused_combine();  // packed: combine_kernel only
  if (a.n_splits > 1) {
    // (+16: the staged combine's aligned copies may read up to 8 bytes past the last partial)
    const size_t bytes =
        static_cast<size_t>(a.n_tokens) * a.n_heads * a.n_splits * (a.head_dim + 2) * sizeof(float) + 16;
    a.partials = static_cast<float*>(scratch(stream, bytes, op));
    if (fused) a.counters = arrival_counters(s, static_cast<int64_t>(a.n_tokens) * n_kv_heads, op);
  }
  if (packed && quant)
    launch_decode_qmma_packed(s, a, n_kv_heads, pack, at.cache);
  else if (packed)
    launch_decode_mma_packed(s, a, n_kv_heads, pack);
  else if (mma)
    launch_decode_mma(s, a, n_kv_heads);
  else if (at.cache.bits == 0)
    launch_tiling<kKvPlain>(s, a, ti, n_kv_heads);
  else
    with_quant_fmt(at.cache, [&](auto fmt) { launch_tiling<decltype(fmt)::value>(s, a, ti, n_kv_heads); });
  check_launch(op, detail);
  if (a.n_splits > 1 && !fused) launch_combine(s, a, at);  // launched early; it waits for the partials
}

}  // namespace bunsen::kernels::cuda
