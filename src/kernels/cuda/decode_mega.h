// The persistent batch-1 decode step of a llama-like model (decode_mega.cu): every layer's q/k/v, RoPE and
// cache write, attention, o-projection, gated MLP and residual adds in one launch of one block per SM, with
// a producer warp per block streaming the block's weight rows into a shared-memory ring (bulk copies) for
// as far ahead as the ring allows, across the grid-wide barriers where the consumers wait for each other's
// results. Host-visible description only (plain C++17, no CUDA types); dispatch_decode_fused.cpp validates.
// Invariants: one token (one sequence); bf16 weights (K % 16 == 0) or MLX affine 4- or 8-bit weights (one
// width for every matrix) with group 64 and bf16 scales / biases (K % 512 == 0), no biases, rows contiguous;
// a bf16 paged cache (not quantized), full attention, head_dim 16 or a multiple of 32 up to 256; n_heads %
// n_kv_heads == 0 with at most 8 q heads per kv head.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace bunsen::kernels::cuda {

constexpr int kMegaMaxLayers = 64;
constexpr int kMegaMaxSplits = 32;   // key slices per kv head
constexpr int kMegaMaxRotary = 256;  // rotary_dim
constexpr int kMegaTimingSlots = 32;  // timing words per (block, layer)

struct MegaLayer {
  // q, k, v, o, gate, up, down: bf16 [out, in] with contiguous rows, or (MegaArgs::bits 4 | 8) MLX affine
  // codes [out, in * bits / 32] u32 with bf16 scales and biases [out, in / 64] in sc / bi
  const void* w[7];
  const void* sc[7];
  const void* bi[7];
  const void* in_norm;
  const void* post_norm;
  void* k_cache;  // [n_blocks, block_size, n_kv, head_dim] bf16
  void* v_cache;
  int rope;  // 1: this layer rotates q and k
};

struct MegaArgs {
  MegaLayer layers[kMegaMaxLayers];
  int n_layers = 0, d = 0, n_heads = 0, n_kv = 0, head_dim = 0, d_ff = 0;
  int norm_bf16 = 0;  // norm weights bf16 (else f32)
  int bits = 16;      // 16: bf16 weights; 4 or 8: MLX affine group-64 weights (in % 512 == 0)
  float eps = 1e-6f, residual = 1.0f, scale = 1.0f, rope_scaling = 1.0f;
  int rotary_dim = 0;
  float inv_freq[kMegaMaxRotary / 2] = {};
  float* x = nullptr;  // [d] f32 residual stream, updated in place
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;
  const int32_t* block_table = nullptr;  // row 0
  int block_size = 0;
  void* q = nullptr;     // [n_heads * head_dim] bf16
  void* k = nullptr;     // [n_kv * head_dim] bf16
  void* v = nullptr;     // [n_kv * head_dim] bf16
  void* attn = nullptr;  // [n_heads * head_dim] bf16
  void* act = nullptr;   // [d_ff] bf16
  // Timing experiments only (BUNSEN_DECODE_FUSED_DEBUG, wrong results): bit 0 skips the attention phase,
  // bit 1 the grid-barrier waits.
  int debug = 0;
  // How stage rows are copied (decode_mega_produce.cuh's by_tma; BUNSEN_DECODE_FUSED_COPY): 0 rows under 256 bytes by
  // cp.async and the rest by the TMA, 1 all by cp.async, 2 all by the TMA.
  int copy_mode = 0;
  // The most segments per stage row (1, 2, 4 or 8; BUNSEN_DECODE_FUSED_SEGS; the dispatch's default: bf16 8,
  // quantized 1): a projection whose input width allows it streams R = 16 / S rows of S segments per stage,
  // one copy of S times the bytes per row (decode_mega_stages.cuh's seg_plan); 1: every stage 16 rows of one
  // part.
  int segs = 8;
  // Chunks of an input vector each thread loads from L2 before storing any (BUNSEN_DECODE_FUSED_VEC_BATCH; 1:
  // one at a time, the form before 2026-12-06's twenty-third session; any other value: 8).
  int vec_batch = 8;
  // When set (BUNSEN_DECODE_FUSED_TIMING): the timing instance runs and records, per block and layer,
  // kMegaTimingSlots 64-bit values (decode_mega_common.cuh's Slot: phase ends on %globaltimer, waits in SM clocks).
  unsigned long long* timing = nullptr;
  float* partials = nullptr;  // mega_scratch_floats(n_heads, head_dim) f32, then the counters (mega_counters)
};

// f32 elements of MegaArgs::partials for a model: the key-slice partials, then mega_counters(n_heads) 32-bit
// counters (the grid barrier, then one per layer and kv head: slices done).
inline int64_t mega_counters(int64_t n_heads) {
  return 64 + kMegaMaxLayers * n_heads;
}
inline int64_t mega_scratch_floats(int64_t n_heads, int64_t head_dim) {
  return n_heads * kMegaMaxSplits * (head_dim + 2) + mega_counters(n_heads);
}

// Whether this device runs the kernel (sm_90+, enough shared memory for its ring and vectors).
bool mega_supported(const MegaArgs& a);
// Launches the step on `stream` (zeroes the barrier first). Throws Error("cuda", ...) on a CUDA failure.
void decode_mega(void* stream, const MegaArgs& a);
// BUNSEN_DECODE_FUSED_TIMING=FILE (a diagnostic; docs/PERFORMANCE.md): the device buffer for
// MegaArgs::timing, allocated once per process; the last step's record is written to `path` at exit (four
// int64: grid, layers, slots per layer, SM clock kHz; then the words). Null where the buffer is too small (a
// larger model than the first one).
unsigned long long* mega_timing_buffer(const MegaArgs& a, const std::string& path);

}  // namespace bunsen::kernels::cuda
