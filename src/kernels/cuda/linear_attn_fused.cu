// The fused Gated-DeltaNet decode launch (linear_attn_ops.h deltanet_decode_fused): causal conv1d + SiLU,
// the recurrent gated delta rule and the gated RMSNorm of one layer in ONE kernel, for steps whose every run
// is recurrent (decode rows, short runs). One thread-block cluster per (sequence, k-head) of
// ratio x tiles blocks (ratio = n_v / n_k v-heads, tiles = ceil(dv / 32) column tiles); block (v-head, tile)
// keeps delta_rule_kernel's layout (8 warps, its 32 state columns' rows in registers). Not the chunked
// prefill form. Invariants: every conv channel is computed by exactly one block per token (the k-head's 2 dk
// q/k channels split over the cluster and pushed into every block's shared memory; a block's own 32 v
// channels) and its conv state is read and written only by that block; the math is linear_attn.cu's op for
// op (bit-equal conv, l2-norm and state), except the norm's sum of squares, which adds the head's tiles'
// partial sums through distributed shared memory; slot < 0 writes zero output and touches no state.
#include <cooperative_groups.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/linear_attn_common.cuh"
#include "kernels/cuda/linear_attn_ops.h"
#include "kernels/cuda/pdl.cuh"

namespace bunsen::kernels::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace linear_attn;

constexpr int kThreads = kDeltaWarps * 32;
constexpr int kMaxCluster = 8;                              // portable cluster size
constexpr int kMaxQk = 2 * kMaxDeltaHeadDim;                // q and k channels of one k-head
constexpr int kMaxItems = kMaxQk + kDeltaTile;              // conv channels of one block (cluster of 1)
constexpr int kMaxTiles = (kMaxDeltaHeadDim + kDeltaTile - 1) / kDeltaTile;
static_assert(kMaxItems <= 2 * kThreads, "a thread computes at most two conv channels");

// Arrives at the cluster barrier without ordering memory (only "every block has started"), then waits.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

struct FusedSmem {
  float qkraw[kMaxQk];                    // the k-head's q | k conv outputs of the token (written cluster-wide)
  float qk[2][kMaxDeltaHeadDim];          // q, k l2-normalised
  float v[kDeltaTile];                    // this block's v conv outputs of the token
  float part[2][kDeltaWarps][kDeltaTile];  // per-warp partial sums of S^T k, S^T q
  float red[32];
  float ssq[kMaxTiles];                   // the head's tiles' sums of squares of o (written cluster-wide)
  float w[kMaxItems][kMaxConvKernel];     // conv weights of this block's channels
  float win[kMaxItems][kMaxConvKernel - 1];  // their conv windows, oldest first
};

// Grid (cluster, n_k, n_seqs), clusters of gridDim.x = ratio * tiles blocks along x.
__global__ void __launch_bounds__(kThreads, 2) deltanet_fused_kernel(DevDeltaNetFused a, int kernel) {
  __shared__ FusedSmem sm;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), cs = static_cast<int>(cluster.num_blocks());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int dk = a.dk, dv = a.dv, hist = kernel - 1, tiles = (dv + kDeltaTile - 1) / kDeltaTile;
  const int kh = blockIdx.y, s = blockIdx.z, tile = rank % tiles, h = kh * (a.n_v / a.n_k) + rank / tiles;
  const int j = tile * kDeltaTile + lane;
  const bool col = j < dv;
  // This block's conv channels: items [0, n_qk) are q/k channels qk0 + i of the k-head (i < dk: q, else k),
  // items [n_qk, n_items) its v columns tile * 32 + (item - n_qk).
  const int per = (2 * dk + cs - 1) / cs, qk0 = min(rank * per, 2 * dk), n_qk = min(per, 2 * dk - qk0);
  const int n_items = n_qk + min(kDeltaTile, dv - tile * kDeltaTile);
  const int kd = a.n_k * dk, channels = static_cast<int>(a.qkv.n_cols);  // < 2^31: a row of qkv
  auto channel = [&](int item) -> int {
    if (item >= n_qk) return 2 * kd + h * dv + tile * kDeltaTile + (item - n_qk);
    const int i = qk0 + item;
    return (i < dk ? 0 : kd - dk) + kh * dk + i;
  };

  // Prologue on weights only (no earlier kernel writes them): it may overlap the previous kernel's tail.
  for (int it = tid; it < n_items; it += kThreads)
    for (int q = 0; q < kernel; ++q) sm.w[it][q] = load_any(a.conv_w.data, a.conv_w.dtype, channel(it) * a.conv_w.stride + q);
  const float A = -expf(load_any(a.a_log, a.a_log_dtype, h));
  const float bias = load_any(a.dt_bias, a.dt_bias_dtype, h);
  const float nw = col ? load_any(a.norm_w, a.norm_w_dtype, j) : 0.0f;
  pdl_wait();
  pdl_launch_dependents();

  const int32_t t0 = a.meta.seq_starts[s], t1 = a.meta.seq_starts[s + 1];
  if (t0 >= t1) return;  // the whole cluster leaves together: s is the cluster's
  const int32_t slot = a.meta.state_slots[s];
  if (slot < 0) {
    if (warp == 0 && col)
      for (int32_t t = t0; t < t1; ++t) store_any(a.out.data, a.out.dtype, t * a.out.stride + h * dv + j, 0.0f);
    return;
  }
  cluster_arrive_relaxed();  // every block must have started before another writes its shared memory
  const bool fresh = a.meta.positions[t0] == 0;
  float* cst = a.conv_state + static_cast<int64_t>(slot) * channels * hist;
  for (int it = tid; it < n_items; it += kThreads)
    for (int q = 0; q < hist; ++q) sm.win[it][q] = fresh ? 0.0f : cst[channel(it) * hist + q];
  float* gs = a.state + (static_cast<int64_t>(slot) * a.n_v + h) * dk * dv;
  float S[kDeltaRows];
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    S[r] = !fresh && col && i < dk ? gs[i * dv + j] : 0.0f;
  }
  cluster_wait();

  const int head0 = rank - tile;  // rank of this v-head's tile 0
  for (int32_t t = t0; t < t1; ++t) {
    // conv1d + SiLU of this block's channels (conv1d_kernel's formula); q/k go to every block's qkraw.
    for (int it = tid; it < n_items; it += kThreads) {
      const float xt = load_any(a.qkv.data, a.qkv.dtype, t * a.qkv.stride + channel(it));
      float acc = sm.w[it][hist] * xt;
      for (int q = 0; q < hist; ++q) acc += sm.w[it][q] * sm.win[it][q];
      for (int q = 0; q + 1 < hist; ++q) sm.win[it][q] = sm.win[it][q + 1];
      sm.win[it][hist - 1] = xt;
      const float y = silu_f(acc);
      if (it < n_qk) {
        for (int b = 0; b < cs; ++b) *cluster.map_shared_rank(&sm.qkraw[qk0 + it], b) = y;
      } else {
        sm.v[it - n_qk] = y;
      }
    }
    cluster.sync();  // A: the token's q, k (from every block) and v are in shared memory
    l2_store(tid < dk ? sm.qkraw[tid] : 0.0f, dk, a.q_scale, sm.qk[0], sm.red);
    l2_store(tid < dk ? sm.qkraw[dk + tid] : 0.0f, dk, 1.0f, sm.qk[1], sm.red);
    __syncthreads();
    const float decay = expf(A * softplus_f(load_any(a.a.data, a.a.dtype, t * a.a.stride + h) + bias));
    const float beta = sigmoid_f(load_any(a.b.data, a.b.dtype, t * a.b.stride + h));
    sm.part[0][warp][lane] = decay_rows(S, sm.qk[1], warp, dk, decay);
    __syncthreads();
    const float mem = sum_warps(sm.part[0], lane);
    const float vj = col ? sm.v[lane] : 0.0f;
    const float delta = (vj - mem) * beta;
    sm.part[1][warp][lane] = update_rows(S, sm.qk[0], sm.qk[1], warp, dk, delta);
    __syncthreads();
    float o = 0.0f;
    if (warp == 0) {
      o = sum_warps(sm.part[1], lane);
      const float sq = warp_sum(col ? o * o : 0.0f);
      if (lane < tiles) *cluster.map_shared_rank(&sm.ssq[tile], head0 + lane) = sq;
    }
    cluster.sync();  // B: the head's tiles' sums of squares are in every tile's ssq
    if (warp == 0 && col) {
      float ss = 0.0f;
      for (int i = 0; i < tiles; ++i) ss += sm.ssq[i];
      const float inv = rsqrtf(ss / static_cast<float>(dv) + a.eps);
      const int64_t c = static_cast<int64_t>(h) * dv + j;
      const float zv = load_any(a.z.data, a.z.dtype, t * a.z.stride + c);
      store_any(a.out.data, a.out.dtype, t * a.out.stride + c, o * inv * nw * silu_f(zv));
    }
  }
  // No remote access follows the last barrier B: a block may leave now.
  for (int it = tid; it < n_items; it += kThreads)
    for (int q = 0; q < hist; ++q) cst[channel(it) * hist + q] = sm.win[it][q];
#pragma unroll
  for (int r = 0; r < kDeltaRows; ++r) {
    const int i = warp + kDeltaWarps * r;
    if (col && i < dk) gs[i * dv + j] = S[r];
  }
}

}  // namespace

bool deltanet_fused_fits(int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, int64_t kernel) {
  if (n_k < 1 || n_v < n_k || n_v % n_k != 0 || dk < 1 || dv < 1) return false;
  if (dk > kMaxDeltaHeadDim || dv > kMaxDeltaHeadDim || kernel < 2 || kernel > kMaxConvKernel) return false;
  return (n_v / n_k) * ((dv + kDeltaTile - 1) / kDeltaTile) <= kMaxCluster;
}

void deltanet_decode_fused(void* stream, const DevDeltaNetFused& a) {
  const int64_t kernel = a.conv_w.n_cols;
  if (!deltanet_fused_fits(a.n_k, a.n_v, a.dk, a.dv, kernel))
    throw Error("cuda", strfmt("deltanet_decode_fused: n_k %d, n_v %d, dk %d, dv %d, conv kernel %lld do not fit "
                               "the fused kernel", a.n_k, a.n_v, a.dk, a.dv, (long long)kernel));
  if (a.meta.n_seqs == 0) return;
  const int cs = (a.n_v / a.n_k) * ((a.dv + kDeltaTile - 1) / kDeltaTile);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = static_cast<unsigned>(cs);
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cs), static_cast<unsigned>(a.n_k), static_cast<unsigned>(a.meta.n_seqs));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = as_stream(stream);
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  check_cuda(cudaLaunchKernelEx(&cfg, deltanet_fused_kernel, a, static_cast<int>(kernel)), "deltanet_decode_fused", [&] {
    return rows_desc("qkv", a.qkv) + strfmt(", n_k %d, n_v %d, dk %d, dv %d, %lld sequences, clusters of %d", a.n_k,
                                            a.n_v, a.dk, a.dv, (long long)a.meta.n_seqs, cs);
  });
}

}  // namespace bunsen::kernels::cuda
