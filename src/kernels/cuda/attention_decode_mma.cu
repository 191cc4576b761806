// The tensor-core flash-decoding slice kernel (head_dim 64/128, bf16 q, bf16 cache, <= 8 query heads per kv
// head): each warp takes 16-key tiles of its slice in turn, streams their K and V rows through a private
// 3-stage cp.async ring in shared memory (16-byte chunks, XOR-swizzled for conflict-free ldmatrix), and
// computes S = Q·Kᵀ (query heads as the 16 MMA rows, 8 of them at most used) and O += P·V with
// mma.m16n8k16 in f32. P is split into bf16 hi + lo parts (two MMAs) so P·V keeps ~f32 accuracy. The
// online softmax runs on the S fragments in the log2 domain, as the SIMT kernel's. Not for f32 q (not exact
// in bf16) or other head dims: attention_decode.cu's SIMT kernel takes those. Invariants: masks as ref; a
// visible key with an invalid block id is a NaN row of K (never read from global memory).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "kernels/cuda/attention_decode_common.cuh"

namespace bunsen::kernels::cuda::decode {
namespace {

constexpr int kTile = 16;   // keys per warp tile
constexpr int kStages = 3;  // cp.async ring depth per warp

template <int kD>
struct MmaShape {
  static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = kD * 2;
  static constexpr int kMatBytes = kTile * kRowBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kMatBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kPerLane = kTile * kChunks / 32;  // chunks each lane copies per matrix
  static constexpr size_t kRing = size_t{kWarps} * kWarpBytes;
  static constexpr size_t kRed = size_t{kWarps} * 8 * (kD + 2) * sizeof(float);
  static constexpr size_t kSmem = kRing > kRed ? kRing : kRed;
};

// Byte offset of 16-byte chunk c of row r in a tile: chunks XOR-swizzled by row, so the 8 rows of an
// ldmatrix phase hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk, int row_bytes) {
  return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// c += A·B for a 16x16 A whose rows 8..15 are zero (a0: row g cols 2t.., a2: row g cols 2t+8..).
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(Bf16 lo, Bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | static_cast<uint32_t>(__bfloat16_as_ushort(hi))
                                                               << 16;
}

// (x, y) as bf16 pairs hi + lo with hi + lo == (x, y) to ~2^-17 relative.
__device__ __forceinline__ void split(float x, float y, uint32_t& hi, uint32_t& lo) {
  const Bf16 hx = __float2bfloat16_rn(x), hy = __float2bfloat16_rn(y);
  hi = pack(hx, hy);
  lo = pack(__float2bfloat16_rn(x - __bfloat162float(hx)), __float2bfloat16_rn(y - __bfloat162float(hy)));
}

template <int kD>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(const DecodeArgs a) {
  using S = MmaShape<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  const Where w = where_am_i(a);
  allow_combine_launch();
  if (!w.live) return;  // uniform over the block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3, G = a.group;
  uint32_t qa[kD / 16][2];  // A fragments of Q: head gq of the group, dims kd*16 + 2tq (+8)
  {
    const Bf16* q = static_cast<const Bf16*>(a.q) + w.t * a.q_ts + (w.g * G + min(gq, G - 1)) * a.q_hs;
    const Bf16 zero = __float2bfloat16_rn(0.0f);
#pragma unroll
    for (int kd = 0; kd < kD / 16; ++kd)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int d = kd * 16 + half * 8 + 2 * tq;
        qa[kd][half] = gq < G ? pack(q[d], q[d + 1]) : pack(zero, zero);
      }
  }
  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // row gq; l sums this lane's keys only (the quad adds up at the end)
  const Bf16* kc = static_cast<const Bf16*>(a.k_cache) + w.g * a.k_s2;
  const Bf16* vc = static_cast<const Bf16*>(a.v_cache) + w.g * a.v_s2;
  const bool seq_ok = w.seq >= 0 && w.seq < a.n_seqs;
  const int32_t* table = a.block_tables + (seq_ok ? static_cast<int64_t>(w.seq) * a.table_stride : 0);
  const int base0 = w.k0 + warp * kTile, stride = kWarps * kTile;
  const int n_it = base0 < w.k1 ? (w.k1 - base0 + stride - 1) / stride : 0;  // warp-uniform
  unsigned char* ring = smem + warp * S::kWarpBytes;
  // Block ids of the rows this lane copies for tile `it` (-1: past the slice or invalid). Looked up one
  // tile ahead of the copies, so the table's latency hides behind a tile of compute.
  auto lookup = [&](int it, int(&blk)[S::kPerLane]) {
#pragma unroll
    for (int i = 0; i < S::kPerLane; ++i) {
      const int key = base0 + it * stride + (i * 32 + lane) / S::kChunks;
      int off = 0;
      blk[i] = it < n_it && key < w.k1 ? block_of(a, table, seq_ok, key, off) : -1;
    }
  };
  auto issue = [&](int it, const int(&blk)[S::kPerLane]) {  // one commit group per call (empty past the end)
    if (it < n_it) {
      unsigned char* ks = ring + (it % kStages) * S::kStageBytes;
      unsigned char* vs = ks + S::kMatBytes;
#pragma unroll
      for (int i = 0; i < S::kPerLane; ++i) {
        const int idx = i * 32 + lane, row = idx / S::kChunks, c = idx % S::kChunks;
        const int key = base0 + it * stride + row;
        const int bi = a.block_shift >= 0 ? key >> a.block_shift : key / a.block_size;
        const int off = key - bi * a.block_size;
        unsigned char* kd = ks + swz(row, c, S::kRowBytes);
        unsigned char* vd = vs + swz(row, c, S::kRowBytes);
        if (key < w.k1 && blk[i] < 0) {
          *reinterpret_cast<uint4*>(kd) =
              make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u);  // NaN
          *reinterpret_cast<uint4*>(vd) = make_uint4(0u, 0u, 0u, 0u);
        } else {
          const bool ok = blk[i] >= 0;
          cp_async16(kd, ok ? kc + blk[i] * a.k_s0 + off * a.k_s1 + c * 8 : a.k_cache, ok ? 16 : 0);
          cp_async16(vd, ok ? vc + blk[i] * a.v_s0 + off * a.v_s1 + c * 8 : a.v_cache, ok ? 16 : 0);
        }
      }
    }
    cp_async_commit();
  };
  int blk[S::kPerLane];
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    lookup(i, blk);
    issue(i, blk);
  }
  lookup(kStages - 1, blk);
  const float qk_scale = a.scale * kLog2e;
  const int mi = lane >> 3, r8 = lane & 7;  // ldmatrix: this lane addresses row r8 of matrix mi
  for (int it = 0; it < n_it; ++it) {
    cp_async_wait<kStages - 2>();  // this lane's copies of tile `it` have landed
    __syncwarp();                  // ... and every other lane's; all lanes are done with tile it - 1
    issue(it + kStages - 1, blk);  // refills the stage of tile it - 1
    int next[S::kPerLane];
    lookup(it + kStages, next);  // in flight while this tile computes
    const unsigned char* ks = ring + (it % kStages) * S::kStageBytes;
    const unsigned char* vs = ks + S::kMatBytes;
    float sc[2][4] = {};  // S tiles of keys 0-7 and 8-15: c0, c1 = head gq, keys 2tq, 2tq + 1
#pragma unroll
    for (int kd = 0; kd < kD / 16; ++kd) {
      uint32_t b[4];  // K rows (keys 0-7 | 8-15) x dims (kd*16 + 0-7 | 8-15)
      ldsm_x4(b, ks + swz((mi >> 1) * 8 + r8, kd * 2 + (mi & 1), S::kRowBytes));
      mma(sc[0], qa[kd][0], qa[kd][1], b[0], b[1]);
      mma(sc[1], qa[kd][0], qa[kd][1], b[2], b[3]);
    }
    const int key0 = base0 + it * stride + 2 * tq;
    float p[2][2], tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = sc[nt][e];
        x = a.softcap > 0.0f ? a.softcap * tanhf(x * a.scale / a.softcap) * kLog2e : x * qk_scale;
        p[nt][e] = key0 + nt * 8 + e < w.k1 ? x : -INFINITY;
        tmax = fmaxf(tmax, p[nt][e]);  // ignores NaN: it poisons l and o, not m
      }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 2));
    const float mx = fmaxf(m, tmax), alpha = rescale(m, mx);
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      o[i][0] *= alpha;
      o[i][1] *= alpha;
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[nt][e] = p[nt][e] == -INFINITY ? 0.0f : exp2f(p[nt][e] - mx);
        l += p[nt][e];
      }
    m = mx;
    uint32_t ph0, pl0, ph2, pl2;  // A fragments of P (keys 2tq.. | 8 + 2tq..), hi and lo parts
    split(p[0][0], p[0][1], ph0, pl0);
    split(p[1][0], p[1][1], ph2, pl2);
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t b[4];  // V rows (keys 0-7 | 8-15) x dims (dp*16 + 0-7 | 8-15), transposed
      ldsm_x4_trans(b, vs + swz((mi & 1) * 8 + r8, dp * 2 + (mi >> 1), S::kRowBytes));
      mma(o[2 * dp], ph0, ph2, b[0], b[1]);
      mma(o[2 * dp + 1], ph0, ph2, b[2], b[3]);
      mma(o[2 * dp], pl0, pl2, b[0], b[1]);
      mma(o[2 * dp + 1], pl0, pl2, b[2], b[3]);
    }
#pragma unroll
    for (int i = 0; i < S::kPerLane; ++i) blk[i] = next[i];
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the shared memory becomes `red`
  float* red = reinterpret_cast<float*>(smem);
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  if (gq < G) {
    float* r = red + (warp * 8 + gq) * (kD + 2);
    if (tq == 0) {
      r[0] = m;
      r[1] = l;
    }
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      r[2 + dn * 8 + 2 * tq] = o[dn][0];
      r[2 + dn * 8 + 2 * tq + 1] = o[dn][1];
    }
  }
  write_block<8, kD>(a, red, w);
}

// Raises the kernel's dynamic shared memory limit and asks for the largest shared-memory carveout (so
// two 96 KB blocks fit one SM), once per device.
template <int kD>
void prepare(const void* kernel) {
  static std::atomic<uint64_t> done{0};
  const int dev = current_device();
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load() & bit) != 0) return;
  allow_dynamic_smem(kernel, MmaShape<kD>::kSmem, "paged_attention");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared),
             "paged_attention", [] { return std::string("(shared memory carveout)"); });
  done.fetch_or(bit);
}

template <int kD>
void launch_head_dim(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  constexpr size_t kSmem = MmaShape<kD>::kSmem;
  auto kernel = decode_mma_kernel<kD>;
  prepare<kD>(reinterpret_cast<const void*>(kernel));
  kernel<<<dim3(a.n_tokens, n_kv_heads, a.n_splits), kThreads, kSmem, s>>>(a);
}

}  // namespace

int mma_blocks_per_sm(int head_dim) {
  const size_t smem = head_dim == 64 ? MmaShape<64>::kSmem : MmaShape<128>::kSmem;
  return std::max(1, static_cast<int>((227u << 10) / (smem + 1024)));
}

void launch_decode_mma(cudaStream_t s, const DecodeArgs& a, int n_kv_heads) {
  if (a.head_dim == 64)
    launch_head_dim<64>(s, a, n_kv_heads);
  else
    launch_head_dim<128>(s, a, n_kv_heads);
}

}  // namespace bunsen::kernels::cuda::decode
