// The backend-neutral op API. Every op takes an explicit Context and Tensor views, checks dtypes and
// shapes (errors name the op and the shapes), and routes by the tensors' device to cpu/ or cuda/;
// BUNSEN_KERNELS=ref routes CPU calls to the naive references in ref/ instead.
// Not an owner of memory: outputs are preallocated by the caller. Activations are f32 on CPU (f32 or
// bf16 on CUDA); weights stay in their file dtype (f32/f16/bf16) and are converted inside the kernels.
// A 2-D "rows" tensor may have any row stride but its last dim must be contiguous.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace bunsen::kernels {

// Passed to every op: where CPU work runs and which CUDA stream CUDA work is enqueued on.
struct Context {
  ThreadPool* pool = nullptr;   // nullptr: ThreadPool::global()
  void* cuda_stream = nullptr;  // cudaStream_t; nullptr: the legacy default stream
};

// Rotary embedding table for one attention kind. inv_freq comes from model/ (all HF scaling variants
// resolve to inv_freq + attention_scaling). Rotation is HF's rotate_half ("neox") on the first
// rotary_dim dims of each head; dims past rotary_dim pass through.
struct RopeParams {
  const float* inv_freq = nullptr;  // [rotary_dim / 2] f32, host memory
  int rotary_dim = 0;               // even, <= head_dim
  float attention_scaling = 1.0f;   // cos and sin are multiplied by this (yarn / longrope)
};

// One layer's paged cache: slot s lives at block s / block_size, offset s % block_size.
// Unquantized (bits == 0): k and v hold the rows as f32|bf16. Affine-quantized (bits 4 or 8, the
// --kv-quant schemes; CPU only): k and v hold the codes of each row, head_dim * bits / 8 bytes (int4: two
// codes per byte, element 2i in the low nibble), and k_params / v_params hold, per (block, offset, kv head)
// and per group of group_size consecutive head_dim elements, the f32 pair (scale, bias): element d =
// fmaf(scale[d / group_size], code[d], bias[d / group_size]). kv_write quantizes; attention dequantizes.
struct PagedKv {
  Tensor k;         // [n_blocks, block_size, n_kv_heads, head_dim] f32|bf16, or [..., row_bytes] u8 codes
  Tensor v;         // same as k
  Tensor k_params;  // [n_blocks, block_size, n_kv_heads, 2 * head_dim / group_size] f32 (scale, bias)...
  Tensor v_params;  // same as k_params; both empty when bits == 0
  int bits = 0;        // 0 (unquantized), 4 or 8
  int group_size = 0;  // divides head_dim; (group_size * bits) % 8 == 0

  PagedKv() = default;
  PagedKv(Tensor k_, Tensor v_) : k(k_), v(v_) {}  // unquantized
  PagedKv(Tensor k_, Tensor v_, Tensor k_params_, Tensor v_params_, int bits_, int group_size_)
      : k(k_), v(v_), k_params(k_params_), v_params(v_params_), bits(bits_), group_size(group_size_) {}

  bool quantized() const { return bits > 0; }
  int64_t head_dim() const { return bits > 0 ? k.dim(3) * 8 / bits : k.dim(3); }
};

// Attention metadata shared by all layers of one step (a "varlen" batch: tokens of several sequences).
struct AttentionMeta {
  Tensor positions;     // [n_tokens] i32, position of each token in its sequence
  Tensor seq_index;     // [n_tokens] i32, row of block_tables for each token
  Tensor block_tables;  // [n_seqs, max_blocks_per_seq] i32, physical block ids (-1 = unused)
  Tensor slot_mapping;  // [n_tokens] i64, cache slot each token's K/V is written to (< 0: skip)
};

struct AttentionParams {
  float scale = 1.0f;      // multiplies q·k
  int sliding_window = 0;  // 0 = full causal; else key positions p with q_pos - p < window are visible
  float softcap = 0.0f;    // 0 = off; else scores = softcap * tanh(scores / softcap)
};

// An MLX affine-quantized weight matrix [n, k] (mode "affine"): row j holds k codes of `bits` bits as one
// little-endian bit stream (code c in bits [c*bits, (c+1)*bits), 3/5/6-bit codes may straddle words), and
// element (j, c) = fmaf(scales[j, c / group_size], code, biases[j, c / group_size]) in f32 (MLX's
// w = scale * q + bias). bits in {2,3,4,5,6,8}, group_size in {32,64,128}, k % group_size == 0.
struct QuantWeight {
  Tensor packed;  // [n, k * bits / 32] u32
  Tensor scales;  // [n, k / group_size] f32|f16|bf16
  Tensor biases;  // [n, k / group_size] same dtype as scales
  int bits = 0;
  int group_size = 0;

  bool empty() const { return packed.empty(); }
  int64_t rows() const { return packed.dim(0); }
  int64_t cols() const { return bits > 0 ? packed.dim(1) * 32 / bits : 0; }
  // Rows [begin, end): views, no copy (the split of a fused projection).
  QuantWeight slice_rows(int64_t begin, int64_t end) const {
    return {packed.slice(0, begin, end), scales.slice(0, begin, end), biases.slice(0, begin, end), bits,
            group_size};
  }
};

// out[i, :] = table[ids[i], :] * scale.   out [n, d] f32; table [vocab, d] f32|f16|bf16; ids [n] i32.
void embedding(Context& ctx, Tensor out, Tensor table, Tensor ids, float scale = 1.0f);

// embedding with a quantized table: out[i, :] = dequant(table)[ids[i], :] * scale.   out [n, d] f32;
// table [vocab, d] quantized; ids [n] i32. CPU only.
void embedding_q(Context& ctx, Tensor out, const QuantWeight& table, Tensor ids, float scale = 1.0f);

// out = x / sqrt(mean(x^2) + eps) * (w + w_offset).   out, x [n, d] f32 (out may alias x); w [d] any float.
void rms_norm(Context& ctx, Tensor out, Tensor x, Tensor w, float eps, float w_offset = 0.0f);

// x += y * scale.   x, y [n, d] f32.
void add_scaled(Context& ctx, Tensor x, Tensor y, float scale = 1.0f);

// The residual add fused with the next norm: x += y * y_scale; out = rms_norm(x) * (w + w_offset).
// x [n, d] f32 (updated in place); y [n, d]; out [n, d] (must not alias x or y); w [d] any float. On the CPU
// it is exactly add_scaled then rms_norm; on CUDA one kernel that keeps the row in registers.
void add_rms_norm(Context& ctx, Tensor out, Tensor x, Tensor y, Tensor w, float eps, float y_scale = 1.0f,
                  float w_offset = 0.0f);

// x *= s.   x [n, d] f32.
void scale(Context& ctx, Tensor x, float s);

// out = x · wᵀ (+ bias).   out [m, n] f32; x [m, k] f32; w [n, k] f32|f16|bf16 (row stride = k);
// bias [n] any float or empty.
void linear(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor bias = {});

// linear with a quantized weight: out = x · dequant(w)ᵀ (+ bias), dequantized inside the dot product with
// f32 accumulation.   out [m, n] f32; x [m, k] f32; w [n, k] quantized; bias [n] any float or empty.
// Batch invariant like linear: a row's result does not depend on m. CPU only (CUDA: an Error).
void linear_q(Context& ctx, Tensor out, Tensor x, const QuantWeight& w, Tensor bias = {});

// out = dequant(w).   out [n, k] f32 (tests, tools; the hot paths never materialize it).
void dequantize(Context& ctx, Tensor out, const QuantWeight& w);

// In-place rotary embedding.   x [n_tokens, n_heads, head_dim] f32 (row-contiguous per token);
// positions [n_tokens] i32.
void rope(Context& ctx, Tensor x, Tensor positions, const RopeParams& p);

// Writes k/v rows into the paged cache at slot_mapping.   k, v [n_tokens, n_kv_heads, head_dim] f32.
void kv_write(Context& ctx, const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping);

// Causal GQA attention of each query token over its sequence's cached keys [0, pos] (already written
// by kv_write for this step).   out, q [n_tokens, n_heads, head_dim] f32; n_heads % n_kv_heads == 0.
void paged_attention(Context& ctx, Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p);

// out = silu(gate) * up.   out, gate, up [m, f] f32 (gate/up may be column slices of one fused tensor).
void silu_mul(Context& ctx, Tensor out, Tensor gate, Tensor up);

// Row-wise softmax in place.   x [m, n] f32.
void softmax(Context& ctx, Tensor x);

// Index of the row maximum (first one on ties; NaN never wins; -1 when the row is all NaN).
//   out [m] i32; x [m, n] f32.
void argmax(Context& ctx, Tensor out, Tensor x);

// out[r, :] = x[rows[r], :] (the rows whose logits a step wants).   out [n_out, d], x [n, d] f32 (f32|bf16
// on CUDA; dtypes may differ there); rows [n_out] i32 on the tensors' device, each in [0, n).
void gather_rows(Context& ctx, Tensor out, Tensor x, Tensor rows);

// Which implementation CPU calls go to: "cpu-avx512", "cpu-avx2", "cpu-scalar" or "ref".
const char* cpu_backend_name();

}  // namespace bunsen::kernels
