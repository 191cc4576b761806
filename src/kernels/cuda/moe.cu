// CUDA MoE ops (moe_ops.h). moe_route: one warp per token (softmax|sigmoid over the experts in shared
// memory, top_k rounds of a warp arg-max with ties to the lower index). moe_experts, two paths chosen from
// the shapes only (host scalars, never device data):
//   grouped GEMV (n_tokens * top_k <= kGemvMaxPairs): launch 1 gives one warp per (pair, expert row) the
//     gate and up dots and writes act(gate) * up (f32, scratch); launch 2 gives one warp per (token, output
//     row) the sum over the token's top_k slots, in slot order, of weight * down-row dot.
//   expert-sorted tiles (larger steps): a one-block plan kernel counts pairs per expert and sorts them by
//     expert (offsets, per-expert tile ranges, pair <-> sorted slot); tile kernels then run [kTileM pairs of
//     one expert x kTileN rows] blocks for gate/up (+ act) and for down (into per-slot f32 rows); a last
//     kernel sums each token's slots in slot order. The grid is the worst-case tile count (pairs / kTileM
//     + n_experts); blocks past the real count exit, so nothing depends on device data at launch.
// The tile kernels decode a 4/8-bit weight-tile row as one 32-code chunk per thread (tile_gemm; weight_at
// per element for other widths). (A staged grouped GEMV -- x or the act rows in shared memory per block --
// gave the same bits but measured 40 % slower per MoE layer at batch 1 on an H100: every block re-staged the
// whole vector before its first weight load.)
// Not tuned: SIMT f32 math (no tensor cores yet). On the grouped-GEMV path 4/8-bit experts stream whole
// 32-code chunks (16-byte loads, several per lane in flight: gate and up rows together, every top_k slot of
// a down row together) and take sum_chunk scale * sum(q * v) + bias * sum(v); other widths decode one code at
// a time.
// Invariants: every output element is written once; an out-of-range expert id contributes nothing; all
// launches go to `stream` with no host sync (graph-capturable); one scratch() call per op.
#include <atomic>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/quant_common.cuh"

namespace bunsen::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxExperts = 1024, kMaxTopK = 32;
constexpr int64_t kGemvMaxPairs = 64;
constexpr int kTileM = 32, kTileN = 64, kTileK = 32, kTileThreads = 256;
constexpr int kPlanThreads = 1024;

std::atomic<MoePath> g_path{MoePath::kAuto};
std::atomic<bool> g_per_element{false};

// ---------------------------------------------------------------- weights

// Element (r, c) of expert e's matrix, any storage (float dtypes, or MLX affine codes).
__device__ __forceinline__ float weight_at(const DevExpertWeights& w, int e, int64_t r, int64_t c) {
  if (w.bits == 0) return load_any(reinterpret_cast<const void*>(w.ptrs[e]), w.dtype, r * w.cols + c);
  const uint32_t* row = reinterpret_cast<const uint32_t*>(w.ptrs[e]) + r * (w.cols * w.bits / 32);
  const int64_t groups = w.cols / w.group_size, g = r * groups + c / w.group_size;
  const float s = load_any(reinterpret_cast<const void*>(w.scale_ptrs[e]), w.dtype, g);
  const float b = load_any(reinterpret_cast<const void*>(w.bias_ptrs[e]), w.dtype, g);
  return fmaf(s, static_cast<float>(quant_code_at(row, c, w.bits)), b);
}

// Lane-strided dot of row r of expert e with v[0:cols] (f32 or bf16), summed over the warp.
template <typename VT>
__device__ __forceinline__ float warp_dot(const DevExpertWeights& w, int e, int64_t r, const VT* v, int lane) {
  float acc = 0.0f;
  if (w.bits == 0 && w.dtype == DType::kBF16 && w.cols % 8 == 0 &&
      (static_cast<uint64_t>(w.ptrs[e]) & 15) == 0) {  // 16-byte loads of 8 weights
    const uint4* row = reinterpret_cast<const uint4*>(reinterpret_cast<const Bf16*>(w.ptrs[e]) + r * w.cols);
    for (int64_t c8 = lane; c8 < w.cols / 8; c8 += 32) {
      const uint4 q = __ldg(row + c8);
      const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc = fmaf(__uint_as_float(u[i] << 16), to_f32(v[8 * c8 + 2 * i]), acc);
        acc = fmaf(__uint_as_float(u[i] & 0xffff0000u), to_f32(v[8 * c8 + 2 * i + 1]), acc);
      }
    }
  } else {
    for (int64_t c = lane; c < w.cols; c += 32) acc = fmaf(weight_at(w, e, r, c), to_f32(v[c]), acc);
  }
  return warp_sum(acc);
}

__device__ __forceinline__ float gated(bool gelu_tanh, float g, float u) {
  if (!gelu_tanh) return g / (1.0f + expf(-g)) * u;
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + tanhf(inner)) * u;
}

__device__ __forceinline__ bool valid_expert(int e, int64_t n_experts) {
  return e >= 0 && e < n_experts;
}

// ---------------------------------------------------------------- routing

// score[e] of token t's logits row: softmax or sigmoid. One warp.
template <typename LT>
__device__ __forceinline__ void expert_scores(const DevMoeRoute& a, const LT* l, int64_t n_experts, float* score) {
  const int lane = threadIdx.x;
  float mx = -INFINITY;
  for (int64_t e = lane; e < n_experts; e += 32) mx = fmaxf(mx, to_f32(l[e]));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t e = lane; e < n_experts; e += 32) {
    const float x = to_f32(l[e]);
    const float s = a.sigmoid ? 1.0f / (1.0f + expf(-x)) : expf(x - mx);
    score[e] = s;
    sum += s;
  }
  sum = warp_sum(sum);
  if (!a.sigmoid)
    for (int64_t e = lane; e < n_experts; e += 32) score[e] /= sum;
  __syncwarp();
}

// Each lane marks the experts it owns (lane + 32 i) as taken in a register mask, every lane keeps the running
// total of the chosen scores in pick order, and lane j writes slot j: no scan of the earlier picks per expert
// and no serial chain of stores and loads (an earlier form that had both took 13 us per MoE layer at batch
// 1).
template <typename LT>
__global__ void route_kernel(const DevMoeRoute a, const LT* logits, int64_t n_experts) {
  static_assert(kMaxTopK <= 32 && kMaxExperts <= 32 * 32, "lane j writes slot j; 32 experts per lane");
  extern __shared__ float score[];  // [n_experts]
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  expert_scores(a, logits + t * a.logits.stride, n_experts, score);
  uint32_t taken = 0;  // bit i: expert lane + 32 i was picked (n_experts <= kMaxExperts = 32 * 32)
  int mine = 0;        // lane j < top_k: the j-th pick
  float total = 0.0f;  // sum of the chosen scores, in pick order (every lane the same)
  for (int j = 0; j < a.top_k; ++j) {
    float best_key = -INFINITY;
    int best = 0x7fffffff;
    int i = 0;
    for (int64_t e = lane; e < n_experts; e += 32, ++i) {
      if ((taken >> i) & 1u) continue;
      const float key = isnan(score[e]) ? -INFINITY : score[e];
      if (best == 0x7fffffff || key > best_key) best_key = key, best = static_cast<int>(e);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ok = __shfl_xor_sync(0xffffffffu, best_key, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best, o);
      if (oi != 0x7fffffff && (best == 0x7fffffff || ok > best_key || (ok == best_key && oi < best)))
        best_key = ok, best = oi;
    }
    if ((best & 31) == lane) taken |= 1u << (best >> 5);
    if (lane == j) mine = best;
    total += score[best];
  }
  if (lane >= a.top_k) return;
  float w = score[mine];
  if (a.norm_topk) w /= total;
  w *= a.scale;
  if (a.expert_scale) w *= load_any(a.expert_scale, a.expert_scale_dtype, mine);
  a.ids[t * a.top_k + lane] = mine;
  a.weights[t * a.top_k + lane] = w;
}

// ---------------------------------------------------------------- quantized rows, vectorised

// 32-code chunks per lane and pass in flight: 16-byte loads (4 bits: one per chunk, 8 bits: two).
template <int kBits>
__host__ __device__ constexpr int chunks_in_flight() {
  return kBits == 4 ? 4 : 2;
}

// True when expert e's codes and the vector v can take whole-chunk vector loads (4/8 bits, 16-byte
// aligned codes and v; rows are whole 16-byte multiples since cols is a multiple of the group size).
template <typename VT>
__device__ __forceinline__ bool vec_ok(const DevExpertWeights& w, int e, const VT* v) {
  return (w.bits == 4 || w.bits == 8) && (static_cast<uint64_t>(w.ptrs[e]) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(v) & 15) == 0;
}

// One loaded chunk (32 codes of one row, inside one scale group) against v[0:32]:
// scale * sum(q * v) + bias * sum(v).
template <int kBits, typename VT>
__device__ __forceinline__ float chunk_dot(const uint32_t (&wv)[kBits], float s, float b, const VT* v) {
  float dot = 0.0f, vs = 0.0f;
#pragma unroll
  for (int js = 0; js < kQuantChunk / 8; ++js) {
    float q[8], xv[8];
    decode8<kBits>(wv, js, q);
    load_x8(v + 8 * js, xv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      vs += xv[e];
      dot = fmaf(q[e], xv[e], dot);
    }
  }
  return fmaf(s, dot, b * vs);
}

// A quantized expert row: codes, and scales/biases at its first group.
struct QRow {
  const uint32_t* codes;
  const void* scales;
  const void* biases;
};

__device__ __forceinline__ QRow q_row(const DevExpertWeights& w, int e, int64_t r) {
  const int64_t groups = w.cols / w.group_size;
  const int64_t sb = r * groups * static_cast<int64_t>(w.dtype == DType::kF32 ? 4 : 2);
  return {reinterpret_cast<const uint32_t*>(w.ptrs[e]) + r * (w.cols * w.bits / 32),
          reinterpret_cast<const char*>(w.scale_ptrs[e]) + sb, reinterpret_cast<const char*>(w.bias_ptrs[e]) + sb};
}

// The loads of chunk c of row q (codes, scale, bias of its group).
template <int kBits>
__device__ __forceinline__ void load_q_chunk(const QRow& q, const DevExpertWeights& w, int64_t c,
                                             uint32_t (&wv)[kBits], float& s, float& b) {
  load_chunk<kBits>(q.codes + c * kBits, wv);
  const int64_t g = c * kQuantChunk / w.group_size;
  s = load_any(q.scales, w.dtype, g);
  b = load_any(q.biases, w.dtype, g);
}

// gate · v and up · v of row i of expert e, the lanes striding over the gate chunks then the up chunks
// (both rows' loads in flight together). Needs vec_ok for gate and up.
template <int kBits, typename VT>
__device__ __forceinline__ void warp_dot_gate_up_q(const DevMoeExperts& a, int e, int64_t i, const VT* v, int lane,
                                                   float& gate, float& up) {
  constexpr int kU = chunks_in_flight<kBits>();
  const QRow qg = q_row(a.gate, e, i), qu = q_row(a.up, e, i);
  const int64_t n_chunks = a.gate.cols / kQuantChunk, items = 2 * n_chunks;
  float gs = 0.0f, us = 0.0f;
  for (int64_t i0 = 0; i0 < items; i0 += 32 * kU) {
    uint32_t wv[kU][kBits];
    float s[kU], b[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t idx = i0 + u * 32 + lane;
      if (idx >= items) continue;  // (not break: ptxas then keeps 94 registers, 2 blocks per SM instead of 3)
      // Two calls, not one with `is_up ? qu : qg`: selecting a struct at run time put both rows' QRows in
      // local memory (a 48-byte stack frame) and every code load's address behind a local load.
      if (idx >= n_chunks)
        load_q_chunk<kBits>(qu, a.up, idx - n_chunks, wv[u], s[u], b[u]);
      else
        load_q_chunk<kBits>(qg, a.gate, idx, wv[u], s[u], b[u]);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t idx = i0 + u * 32 + lane;
      if (idx >= items) break;
      const bool is_up = idx >= n_chunks;
      const int64_t c = is_up ? idx - n_chunks : idx;
      const float d = chunk_dot<kBits>(wv[u], s[u], b[u], v + c * kQuantChunk);
      if (is_up)
        us += d;
      else
        gs += d;
    }
  }
  gate = warp_sum(gs);
  up = warp_sum(us);
}

// sum_j weights[t, j] * (down_e_j[r] · act[t * top_k + j]) with every slot's loads in flight together,
// the lanes striding over (slot, chunk) items. Needs vec_ok for every valid slot (checked by the caller).
template <int kBits>
__device__ __forceinline__ float warp_down_q(const DevMoeExperts& a, const float* act, int64_t t, int64_t r,
                                             int lane) {
  constexpr int kU = chunks_in_flight<kBits>();
  const int64_t f = a.down.cols, n_chunks = f / kQuantChunk, items = a.top_k * n_chunks;
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < items; i0 += 32 * kU) {
    uint32_t wv[kU][kBits];
    float s[kU], b[kU], wt[kU];
    int64_t off[kU];  // act offset of the item's chunk
    bool ok[kU];      // the slot's expert id is valid
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t idx = i0 + u * 32 + lane;
      ok[u] = false;
      if (idx >= items) break;
      const int64_t j = idx / n_chunks, c = idx - j * n_chunks, p = t * a.top_k + j;
      const int e = a.ids[p];
      off[u] = p * f + c * kQuantChunk;
      if (!valid_expert(e, a.n_experts)) continue;
      ok[u] = true;
      wt[u] = a.weights[p];
      load_q_chunk<kBits>(q_row(a.down, e, r), a.down, c, wv[u], s[u], b[u]);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t idx = i0 + u * 32 + lane;
      if (idx >= items) break;
      if (ok[u]) acc = fmaf(wt[u], chunk_dot<kBits>(wv[u], s[u], b[u], act + off[u]), acc);
    }
  }
  return warp_sum(acc);
}

// ---------------------------------------------------------------- grouped GEMV (small steps)

// act[p, i] = act(gate_e[i] · x[t]) * (up_e[i] · x[t]) for pair p = (t, j), e = ids[p].
template <typename XT>
__global__ void gemv_gate_up_kernel(const DevMoeExperts a, const XT* x, float* act) {
  const int lane = threadIdx.x & 31;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5), p = blockIdx.y;
  const int64_t f = a.gate.rows;
  if (i >= f) return;
  const int e = a.ids[p];
  if (!valid_expert(e, a.n_experts)) {
    if (lane == 0) act[p * f + i] = 0.0f;
    return;
  }
  const XT* xt = x + (p / a.top_k) * a.x.stride;
  float g, u;
  if (vec_ok(a.gate, e, xt) && vec_ok(a.up, e, xt) && a.gate.bits == a.up.bits) {  // warp-uniform
    if (a.gate.bits == 4)
      warp_dot_gate_up_q<4>(a, e, i, xt, lane, g, u);
    else
      warp_dot_gate_up_q<8>(a, e, i, xt, lane, g, u);
  } else {
    g = warp_dot(a.gate, e, i, xt, lane);
    u = warp_dot(a.up, e, i, xt, lane);
  }
  if (lane == 0) act[p * f + i] = gated(a.gelu_tanh, g, u);
}

// out[t, r] = sum_j weights[t, j] * (down_e[r] · act[t * top_k + j]), j in order.
template <typename OT>
__global__ void gemv_down_kernel(const DevMoeExperts a, const float* act, OT* out) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5), t = blockIdx.y;
  const int64_t d = a.down.rows, f = a.down.cols;
  if (r >= d) return;
  bool vec = (a.down.bits == 4 || a.down.bits == 8) && (f * 4) % 16 == 0 &&
             (reinterpret_cast<uintptr_t>(act) & 15) == 0;
  for (int j = 0; vec && j < a.top_k; ++j) {  // warp-uniform
    const int e = a.ids[t * a.top_k + j];
    vec = !valid_expert(e, a.n_experts) || vec_ok(a.down, e, act);
  }
  if (vec) {
    const float acc = a.down.bits == 4 ? warp_down_q<4>(a, act, t, r, lane) : warp_down_q<8>(a, act, t, r, lane);
    if (lane == 0) out[t * a.out.stride + r] = from_f32<OT>(acc);
    return;
  }
  float acc = 0.0f;
  for (int j = 0; j < a.top_k; ++j) {
    const int64_t p = t * a.top_k + j;
    const int e = a.ids[p];
    if (!valid_expert(e, a.n_experts)) continue;
    acc += a.weights[p] * warp_dot(a.down, e, r, act + p * f, lane);
  }
  if (lane == 0) out[t * a.out.stride + r] = from_f32<OT>(acc);
}

// ---------------------------------------------------------------- expert-sorted tiles (large steps)

struct Plan {
  int* offsets;     // [n_experts + 1] start of each expert's slots
  int* tile_start;  // [n_experts + 1] first tile of each expert
  int* sorted;      // [pairs] slot -> pair
  int* slot_of;     // [pairs] pair -> slot, -1 for an invalid id
};

__global__ void plan_kernel(const int32_t* ids, int64_t pairs, int64_t n_experts, Plan p) {
  __shared__ int count[kMaxExperts], cursor[kMaxExperts], offset[kMaxExperts];
  for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) count[e] = cursor[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x)
    if (valid_expert(ids[i], n_experts)) atomicAdd(&count[ids[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int o = 0, ts = 0;
    for (int64_t e = 0; e < n_experts; ++e) {
      offset[e] = p.offsets[e] = o;
      p.tile_start[e] = ts;
      o += count[e];
      ts += (count[e] + kTileM - 1) / kTileM;
    }
    p.offsets[n_experts] = o;
    p.tile_start[n_experts] = ts;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = ids[i];
    if (!valid_expert(e, n_experts)) {
      p.slot_of[i] = -1;
      continue;
    }
    const int slot = offset[e] + atomicAdd(&cursor[e], 1);
    p.sorted[slot] = static_cast<int>(i);
    p.slot_of[i] = slot;
  }
}

// The expert and slot range of tile b; false when b is past the last tile.
__device__ __forceinline__ bool find_tile(const Plan& p, int64_t n_experts, int b, int& e, int& s0, int& m) {
  if (b >= p.tile_start[n_experts]) return false;
  int lo = 0, hi = static_cast<int>(n_experts) - 1;  // last e with tile_start[e] <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tile_start[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  e = lo;
  s0 = p.offsets[e] + (b - p.tile_start[e]) * kTileM;
  m = min(kTileM, p.offsets[e + 1] - s0);
  return true;
}

// One [kTileM slots x kTileN rows] tile of y = A · W_eᵀ over K = w.cols, f32. A row s comes from a_row(s).
// With kGlu, W is gate and w2 is up, and out = act(gate) * up. Thread (ty, tx) owns rows ty + 16 i and
// columns tx + 16 j of the tile.
// Row r's 32 values k0 .. k0 + 31 (one chunk, k0 % 32 == 0) of expert e's MLX 4/8-bit matrix into dst, each
// fmaf(scale, q, bias) as weight_at computes it.
template <int kBits>
__device__ __forceinline__ void decode_row_chunk(const DevExpertWeights& w, int e, int64_t r, int64_t k0,
                                                 float* dst) {
  uint32_t wv[kBits];
  float s, b;
  load_q_chunk<kBits>(q_row(w, e, r), w, k0 / kQuantChunk, wv, s, b);
#pragma unroll
  for (int js = 0; js < kQuantChunk / 8; ++js) {
    float q[8];
    decode8<kBits>(wv, js, q);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[8 * js + i] = fmaf(s, q[i], b);
  }
}

// kVecBits 4 or 8 (MLX 4/8-bit experts with 16-byte aligned codes, k % 32 == 0): each
// weight-tile row is one 32-code chunk decoded by one thread (one 16-byte load, one scale and bias) instead
// of weight_at per element (address table, group lookup, scale and bias per value); the values are the same.
template <bool kGlu, int kVecBits = 0, typename ARow, typename Store>
__device__ void tile_gemm(const DevExpertWeights& w, const DevExpertWeights& w2, int e, int m, int64_t n0,
                          ARow a_row, Store store, bool gelu_tanh) {
  static_assert(kTileK == kQuantChunk, "a weight-tile row is one chunk");
  __shared__ float as[kTileM][kTileK + 1], bs[kTileN][kTileK + 1], bs2[kGlu ? kTileN : 1][kTileK + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t n = w.rows, k = w.cols;
  bool vec = false;  // block-uniform
  if constexpr (kVecBits != 0)
    vec = k % kTileK == 0 && (w.ptrs[e] & 15) == 0 && (!kGlu || (w2.ptrs[e] & 15) == 0);
  float acc[2][4] = {}, acc2[2][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    for (int i = tid; i < kTileM * kTileK; i += kTileThreads) {
      const int r = i / kTileK, c = i % kTileK;
      as[r][c] = r < m && k0 + c < k ? a_row(r, k0 + c) : 0.0f;
    }
    if constexpr (kVecBits != 0) {
      if (vec) {
        for (int i = tid; i < (kGlu ? 2 : 1) * kTileN; i += kTileThreads) {
          const bool second = kGlu && i >= kTileN;
          const int r = second ? i - kTileN : i;
          float* dst = second ? &bs2[r][0] : &bs[r][0];
          if (n0 + r < n) {
            decode_row_chunk<kVecBits>(second ? w2 : w, e, n0 + r, k0, dst);
          } else {
#pragma unroll
            for (int c = 0; c < kTileK; ++c) dst[c] = 0.0f;
          }
        }
      }
    }
    if (!vec) {
      for (int i = tid; i < kTileN * kTileK; i += kTileThreads) {
        const int r = i / kTileK, c = i % kTileK;
        const bool ok = n0 + r < n && k0 + c < k;
        bs[r][c] = ok ? weight_at(w, e, n0 + r, k0 + c) : 0.0f;
        if constexpr (kGlu) bs2[r][c] = ok ? weight_at(w2, e, n0 + r, k0 + c) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < kTileK; ++c)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = fmaf(as[ty + 16 * i][c], bs[tx + 16 * j][c], acc[i][j]);
          if constexpr (kGlu) acc2[i][j] = fmaf(as[ty + 16 * i][c], bs2[tx + 16 * j][c], acc2[i][j]);
        }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = ty + 16 * i;
      const int64_t col = n0 + tx + 16 * j;
      if (r >= m || col >= n) continue;
      store(r, col, kGlu ? gated(gelu_tanh, acc[i][j], acc2[i][j]) : acc[i][j]);
    }
}

// act[s, :] = act(gate_e · x[token(s)]) * (up_e · x[token(s)]) for the slots of one tile.
// With kVecBits != 0 the slots' x row offsets are looked up once per block (not per element) and the weight
// tiles decoded a chunk per thread (tile_gemm); the same values either way.
template <typename XT, int kVecBits = 0>
__global__ void __launch_bounds__(kTileThreads)
    tile_gate_up_kernel(const DevMoeExperts a, const XT* x, Plan p, float* act) {
  __shared__ int64_t x_off[kVecBits != 0 ? kTileM : 1];
  int e, s0, m;
  if (!find_tile(p, a.n_experts, blockIdx.x, e, s0, m)) return;
  const int64_t f = a.gate.rows;
  auto store = [&](int r, int64_t col, float v) { act[static_cast<int64_t>(s0 + r) * f + col] = v; };
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  if constexpr (kVecBits != 0) {
    if (threadIdx.x < kTileM)
      x_off[threadIdx.x] =
          threadIdx.x < m ? static_cast<int64_t>(p.sorted[s0 + threadIdx.x] / a.top_k) * a.x.stride : 0;
    __syncthreads();
    auto a_row = [&](int r, int64_t c) { return to_f32(x[x_off[r] + c]); };
    tile_gemm<true, kVecBits>(a.gate, a.up, e, m, n0, a_row, store, a.gelu_tanh);
  } else {
    auto a_row = [&](int r, int64_t c) {
      return to_f32(x[static_cast<int64_t>(p.sorted[s0 + r] / a.top_k) * a.x.stride + c]);
    };
    tile_gemm<true>(a.gate, a.up, e, m, n0, a_row, store, a.gelu_tanh);
  }
}

// y[s, :] = down_e · act[s, :] for the slots of one tile.
template <int kVecBits = 0>
__global__ void __launch_bounds__(kTileThreads)
    tile_down_kernel(const DevMoeExperts a, Plan p, const float* act, float* y) {
  int e, s0, m;
  if (!find_tile(p, a.n_experts, blockIdx.x, e, s0, m)) return;
  const int64_t f = a.down.cols, d = a.down.rows;
  auto a_row = [&](int r, int64_t c) { return act[static_cast<int64_t>(s0 + r) * f + c]; };
  auto store = [&](int r, int64_t col, float v) { y[static_cast<int64_t>(s0 + r) * d + col] = v; };
  tile_gemm<false, kVecBits>(a.down, a.down, e, m, static_cast<int64_t>(blockIdx.y) * kTileN, a_row, store,
                             false);
}

// out[t, c] = sum_j weights[t, j] * y[slot_of[t * top_k + j], c], j in order.
template <typename OT>
__global__ void combine_kernel(const DevMoeExperts a, const int* slot_of, const float* y) {
  const int64_t t = blockIdx.x, d = a.down.rows;
  OT* o = static_cast<OT*>(a.out.data) + t * a.out.stride;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < a.top_k; ++j) {
      const int s = slot_of[t * a.top_k + j];
      if (s >= 0) acc += a.weights[t * a.top_k + j] * y[static_cast<int64_t>(s) * d + c];
    }
    o[c] = from_f32<OT>(acc);
  }
}

std::string experts_desc(const DevMoeExperts& a) {
  return strfmt(" (%lld tokens, top_k %d, %lld experts, d %lld, d_expert %lld)", (long long)a.x.n_rows, a.top_k,
                (long long)a.n_experts, (long long)a.down.rows, (long long)a.gate.rows);
}

bool pow2(int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

// The bits of tile_gemm's chunk-decoded weight tiles for w (and w2, gated with it), or 0 for weight_at per
// element: MLX 4/8-bit with a power-of-two group of >= 32 (code alignment is checked per block), unless the
// test hook asks for weight_at.
int tile_vec_bits(const DevExpertWeights& w, const DevExpertWeights* w2) {
  if (g_per_element.load() || (w.bits != 4 && w.bits != 8) || w.group_size < kQuantChunk ||
      !pow2(w.group_size) || w.cols % w.group_size != 0)
    return 0;
  if (w2 &&
      (w2->bits != w.bits || w2->group_size != w.group_size || w2->dtype != w.dtype || w2->cols != w.cols))
    return 0;
  return w.bits;
}

void run_gemv(cudaStream_t s, const DevMoeExperts& a, float* act) {
  const int64_t n = a.x.n_rows, pairs = n * a.top_k, f = a.gate.rows, d = a.down.rows;
  const dim3 g1(static_cast<unsigned>((f + kWarpsPerBlock - 1) / kWarpsPerBlock),
                static_cast<unsigned>(pairs));
  with_act_type(a.x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    const XT* x = static_cast<const XT*>(a.x.data);
    gemv_gate_up_kernel<XT><<<g1, 32 * kWarpsPerBlock, 0, s>>>(a, x, act);
  });
  check_launch("moe_experts", [&] { return "gate/up" + experts_desc(a); });
  const dim3 g2(static_cast<unsigned>((d + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(n));
  with_act_type(a.out.dtype, [&](auto ot) {
    using OT = typename decltype(ot)::type;
    OT* out = static_cast<OT*>(a.out.data);
    gemv_down_kernel<OT><<<g2, 32 * kWarpsPerBlock, 0, s>>>(a, act, out);
  });
  check_launch("moe_experts", [&] { return "down" + experts_desc(a); });
}

void run_tiles(cudaStream_t s, const DevMoeExperts& a, Plan p, float* act, float* y) {
  const int64_t n = a.x.n_rows, pairs = n * a.top_k, f = a.gate.rows, d = a.down.rows;
  plan_kernel<<<1, kPlanThreads, 0, s>>>(a.ids, pairs, a.n_experts, p);
  check_launch("moe_experts", [&] { return "plan" + experts_desc(a); });
  const unsigned tiles = static_cast<unsigned>((pairs + kTileM - 1) / kTileM + a.n_experts);
  const dim3 g1(tiles, static_cast<unsigned>((f + kTileN - 1) / kTileN));
  const int vec1 = tile_vec_bits(a.gate, &a.up), vec2 = tile_vec_bits(a.down, nullptr);
  with_act_type(a.x.dtype, [&](auto xt) {
    using XT = typename decltype(xt)::type;
    const XT* x = static_cast<const XT*>(a.x.data);
    if (vec1 == 4)
      tile_gate_up_kernel<XT, 4><<<g1, kTileThreads, 0, s>>>(a, x, p, act);
    else if (vec1 == 8)
      tile_gate_up_kernel<XT, 8><<<g1, kTileThreads, 0, s>>>(a, x, p, act);
    else
      tile_gate_up_kernel<XT><<<g1, kTileThreads, 0, s>>>(a, x, p, act);
  });
  check_launch("moe_experts", [&] { return "gate/up tiles" + experts_desc(a); });
  const dim3 g2(tiles, static_cast<unsigned>((d + kTileN - 1) / kTileN));
  if (vec2 == 4)
    tile_down_kernel<4><<<g2, kTileThreads, 0, s>>>(a, p, act, y);
  else if (vec2 == 8)
    tile_down_kernel<8><<<g2, kTileThreads, 0, s>>>(a, p, act, y);
  else
    tile_down_kernel<><<<g2, kTileThreads, 0, s>>>(a, p, act, y);
  check_launch("moe_experts", [&] { return "down tiles" + experts_desc(a); });
  with_act_type(a.out.dtype, [&](auto ot) {
    using OT = typename decltype(ot)::type;
    combine_kernel<OT><<<static_cast<unsigned>(n), 256, 0, s>>>(a, p.slot_of, y);
  });
  check_launch("moe_experts", [&] { return "combine" + experts_desc(a); });
}

}  // namespace

void moe_route(void* stream, const DevMoeRoute& a) {
  const int64_t n = a.logits.n_rows, n_experts = a.logits.n_cols;
  if (n == 0) return;
  const size_t smem = static_cast<size_t>(n_experts) * sizeof(float);
  with_act_type(a.logits.dtype, [&](auto lt) {
    using LT = typename decltype(lt)::type;
    const LT* logits = static_cast<const LT*>(a.logits.data);
    route_kernel<LT><<<static_cast<unsigned>(n), 32, smem, as_stream(stream)>>>(a, logits, n_experts);
  });
  check_launch("moe_route", [&] {
    return strfmt(" (%lld tokens, %lld experts, top_k %d)", (long long)n, (long long)n_experts, a.top_k);
  });
}

void moe_experts(void* stream, const DevMoeExperts& a) {
  const int64_t n = a.x.n_rows, pairs = n * a.top_k, f = a.gate.rows, d = a.down.rows, e = a.n_experts;
  if (n == 0) return;
  const MoePath path = g_path.load();
  const bool gemv = path == MoePath::kGemv || (path == MoePath::kAuto && pairs <= kGemvMaxPairs);
  const cudaStream_t s = as_stream(stream);
  const size_t act_bytes = align_up(static_cast<size_t>(pairs * f) * sizeof(float), 256);
  if (gemv) {
    float* act = static_cast<float*>(scratch(stream, act_bytes, "moe_experts"));
    return run_gemv(s, a, act);
  }
  const size_t y_bytes = align_up(static_cast<size_t>(pairs * d) * sizeof(float), 256);
  const size_t int_bytes = align_up(static_cast<size_t>(2 * (e + 1) + 2 * pairs) * sizeof(int), 256);
  char* base = static_cast<char*>(scratch(stream, act_bytes + y_bytes + int_bytes, "moe_experts"));
  float* act = reinterpret_cast<float*>(base);
  float* y = reinterpret_cast<float*>(base + act_bytes);
  int* ints = reinterpret_cast<int*>(base + act_bytes + y_bytes);
  const Plan p{ints, ints + (e + 1), ints + 2 * (e + 1), ints + 2 * (e + 1) + pairs};
  run_tiles(s, a, p, act, y);
}

void set_moe_path_for_testing(MoePath path) {
  g_path.store(path);
}

void set_moe_tiles_per_element_for_testing(bool on) {
  g_per_element.store(on);
}

}  // namespace bunsen::kernels::cuda
