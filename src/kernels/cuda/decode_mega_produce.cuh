// The persistent decode step's producer warp (decode_mega.cu): every stage of every projection a block
// consumes, and each layer's cached keys and values for its attention tasks, copied into the block's ring in
// consumption order (bulk copies by the TMA, small rows by cp.async). Only decode_mega.cu includes it.
#pragma once
#include <cstdint>

#include "kernels/cuda/decode_mega_common.cuh"

namespace bunsen::kernels::cuda::mega {

// The producer's lane 0 waits for the ring's slot of `item` to be free (SM clocks added to waited) and arms
// its barrier for `bytes`; returns the stage once the warp's lanes may issue their copies onto
// ring.full[item % n].
template <bool kTiming>
__device__ __forceinline__ char* arm_stage(const Ring& ring, unsigned item, unsigned bytes,
                                           long long& waited) {
  const unsigned n = static_cast<unsigned>(ring.n), stage = item % n;
  if ((threadIdx.x & 31) == 0) {
    long long t0 = 0;
    if constexpr (kTiming) t0 = clock64();
    mbar_wait(&ring.empty[stage], ((item / n) & 1u) ^ 1u);
    if constexpr (kTiming) waited += clock64() - t0;
    mbar_arrive_expect_tx(&ring.full[stage], bytes);
    *reinterpret_cast<volatile unsigned*>(ring.seq + stage) = item;
  }
  __syncwarp();
  fence_proxy_async_smem();  // the lanes' earlier cp.async writes before new bulk copies
  return ring.base + static_cast<size_t>(stage) * kStageBytes;
}

// Whether a row of `bytes` bytes reaches its stage by the TMA (one bulk copy onto the stage's transaction
// count) or by the producer's lanes as 16-byte cp.async (the LSU), per MegaArgs::copy_mode: 0 rows under 256
// bytes by the LSU (quantized scales and biases: the TMA takes ~80 ns per copy whatever its size, so 32 tiny
// copies per stage capped the quantized streams near 1.2 TB/s on the H100), 1 every row by the LSU, 2 every
// row by the TMA.
__device__ __forceinline__ bool by_tma(const MegaArgs& a, unsigned bytes) {
  return a.copy_mode == 2 || (a.copy_mode == 0 && bytes >= 256);
}

// Copies n rows of `bytes` (a multiple of 16) into a stage, row i from src(i) to dst + i * pitch (by_tma).
template <typename Src>
__device__ __forceinline__ void copy_rows(const MegaArgs& a, char* dst, int pitch, int n, unsigned bytes,
                                          uint64_t* bar, Src&& src) {
  const int lane = threadIdx.x & 31;
  if (by_tma(a, bytes)) {
    for (int i = lane; i < n; i += 32) bulk_copy_g2s(dst + i * pitch, src(i), bytes, bar);
  } else {
    const int cpr = static_cast<int>(bytes / 16);
    for (int c = lane; c < n * cpr; c += 32) {
      const int i = c / cpr, j = c - i * cpr;
      cp_async_16(dst + i * pitch + j * 16, static_cast<const char*>(src(i)) + j * 16);
    }
  }
}

// Every producer lane's arrival on the stage's full barrier once its cp.async copies have landed (the
// barrier counts 1 + 32 arrivals: lane 0's expect_tx and these).
__device__ __forceinline__ void arrive_copies(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#else
  __trap();
#endif
}

// The attention stages of layer L for this block's tasks (slice_of), kAttnKeys old keys each: stage rows
// 0-15 the keys' K rows, 16-31 their V rows, from the paged cache (written by earlier steps: the copies
// depend on nothing this step computes, so they land while the q/k/v phase runs).
template <bool kTiming>
__device__ void produce_keys(const MegaArgs& a, const MegaLayer& L, const Ring& ring, unsigned& item,
                             int n_splits, long long& waited) {
  const int hd = a.head_dim, pos = a.positions[0], row = attn_row_bytes(hd);
  const int64_t row_elems = static_cast<int64_t>(a.n_kv) * hd;
  for (int t = blockIdx.x; t < a.n_kv * n_splits; t += gridDim.x) {
    const Slice s = slice_of(t, n_splits, pos);
    for (int k0 = 0; k0 < s.n_old; k0 += kAttnKeys, ++item) {
      const unsigned bytes = static_cast<unsigned>(hd * 2);
      char* dst = arm_stage<kTiming>(ring, item, by_tma(a, bytes) ? 2u * kAttnKeys * bytes : 0u, waited);
      uint64_t* full = &ring.full[item % static_cast<unsigned>(ring.n)];
      copy_rows(a, dst, row, 2 * kAttnKeys, bytes, full, [&](int i) {
        const int j = s.j0 + min(k0 + (i & (kAttnKeys - 1)), s.n_old - 1);
        const int64_t sl =
            static_cast<int64_t>(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size;
        return static_cast<const void*>(static_cast<const Bf16*>(i < kAttnKeys ? L.k_cache : L.v_cache) +
                                        sl * row_elems + s.kvh * hd);
      });
      arrive_copies(full);
    }
  }
}

// The producer warp: every stage of every projection this block consumes, in consumption order (the layer's
// attention keys after its q/k/v rows). Lane 0 waits for the stage's slot and arms its barrier, then the
// lanes issue the stage's copies: the R tile rows' part (quantized: codes, scales and biases) and arrive
// once their cp.async copies land. Rows past the matrix re-read its last row (their outputs are dropped).
// The usual stage (a full part, rows by the TMA) takes a fixed share per lane: code row `lane` (lane < R),
// then scale / bias row `lane` (lane < 2R, by the TMA) or up to kSbChunks 16-byte chunks of them (cp.async);
// the shares are set once per phase and their source rows once per tile, so a stage costs each lane a few
// instructions (per-chunk divisions and row lookups had capped the quantized streams near 1.4 TB/s: the
// consumers spun waiting for stages the producer had not yet armed). Other stages (a short last part,
// copy_mode 1) take copy_rows.
constexpr int kSbChunks = 4;  // 2R rows x S sl / 512 chunks = sl / 16 <= 32 x 4 (seg_plan: sl <= kQ4Codes)
template <bool kTiming>
__device__ void produce(const MegaArgs& a, const Ring& ring, int n_splits) {
  const int lane = threadIdx.x & 31;
  unsigned item = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const MegaLayer& L = a.layers[l];
    for (int ph = 0; ph < 4; ++ph) {
      const Geo g = geo(a, ph);
      const int n_i = block_tiles(g);
      long long waited = 0;
      const unsigned full_row = static_cast<unsigned>(a.bits < 16 ? g.kc * a.bits / 8 : g.kc * 2);
      const unsigned full_sb = static_cast<unsigned>(g.kc / 32);
      const bool sb_tma = by_tma(a, full_sb), rows_tma = by_tma(a, full_row);
      // This lane's scale / bias chunks (cp.async): chunk c = lane + 32 q is row c / cpr, bytes 16 (c % cpr).
      const int cpr = static_cast<int>(full_sb / 16);
      int ch_row[kSbChunks], ch_off[kSbChunks];
#pragma unroll
      for (int q = 0; q < kSbChunks; ++q) {
        const int c = lane + 32 * q;
        ch_row[q] = a.bits < 16 && !sb_tma && c < 2 * g.R * cpr ? c / cpr : -1;
        ch_off[q] = ch_row[q] >= 0 ? (c - ch_row[q] * cpr) * 16 : 0;
      }
      for (int i = 0; i < n_i; ++i) {
        const int r0 = tile_row0(g, i);
        // Tile row r's matrix (w) and its row in it (gated: nr gate rows, then the same nr up rows).
        auto row_of = [&](int r, int& w) {
          const int m = g.M == 2 ? r / g.nr : 0;
          int row = min(r0 + r - m * g.nr, g.rows - 1);
          w = matrix_of(a, ph, m, row);
          return static_cast<int64_t>(row);
        };
        // Scale (i < R) or bias row i's first group of the tile's rows.
        auto sb_row = [&](int i) {
          int w;
          const int64_t row = row_of(i & (g.R - 1), w);
          return reinterpret_cast<const char*>(static_cast<const Bf16*>(i < g.R ? L.sc[w] : L.bi[w]) +
                                               row * (g.K / 64));
        };
        const char* my_row = nullptr;  // code row `lane`, from column 0
        const char* my_sb = nullptr;   // (TMA) scale / bias row `lane`
        const char* my_ch[kSbChunks];  // (cp.async) the chunks' rows
        if (lane < g.R) {
          int w;
          const int64_t row = row_of(lane, w);
          my_row = static_cast<const char*>(L.w[w]) + row * g.K * a.bits / 8;
        }
        if (a.bits < 16 && sb_tma && lane < 2 * g.R) my_sb = sb_row(lane);
#pragma unroll
        for (int q = 0; q < kSbChunks; ++q)
          my_ch[q] = ch_row[q] >= 0 ? sb_row(ch_row[q]) + ch_off[q] : nullptr;
        for (int p = 0; p < g.P; ++p, ++item) {
          const int len = min(g.kc, g.K - p * g.kc);
          const int64_t k0 = static_cast<int64_t>(p) * g.kc;
          // Rows of codes (bf16: of weights), then (quantized) R rows of scales and R of biases.
          const unsigned row_bytes = static_cast<unsigned>(a.bits < 16 ? len * a.bits / 8 : len * 2);
          const unsigned sb_bytes = static_cast<unsigned>(len / 32);
          const unsigned tx = (by_tma(a, row_bytes) ? static_cast<unsigned>(g.R) * row_bytes : 0u) +
                              (a.bits < 16 && by_tma(a, sb_bytes) ? 2u * g.R * sb_bytes : 0u);
          char* dst = arm_stage<kTiming>(ring, item, tx, waited);
          uint64_t* full = &ring.full[item % static_cast<unsigned>(ring.n)];
          char* dst_sb = dst + g.R * g.pitch;
          if (len == g.kc && rows_tma) {
            if (lane < g.R) bulk_copy_g2s(dst + lane * g.pitch, my_row + k0 * a.bits / 8, row_bytes, full);
            if (my_sb != nullptr) bulk_copy_g2s(dst_sb + lane * g.sbp, my_sb + k0 / 32, sb_bytes, full);
#pragma unroll
            for (int q = 0; q < kSbChunks; ++q)
              if (my_ch[q] != nullptr)
                cp_async_16(dst_sb + ch_row[q] * g.sbp + ch_off[q], my_ch[q] + k0 / 32);
          } else {
            copy_rows(a, dst, g.pitch, g.R, row_bytes, full, [&](int r) {
              int w;
              const int64_t row = row_of(r, w);
              return static_cast<const void*>(static_cast<const unsigned char*>(L.w[w]) +
                                              (row * g.K + k0) * a.bits / 8);
            });
            if (a.bits < 16)
              copy_rows(a, dst_sb, g.sbp, 2 * g.R, sb_bytes, full,
                        [&](int i) { return static_cast<const void*>(sb_row(i) + k0 / 32); });
          }
          arrive_copies(full);
        }
      }
      if (ph == kQkv && !(a.debug & 1)) produce_keys<kTiming>(a, L, ring, item, n_splits, waited);
      if constexpr (kTiming) {
        if (lane == 0) {
          record(a, l, kWaitFree + ph, static_cast<unsigned long long>(waited));
          record(a, l, kIssued + ph, global_ns());
        }
      }
    }
  }
}

}  // namespace bunsen::kernels::cuda::mega
