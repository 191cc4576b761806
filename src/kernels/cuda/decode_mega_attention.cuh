// The persistent decode step's attention phase (decode_mega.cu): per (kv head, key slice) task, q and the
// new key rotated, the new key and value written into the paged cache, the slice's old keys (staged by the
// producer) on the tensor cores with an online softmax, its partials out; the last slice of a kv head merges
// them into bf16 attn. Only decode_mega.cu includes it.
#pragma once
#include <cstdint>

#include "kernels/cuda/decode_mega_common.cuh"
#include "kernels/cuda/gemv_qmma_tiles.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/rope_math.cuh"

namespace bunsen::kernels::cuda::mega {

// A bf16 value another block wrote in this launch (from L2).
__device__ __forceinline__ Bf16 ldcg_bf16(const Bf16* p) {
  return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}

// Element i of the rotated (or plain) bf16 head row src[hd], rounded to bf16: the first rotary_dim dims
// rotate as rotate_half pairs (rope_math.cuh) by the step's table, the rest pass.
__device__ __forceinline__ Bf16 rope_elem(const MegaArgs& a, const Scratch& sc, const Bf16* src, int i,
                                          bool rope) {
  const int half = a.rotary_dim / 2;
  if (!rope || i >= 2 * half) return ldcg_bf16(src + i);
  const int j = i < half ? i : i - half;
  const float2 y =
      rotate_values(__bfloat162float(ldcg_bf16(src + j)), __bfloat162float(ldcg_bf16(src + j + half)),
                    sc.rope_cs[j], sc.rope_cs[kMegaMaxRotary / 2 + j]);
  return __float2bfloat16_rn(i < half ? y.x : y.y);
}

// The q heads [h0, h0 + n) merge their slices into bf16 attn (each slice's max and sum loaded once): run by
// the block that finished a kv head's last slice (every slice's partials are in L2 by then).
static __device__ void merge_heads(const MegaArgs& a, int h0, int n, int n_splits) {
  const int hd = a.head_dim;
  for (int i = threadIdx.x; i < n * hd; i += kConsumers) {
    const int h = h0 + i / hd, dd = i % hd;
    const float* p = a.partials + static_cast<int64_t>(h) * n_splits * (hd + 2);
    float ms[kMegaMaxSplits], ls[kMegaMaxSplits], vs[kMegaMaxSplits];
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) {
      ms[s] = s < n_splits ? __ldcg(p + s * (hd + 2)) : -INFINITY;
      ls[s] = s < n_splits ? __ldcg(p + s * (hd + 2) + 1) : 0.0f;
      vs[s] = s < n_splits ? __ldcg(p + s * (hd + 2) + 2 + dd) : 0.0f;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) mx = fmaxf(mx, ms[s]);
    float lsum = 0.0f, v = 0.0f;
#pragma unroll
    for (int s = 0; s < kMegaMaxSplits; ++s) {
      if (ms[s] == -INFINITY) continue;
      const float w = expf(ms[s] - mx);
      lsum = fmaf(w, ls[s], lsum);
      v = fmaf(w, vs[s], v);
    }
    static_cast<Bf16*>(a.attn)[static_cast<int64_t>(h) * hd + dd] = __float2bfloat16_rn(v / lsum);
  }
}

// Phase B: the (kv head, key slice) tasks (slice_of) on the tensor cores, FlashAttention-style with the
// block's q heads of the kv head as the MMA rows (rows >= grp zero): warp w takes the task's stages w, w + 8,
// ... (kAttnKeys old keys each, landed during the q/k/v phase), S = q K^T (K rows through ldmatrix), an
// online softmax per row, P rounded to bf16 (its row sum taken of the rounded values) times V
// (ldmatrix.trans). The slice holding pos rotates the new key, writes it and its value into the cache, and
// one warp adds it to its state in f32. The warps' states merge in shared memory in warp order, then the
// slice's (max, sum, unnormalised acc) per q head goes to `partials`; the block finishing a kv head's last
// slice merges them.
template <int kHd>
__device__ void attention(const MegaArgs& a, const MegaLayer& L, const Ring& ring, unsigned& item,
                          unsigned* done, int n_splits, char* smem, Scratch& sc, long long* waited) {
  constexpr int kK = kHd / 16, kN = kHd / 8;
  const int grp = a.n_heads / a.n_kv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
            t4 = lane & 3;
  const int pos = a.positions[0], row = attn_row_bytes(kHd);
  const int64_t slot = a.slot_mapping[0];
  const bool rope = L.rope != 0;
  float* qs = reinterpret_cast<float*>(smem);  // [grp][hd]
  float* kn = qs + grp * kHd;                  // [hd]
  float* vn = kn + kHd;                        // [hd]
  float* ws = vn + kHd;                        // [warps][grp][hd + 2]
  const Bf16* qb = static_cast<const Bf16*>(a.q);
  const Bf16* kb = static_cast<const Bf16*>(a.k);
  const Bf16* vb = static_cast<const Bf16*>(a.v);
  Bf16* kcache = static_cast<Bf16*>(L.k_cache);
  Bf16* vcache = static_cast<Bf16*>(L.v_cache);
  const int64_t row_elems = static_cast<int64_t>(a.n_kv) * kHd;
  // ldmatrix addresses: lane l names row l % 8 of matrix l / 8. K (B of q K^T, k = dims, n = keys): matrices
  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15); V (.trans, B
  // of P V, k = keys, n = dims): (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, 8-15), (8-15, 8-15).
  const int mi = lane >> 3, rr = lane & 7;
  const int k_off = (rr + 8 * (mi >> 1)) * row + (mi & 1) * 16;
  const int v_off = (kAttnKeys + rr + 8 * (mi & 1)) * row + (mi >> 1) * 16;
  for (int t = blockIdx.x; t < a.n_kv * n_splits; t += gridDim.x) {
    const Slice s = slice_of(t, n_splits, pos);
    const int kvh = s.kvh, ns = (s.n_old + kAttnKeys - 1) / kAttnKeys;
    for (int i = threadIdx.x; i < grp * kHd; i += kConsumers)
      qs[i] = __bfloat162float(
          rope_elem(a, sc, qb + static_cast<int64_t>(kvh * grp + i / kHd) * kHd, i % kHd, rope));
    if (s.has_new) {
      for (int i = threadIdx.x; i < 2 * kHd; i += kConsumers) {
        const int dd = i % kHd;
        const int64_t off = static_cast<int64_t>(kvh) * kHd;
        const Bf16 b = i < kHd ? rope_elem(a, sc, kb + off, dd, rope) : ldcg_bf16(vb + off + dd);
        (i < kHd ? kn : vn)[dd] = __bfloat162float(b);
        if (slot >= 0) (i < kHd ? kcache : vcache)[slot * row_elems + off + dd] = b;
      }
    }
    consumer_sync();
    uint32_t qa[kK][2];  // A fragments of q (row g: head g of the kv head's group)
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float* q = qs + g * kHd + 16 * k + 2 * t4;
      qa[k][0] = g < grp ? qmma::pack_bf16x2(q[0], q[1]) : 0u;
      qa[k][1] = g < grp ? qmma::pack_bf16x2(q[8], q[9]) : 0u;
    }
    float m = -INFINITY, l = 0.0f, acc[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int si = warp; si < ns; si += kConsumerWarps) {
      const unsigned it = item + static_cast<unsigned>(si);
      const long long t0 = waited != nullptr ? clock64() : 0;
      const char* st = wait_item(ring, it);
      if (waited != nullptr) *waited += clock64() - t0;
      const int count = min(kAttnKeys, s.n_old - si * kAttnKeys);
      float sf[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        uint32_t r[4];
        ldsm_x4(r, st + k_off + k * 32);
        qmma::mma_bf16(sf[0], qa[k][0], 0u, qa[k][1], 0u, r[0], r[1]);
        qmma::mma_bf16(sf[1], qa[k][0], 0u, qa[k][1], 0u, r[2], r[3]);
      }
      // Row g's logits of keys 8 n + 2 t4 + e (n: the key tile) in sv[2 n + e]; masked past count.
      float sv[4], mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = (i >> 1) * 8 + 2 * t4 + (i & 1);
        sv[i] = key < count ? sf[i >> 1][i & 1] * a.scale : -INFINITY;
        mx = fmaxf(mx, sv[i]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m, mx), corr = expf(m - m_new);
      const uint32_t pa0 = qmma::pack_bf16x2(expf(sv[0] - m_new), expf(sv[1] - m_new));
      const uint32_t pa2 = qmma::pack_bf16x2(expf(sv[2] - m_new), expf(sv[3] - m_new));
      const float psum = __uint_as_float(pa0 << 16) + __uint_as_float(pa0 & 0xffff0000u) +
                         __uint_as_float(pa2 << 16) + __uint_as_float(pa2 & 0xffff0000u);
      l = fmaf(l, corr, psum);
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] *= corr;
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        uint32_t r[4];
        ldsm_x4_trans(r, st + v_off + k * 32);
        qmma::mma_bf16(acc[2 * k], pa0, 0u, pa2, 0u, r[0], r[1]);
        qmma::mma_bf16(acc[2 * k + 1], pa0, 0u, pa2, 0u, r[2], r[3]);
      }
      m = m_new;
      release_item(ring, it);
    }
    if (s.has_new && warp == ns % kConsumerWarps) {  // the new key, in f32
      float s_new = -INFINITY;
      for (int h = 0; h < grp; ++h) {
        float d = 0.0f;
        for (int i = lane; i < kHd; i += 32) d = fmaf(qs[h * kHd + i], kn[i], d);
        d = warp_sum(d) * a.scale;
        if (h == g) s_new = d;
      }
      if (g < grp) {
        const float m_new = fmaxf(m, s_new), corr = expf(m - m_new), p = expf(s_new - m_new);
        l = fmaf(l, corr, t4 == 0 ? p : 0.0f);
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          acc[n][0] = fmaf(acc[n][0], corr, p * vn[n * 8 + 2 * t4]);
          acc[n][1] = fmaf(acc[n][1], corr, p * vn[n * 8 + 2 * t4 + 1]);
        }
        m = m_new;
      }
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < grp) {
      float* w = ws + (warp * grp + g) * (kHd + 2);
      if (t4 == 0) {
        w[0] = m;
        w[1] = l;
      }
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        w[2 + n * 8 + 2 * t4] = acc[n][0];
        w[2 + n * 8 + 2 * t4 + 1] = acc[n][1];
      }
    }
    item += static_cast<unsigned>(ns);
    consumer_sync();
    for (int i = threadIdx.x; i < grp * (kHd + 2); i += kConsumers) {
      const int h = i / (kHd + 2), c = i % (kHd + 2);
      float mx = -INFINITY;
      for (int w = 0; w < kConsumerWarps; ++w) mx = fmaxf(mx, ws[(w * grp + h) * (kHd + 2)]);
      float v = 0.0f;
      if (c == 0) {
        v = mx;
      } else if (mx != -INFINITY) {
        for (int w = 0; w < kConsumerWarps; ++w) {
          const float* r = ws + (w * grp + h) * (kHd + 2);
          if (r[0] != -INFINITY) v = fmaf(expf(r[0] - mx), r[c], v);
        }
      }
      a.partials[(static_cast<int64_t>(kvh * grp + h) * n_splits + s.sp) * (kHd + 2) + c] = v;
    }
    consumer_sync();  // this block's partials written; qs / ws free
    if (threadIdx.x == 0) {
      __threadfence();
      sc.last = atomicAdd(done + kvh, 1u) == static_cast<unsigned>(n_splits - 1);
    }
    consumer_sync();
    if (sc.last) merge_heads(a, kvh * grp, grp, n_splits);  // every slice of this kv head is in
  }
}

}  // namespace bunsen::kernels::cuda::mega
