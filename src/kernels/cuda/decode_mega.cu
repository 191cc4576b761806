// The persistent batch-1 decode step (decode_mega.h): one block per SM runs every layer of a llama-like
// model for one token. Why: at batch 1 the per-op kernels leave the memory idle between launches (each
// phase after the q/k/v GEMV is a dependent round trip of 2-3.5 us, docs/PERFORMANCE.md), while the
// weights, ~all of the bytes, depend on nothing. Here a producer warp per block copies the block's weight
// rows of every projection of every layer, and each layer's cached keys and values for the block's attention
// tasks, in the order the block consumes them, into a ring of 19 KB stages (cp.async.bulk onto a per-stage
// mbarrier), and only stops when the ring is full; the 8 consumer warps wait for the grid-wide barrier of
// each phase (q/k/v -> attention -> o -> gate/up -> down) and find the next phase's weights already landed.
// Phases of a layer (tasks dealt round-robin over the blocks, blockIdx.x first):
//   A q/k/v: h = bf16(rms_norm(x) * in_norm) computed by every block into shared memory; rows of [q; k; v]
//     -> bf16 q/k/v buffers.
//   B attention: (kv head, key slice) tasks on the tensor cores (q heads as MMA rows); the old keys and
//   values
//     came through the ring during phase A (they depend on nothing this step computes); q and the new key
//     rotated (RoPE table of the step), the new key and value written into the paged cache by the slice that
//     holds the position; per q head the slice's (max, sum, unnormalised acc) into `partials`.
//     The block that finishes a kv head's last slice merges its q heads' slices into bf16 attn (a counter
//     per layer and kv head), so no grid barrier separates the slices from the merge.
//   C o-projection: x[row] += bf16(o . attn) * residual (each row owned by one task).
//   D gate/up: h = bf16(rms_norm(x) * post_norm); act = bf16(silu(gate . h) * (up . h)).
//   E down: x[row] += bf16(down . act) * residual.
// Work split: a projection is cut into tiles of 16 rows (gate/up: 8 gate rows and the same 8 up rows) over
// K in parts of kBfCols columns (bf16) or kQ4Codes / kQ8Codes codes, one ring stage per (tile, part); or,
// where K allows (seg_plan, MegaArgs::segs), tiles of 16 / S rows whose parts are S segments of one row, so
// each row is one longer copy; every form runs on the tensor cores (mma.m16n8k16). Warp w of a block takes
// the block's stages w, w + 8, ..., so consecutive stages are read by different warps at once; a tile's parts
// meet in shared memory in part order (tile_add), and the warp adding the last part emits the rows. No stage
// needs a block synchronisation. Every output's summation order depends on the shapes and the grid size only,
// not on timing (not bit-identical to the per-op kernels: different orders). Invariants: grid = SM count, one
// block per SM (the shared-memory ring enforces it), so every block is resident and the spin barriers cannot
// deadlock; data another block wrote in this launch is read with ld.global.cg (L2), never through L1 or the
// non-coherent path; the producer never waits on a phase barrier (weights are read-only, and the cached keys
// it copies were written by earlier steps), only on its ring's free slots.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/decode_mega.h"
#include "kernels/cuda/decode_mega_attention.cuh"
#include "kernels/cuda/decode_mega_common.cuh"
#include "kernels/cuda/decode_mega_produce.cuh"
#include "kernels/cuda/decode_mega_stages.cuh"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda {
namespace {
using namespace mega;  // the shared state, producer, attention phase and stages (decode_mega_*.cuh)

__device__ __forceinline__ unsigned ld_acquire_shared(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(smem_u32(p)) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_shared(unsigned* p, unsigned v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(smem_u32(p)), "r"(v) : "memory");
}

// Adds part p of P of tile `tile` (lanes with t == 0: rows g in c0, g + 8 in c2) to the tile's sum, in part
// order (a warp waits for the part before its own: the same sum for any timing), and returns true with the
// totals in c0 / c2 for the last part (the slot is freed). Parts p and p + 1 are consecutive items, so other
// warps: the wait only ever points at lower items and cannot deadlock.
__device__ __forceinline__ bool tile_add(Scratch& sc, int tile, int p, int P, float& c0, float& c2) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, slot = tile % kTileSlots;
  if (lane == 0)
    while (ld_acquire_shared(&sc.tile_parts[slot]) != static_cast<unsigned>(p)) {
    }
  __syncwarp();
  if ((lane & 3) == 0) {
    volatile float* sum = sc.tile_sum[slot];
    if (p > 0) {
      c0 = sum[gq] + c0;
      c2 = sum[gq + 8] + c2;
    }
    if (p + 1 < P) {
      sum[gq] = c0;
      sum[gq + 8] = c2;
    }
  }
  __syncwarp();
  if (lane == 0) st_release_shared(&sc.tile_parts[slot], p + 1 < P ? static_cast<unsigned>(p + 1) : 0u);
  return p + 1 == P;
}

// One stage's dots in the phase's form (form = S * 32 + bits; Geo): lanes t == 0 return rows g (x) and g + 8
// (y) of the tile (gated: gate row g, its up row).
__device__ __forceinline__ float2 stage_dot(int form, const char* st, int pitch, int sbp, const Bf16* vec,
                                            const float* gsum, const float* gback, int k0, int len) {
  const auto* sq = reinterpret_cast<const unsigned char*>(st);
  const auto* xv = reinterpret_cast<const uint4*>(vec);
  float c0, c2;
  switch (form) {
    case 32 + 8:
      stage_dot_q<8>(sq, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 32 + 4:
      stage_dot_q<4>(sq, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 32 + 16:
      stage_dot_bf16(st, vec, k0, len, c0, c2);
      break;
    case 64 + 8:
      stage_dot_q_seg<2, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 128 + 8:
      stage_dot_q_seg<4, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 256 + 8:
      stage_dot_q_seg<8, 8>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 64 + 4:
      stage_dot_q_seg<2, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 128 + 4:
      stage_dot_q_seg<4, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 256 + 4:
      stage_dot_q_seg<8, 4>(sq, pitch, sbp, xv, gsum, gback, k0, len, c0, c2);
      break;
    case 64 + 16:
      stage_dot_bf16_seg<2>(st, pitch, vec, k0, len, c0, c2);
      break;
    case 128 + 16:
      stage_dot_bf16_seg<4>(st, pitch, vec, k0, len, c0, c2);
      break;
    default:
      stage_dot_bf16_seg<8>(st, pitch, vec, k0, len, c0, c2);
      break;
  }
  return make_float2(c0, c2);
}

// Consumes this block's stages of one projection phase: warp w takes the block's items w, w + 8, ... (item =
// tile x P + part; consecutive items go to different warps, so the ring's stages are read in parallel), sums
// a tile's parts in order (tile_add) and, for the tile's last part, writes the rows from the lanes holding
// them (q/k/v: bf16 q, k, v; o and down: the residual add into x; gate/up: act = silu(gate) * up). `item`:
// the block's first stage of the phase (stages count through the step, as the producer counts them);
// returns the phase's stage count. waited: the timing instance's warp 0 adds its SM clocks waiting for
// staged data (else nullptr). The kernel calls it from one site, so each kernel instance holds one inlined
// copy of the twelve stage forms (inlined per phase they grew the binaries by ~9 MB compressed; a non-inlined
// consume, its shared-memory pointers generic, measured 6-20 % slower).
__device__ __forceinline__ unsigned consume(const MegaArgs& a, int ph, const Ring& ring, unsigned item,
                                            const Bf16* vec, const float* gsum, Scratch& sc,
                                            long long* waited) {
  const Geo g = geo(a, ph);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2;
  const int qd = a.n_heads * a.head_dim, kvd = a.n_kv * a.head_dim;
  const int n_items = block_tiles(g) * g.P;
  auto emit = [&](int r, float v, float u) {
    if (ph == kQkv) {
      Bf16* dst = r < qd         ? static_cast<Bf16*>(a.q) + r
                  : r < qd + kvd ? static_cast<Bf16*>(a.k) + (r - qd)
                                 : static_cast<Bf16*>(a.v) + (r - qd - kvd);
      *dst = __float2bfloat16_rn(v);
    } else if (ph == kGateUp) {
      static_cast<Bf16*>(a.act)[r] = __float2bfloat16_rn(v / (1.0f + expf(-v)) * u);
    } else {
      a.x[r] = fmaf(bf(v), a.residual, __ldcg(a.x + r));
    }
  };
  for (int j = warp; j < n_items; j += kConsumerWarps) {
    const int i = j / g.P, p = j - i * g.P, k0 = p * g.kc, len = min(g.kc, g.K - k0);
    const unsigned it = item + static_cast<unsigned>(j);
    const long long t0 = waited != nullptr ? clock64() : 0;
    const char* st = wait_item(ring, it);
    if (waited != nullptr) *waited += clock64() - t0;
    const float2 c = stage_dot(g.S * 32 + a.bits, st, g.pitch, g.sbp, vec, gsum, gback_of(a, gsum), k0,
                               g.S == 1 ? len : g.sl);
    float c0 = c.x, c2 = c.y;
    release_item(ring, it);
    if (g.P > 1 && !tile_add(sc, i, p, g.P, c0, c2)) continue;
    // Lanes t == 0 hold rows gq (c0) and gq + 8 (c2) of the tile (gated: gate row gq in c0, its up row in
    // c2).
    if ((lane & 3) == 0 && gq < g.nr) {
      const int r0 = tile_row0(g, i);
      if (g.M == 2) {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, c2);
      } else {
        if (r0 + gq < g.rows) emit(r0 + gq, c0, 0.0f);
        if (gq + 8 < g.nr && r0 + 8 + gq < g.rows) emit(r0 + 8 + gq, c2, 0.0f);
      }
    }
  }
  return static_cast<unsigned>(n_items);
}

// Stores chunk c (8 consecutive values, already bf16) of the input vector: as they are (bits 16), in the
// 4-bit codes' pair order (qmma::perm4), or (8-bit) as f16 scaled by the group's 2^s (qmma::group_shift) with
// 2^-s in gback; quantized: the sum of each group of 64 (8 chunks: 8 consecutive lanes, since chunk c is
// thread c % 256's) in gsum. Every consumer lane calls it (the shuffles); ok: c is a chunk.
__device__ __forceinline__ void put_chunk(int bits, bool ok, int c, uint4 u, Bf16* vec, float* gsum,
                                          float* gback) {
  if (bits < 16) {
    float f[8], s, mx;
    qmma::bf16x8_group_stats<8>(u, f, s, mx);
    if (bits == 8) {
      const int sh = qmma::group_shift(mx);
      u = qmma::half8_scaled(f, qmma::pow2(sh));
      if (ok && (c & 7) == 0) gback[c >> 3] = qmma::pow2(-sh);
    } else {
      u = qmma::perm4(u);
    }
    if (ok && (c & 7) == 0) gsum[c >> 3] = s;
  }
  if (ok) reinterpret_cast<uint4*>(vec)[c] = u;
}

// vec = bf16(rms_norm(x) * w) over d, by the consumers (x read from L2: other blocks wrote it).
__device__ void norm_into(const MegaArgs& a, const void* w, Bf16* vec, float* gsum, Scratch& sc) {
  const int n8 = a.d / 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < n8; c += kConsumers) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8 + h * 4));
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
  }
  ss = warp_sum(ss);
  if (lane == 0) sc.red[warp] = ss;
  consumer_sync();
  float tot = 0.0f;
#pragma unroll
  for (int i = 0; i < kConsumerWarps; ++i) tot += sc.red[i];
  const float inv = 1.0f / sqrtf(tot / static_cast<float>(a.d) + a.eps);
  for (int base = 0; base < n8; base += kConsumers) {
    const int c = base + static_cast<int>(threadIdx.x);
    const bool ok = c < n8;
    uint32_t h[4] = {0, 0, 0, 0};
    if (ok) {
      const float4 v0 = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8));
      const float4 v1 = __ldcg(reinterpret_cast<const float4*>(a.x + c * 8 + 4));
      const float xs[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      float y[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int j = c * 8 + i;
        const float wv =
            a.norm_bf16 ? __bfloat162float(static_cast<const Bf16*>(w)[j]) : static_cast<const float*>(w)[j];
        y[i] = xs[i] * inv * wv;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = qmma::pack_bf16x2(y[2 * i], y[2 * i + 1]);
    }
    put_chunk(a.bits, ok, c, make_uint4(h[0], h[1], h[2], h[3]), vec, gsum, gback_of(a, gsum));
  }
  consumer_sync();  // vec complete; sc.red free
}

// vec = the n bf16 values at src (another block's output: from L2). Each thread issues up to kVecBatch chunk
// loads before it stores any (put_chunk's shared-memory stores would otherwise order each next L2 load after
// them: the 8B's 14,336-wide activation took 7 dependent L2 trips, ~4.8 us per layer); MegaArgs::vec_batch 1:
// one at a time (the A/B's base).
constexpr int kVecBatch = 8;
__device__ void load_vec(const MegaArgs& a, const void* src, int n, Bf16* vec, float* gsum) {
  const int n8 = n / 8, tid = static_cast<int>(threadIdx.x);
  if (a.vec_batch <= 1) {
    for (int base = 0; base < n8; base += kConsumers) {
      const int c = base + tid;
      const uint4 u = c < n8 ? __ldcg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
      put_chunk(a.bits, c < n8, c, u, vec, gsum, gback_of(a, gsum));
    }
    consumer_sync();
    return;
  }
  for (int base = 0; base < n8; base += kConsumers * kVecBatch) {
    uint4 u[kVecBatch];
#pragma unroll
    for (int b = 0; b < kVecBatch; ++b) {
      const int c = base + b * kConsumers + tid;
      u[b] = c < n8 ? __ldcg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kVecBatch; ++b) {
      const int c = base + b * kConsumers + tid;
      // uniform: every consumer lane calls put_chunk (its shuffles) for a block of chunks
      if (base + b * kConsumers < n8) put_chunk(a.bits, c < n8, c, u[b], vec, gsum, gback_of(a, gsum));
    }
  }
  consumer_sync();
}

template <int kHd, bool kTiming>
__global__ void __launch_bounds__(kThreads, 1)
    decode_mega_kernel(const __grid_constant__ MegaArgs a, int n_stages, int n_splits, int vec_bytes) {
  extern __shared__ __align__(128) char smem[];
  Ring ring{smem, nullptr, nullptr, nullptr, n_stages};
  Bf16* vec = reinterpret_cast<Bf16*>(smem + static_cast<size_t>(n_stages) * kStageBytes);
  float* gsum = reinterpret_cast<float*>(vec + vec_elems(a));  // quantized: the group sums of vec (gback_of)
  Scratch& sc = *reinterpret_cast<Scratch*>(smem + static_cast<size_t>(n_stages) * kStageBytes + vec_bytes);
  ring.full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&sc) + sizeof(Scratch));
  ring.empty = ring.full + n_stages;
  ring.seq = reinterpret_cast<unsigned*>(ring.empty + n_stages);
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) {
      mbar_init(&ring.full[s], 33);  // the producer's lane 0 (expect_tx), then each lane's arrive_copies
      mbar_init(&ring.empty[s], 1);  // the consuming warp
      ring.seq[s] = ~0u;
    }
    for (unsigned& n : sc.tile_parts) n = 0;
  }
  if (threadIdx.x < a.rotary_dim / 2) {
    float sn, c;
    sincosf(static_cast<float>(a.positions[0]) * a.inv_freq[threadIdx.x], &sn, &c);
    sc.rope_cs[threadIdx.x] = c * a.rope_scaling;
    sc.rope_cs[kMegaMaxRotary / 2 + threadIdx.x] = sn * a.rope_scaling;
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    produce<kTiming>(a, ring, n_splits);
    return;
  }
  unsigned* sync = counters_of(a);
  unsigned arrivals = 0;
  const bool t0 = kTiming && threadIdx.x == 0;
  // The grid barrier ending a phase: slot_done records the block's consumers done, slot_done + 1 the barrier
  // passed (timing instance).
  auto barrier = [&](int l, int slot_done) {
    if (a.debug & 2) return consumer_sync();
    grid_arrive(sync);
    if (t0) record(a, l, slot_done, global_ns());
    ++arrivals;
    grid_wait(sync, arrivals * gridDim.x);
    if (t0) record(a, l, slot_done + 1, global_ns());
  };
  long long waited[5] = {0, 0, 0, 0, 0};  // the projection phases, then the attention keys
  auto wait_acc = [&](int ph) -> long long* { return kTiming && threadIdx.x < 32 ? &waited[ph] : nullptr; };
  unsigned item = 0;
  const int qd = a.n_heads * a.head_dim;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    // The four projection phases through one consume call site (one inlined copy of the stage forms per
    // kernel instance), each after its input: the normed x, the attention, the normed x, the activation.
#pragma unroll 1
    for (int ph = kQkv; ph <= kDown; ++ph) {
      if (ph == kQkv) {
        if (t0) record(a, l, kStart, global_ns());
        norm_into(a, L.in_norm, vec, gsum, sc);
        if (t0) record(a, l, kNorm1, global_ns());
      } else if (ph == kO) {
        if (!(a.debug & 1)) {
          attention<kHd>(a, L, ring, item, sync + 64 + l * a.n_heads, n_splits, reinterpret_cast<char*>(vec),
                         sc, wait_acc(4));
          barrier(l, kAttnDone);
        }
        load_vec(a, a.attn, qd, vec, gsum);
        if (t0) record(a, l, kOLoaded, global_ns());
      } else if (ph == kGateUp) {
        norm_into(a, L.post_norm, vec, gsum, sc);
        if (t0) record(a, l, kNorm2, global_ns());
      } else {
        load_vec(a, a.act, a.d_ff, vec, gsum);
        if (t0) record(a, l, kActLoaded, global_ns());
      }
      item += consume(a, ph, ring, item, vec, gsum, sc, wait_acc(ph));
      const int done = ph == kQkv ? kQkvDone : ph == kO ? kODone : ph == kGateUp ? kGuDone : kDownDone;
      if (ph != kDown || l + 1 < a.n_layers) {
        barrier(l, done);
      } else if (t0) {
        record(a, l, kDownDone, global_ns());
      }
    }
    if (t0) {
      for (int ph = 0; ph < 4; ++ph)
        record(a, l, kWaitData + ph, static_cast<unsigned long long>(waited[ph]));
      record(a, l, kWaitKeys, static_cast<unsigned long long>(waited[4]));
    }
    if constexpr (kTiming)
      for (long long& w : waited) w = 0;
  }
}

// The input vector, its group sums (4-bit), or the attention phase's scratch: they take turns.
int vec_bytes_of(const MegaArgs& a) {
  const int n = vec_elems(a);
  const int grp = a.n_heads / a.n_kv;
  const int attn = (grp * a.head_dim + 2 * a.head_dim + kConsumerWarps * grp * (a.head_dim + 2)) * 4;
  return (std::max(n * 2 + 2 * (n / 64 + 1) * 4, attn) + 127) / 128 * 128;
}

int splits_of(const MegaArgs& a) {
  return std::clamp(sm_count() / std::max(a.n_kv, 1), 1, kMegaMaxSplits);
}

using Kernel = void (*)(MegaArgs, int, int, int);

template <bool kTiming>
Kernel kernel_of(int head_dim) {
  switch (head_dim) {
    case 16:
      return decode_mega_kernel<16, kTiming>;
    case 32:
      return decode_mega_kernel<32, kTiming>;
    case 64:
      return decode_mega_kernel<64, kTiming>;
    case 128:
      return decode_mega_kernel<128, kTiming>;
    case 256:
      return decode_mega_kernel<256, kTiming>;
    default:
      return nullptr;
  }
}
Kernel kernel_of(const MegaArgs& a) {
  return a.timing != nullptr ? kernel_of<true>(a.head_dim) : kernel_of<false>(a.head_dim);
}

// Dynamic shared memory for n stages.
size_t smem_bytes(const MegaArgs& a, int n) {
  return static_cast<size_t>(n) * kStageBytes + vec_bytes_of(a) + sizeof(Scratch) + 2 * n * sizeof(uint64_t) +
         n * sizeof(unsigned);
}

int stages_of(const MegaArgs& a) {
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()),
             "decode_mega", [] { return std::string("shared memory limit"); });
  int n = kMaxStages;
  while (n > 2 && smem_bytes(a, n) > static_cast<size_t>(optin)) --n;
  return smem_bytes(a, n) <= static_cast<size_t>(optin) ? n : 0;
}

// The timing record (mega_timing_buffer): one device buffer for the process, written to a file at exit.
struct TimingRecord {
  unsigned long long* dev = nullptr;
  int64_t words = 0, grid = 0, n_layers = 0;
  std::string path;
};
TimingRecord& timing_record() {
  static TimingRecord r;
  return r;
}
// Writes the last step's record: four int64 (grid, layers, slots per layer, SM clock kHz), then the words.
void write_timing() {
  TimingRecord& r = timing_record();
  if (r.dev == nullptr || cudaDeviceSynchronize() != cudaSuccess) return;
  std::vector<unsigned long long> host(static_cast<size_t>(r.words));
  if (cudaMemcpy(host.data(), r.dev, host.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, current_device());
  const int64_t head[4] = {r.grid, r.n_layers, kMegaTimingSlots, khz};
  if (FILE* f = std::fopen(r.path.c_str(), "wb")) {
    std::fwrite(head, sizeof head, 1, f);
    std::fwrite(host.data(), 8, host.size(), f);
    std::fclose(f);
  }
}

}  // namespace

unsigned long long* mega_timing_buffer(const MegaArgs& a, const std::string& path) {
  TimingRecord& r = timing_record();
  const int64_t words = static_cast<int64_t>(sm_count()) * a.n_layers * kMegaTimingSlots;
  if (r.dev == nullptr) {
    check_cuda(cudaMalloc(&r.dev, static_cast<size_t>(words) * 8), "decode_mega",
               [] { return std::string("timing record"); });
    check_cuda(cudaMemset(r.dev, 0, static_cast<size_t>(words) * 8), "decode_mega",
               [] { return std::string("timing record"); });
    r.words = words;
    r.path = path;
    std::atexit(write_timing);
  }
  if (words > r.words) return nullptr;  // a larger model later in the process: not recorded
  r.grid = sm_count();
  r.n_layers = a.n_layers;
  return r.dev;
}

bool mega_supported(const MegaArgs& a) {
  int major = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()),
             "decode_mega", [] { return std::string("compute capability"); });
  const int grp = a.n_kv > 0 ? a.n_heads / a.n_kv : 0;
  return major >= 9 && kernel_of(a) != nullptr && grp >= 1 && grp <= 8 && a.n_heads % a.n_kv == 0 &&
         a.n_layers >= 1 && a.n_layers <= kMegaMaxLayers && a.rotary_dim <= a.head_dim &&
         a.rotary_dim <= kMegaMaxRotary && a.d % 16 == 0 && a.d_ff % 16 == 0 &&
         (a.n_heads * a.head_dim) % 16 == 0 && stages_of(a) >= 4;
}

void decode_mega(void* stream, const MegaArgs& a) {
  const char* op = "decode_mega";
  auto detail = [&] {
    return strfmt("%d layers, d %d, heads %d/%d x %d, d_ff %d", a.n_layers, a.d, a.n_heads, a.n_kv,
                  a.head_dim, a.d_ff);
  };
  const Kernel k = kernel_of(a);
  const int n = stages_of(a);
  if (k == nullptr || n < 4) throw Error("cuda", std::string(op) + ": unsupported shape: " + detail());
  const size_t bytes = smem_bytes(a, n);
  check_cuda(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
             op, detail);
  auto* s = static_cast<cudaStream_t>(stream);
  unsigned* sync = counters_of(a);
  check_cuda(cudaMemsetAsync(sync, 0, sizeof(unsigned) * mega_counters(a.n_heads), s), op, detail);
  k<<<sm_count(), kThreads, bytes, s>>>(a, n, splits_of(a), vec_bytes_of(a));
  check_launch(op, detail);
}

}  // namespace bunsen::kernels::cuda
