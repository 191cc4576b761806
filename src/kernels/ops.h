// The backend-neutral op API. Every op takes an explicit Context and Tensor views, checks dtypes and
// shapes (errors name the op and the shapes), and routes by the tensors' device to cpu/ or cuda/;
// BUNSEN_KERNELS=ref routes CPU calls to the naive references in ref/ instead.
// Not an owner of memory: outputs are preallocated by the caller. Activations are f32 on CPU (f32 or
// bf16 on CUDA); weights stay in their file dtype (f32/f16/bf16) and are converted inside the kernels.
// A 2-D "rows" tensor may have any row stride but its last dim must be contiguous.
#pragma once
#include <cstdint>
#include <span>

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
// --kv-quant schemes; CPU and CUDA): k and v hold the codes of each row, head_dim * bits / 8 bytes (int4: two
// codes per byte, element 2i in the low nibble), and k_params / v_params hold, per (block, offset, kv head)
// and per group of group_size consecutive head_dim elements, the f32 pair (scale, bias): element d =
// fmaf(scale[d / group_size], code[d], bias[d / group_size]). fp8 (bits 8): code[d] is an e4m3 byte and
// element d = fmaf(scale, e4m3 value, 0) (kv_quant.h). kv_write quantizes; attention dequantizes.
struct PagedKv {
  Tensor k;         // [n_blocks, block_size, n_kv_heads, head_dim] f32|bf16, or [..., row_bytes] u8 codes
  Tensor v;         // same as k
  Tensor k_params;  // [n_blocks, block_size, n_kv_heads, 2 * head_dim / group_size] f32 (scale, bias)...
  Tensor v_params;  // same as k_params; both empty when bits == 0
  int bits = 0;        // 0 (unquantized), 4 or 8
  int group_size = 0;  // divides head_dim; (group_size * bits) % 8 == 0
  bool fp8 = false;    // bits 8 only: e4m3 codes with (scale, 0) params instead of affine ones (kv_quant.h)

  PagedKv() = default;
  PagedKv(Tensor k_, Tensor v_) : k(k_), v(v_) {}  // unquantized
  PagedKv(Tensor k_, Tensor v_, Tensor k_params_, Tensor v_params_, int bits_, int group_size_, bool fp8_ = false)
      : k(k_), v(v_), k_params(k_params_), v_params(v_params_), bits(bits_), group_size(group_size_), fp8(fp8_) {}

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
  // A hint, no effect on results: memory the caller reads right after this op (the o-projection's weights).
  // A CUDA flash-decoding launch with a combine kernel asks L2 to fetch up to BUNSEN_L2_PREFETCH MB of it
  // while the slices run (the DRAM is nearly idle then). Empty: nothing.
  Tensor prefetch_next;
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

// embedding with a quantized table: out[i, :] = dequant(table)[ids[i], :] * scale.   out [n, d] f32 (f32|bf16
// on CUDA); table [vocab, d] quantized; ids [n] i32.
void embedding_q(Context& ctx, Tensor out, const QuantWeight& table, Tensor ids, float scale = 1.0f);

// out = x / sqrt(mean(x^2) + eps) * (w + w_offset).   out, x [n, d] f32 (out may alias x); w [d] any float.
void rms_norm(Context& ctx, Tensor out, Tensor x, Tensor w, float eps, float w_offset = 0.0f);

// x += y * scale.   x, y [n, d] f32.
void add_scaled(Context& ctx, Tensor x, Tensor y, float scale = 1.0f);

// The residual add fused with the next norm: x = x_in + y * y_scale; out = rms_norm(x) * (w + w_offset).
// x [n, d] f32 (updated in place when x_in is empty, else written from x_in [n, d] f32, which must not
// overlap x); y [n, d]; out [n, d] (must not alias x or y); w [d] any float. On the CPU it is exactly (a
// copy of x_in into x, then) add_scaled then rms_norm; on CUDA one kernel that keeps the row in registers.
void add_rms_norm(Context& ctx, Tensor out, Tensor x, Tensor y, Tensor w, float eps, float y_scale = 1.0f,
                  float w_offset = 0.0f, Tensor x_in = {});

// The residual add and norm in front of a fused decode projection (the `pre` of linear_qkv_rope_kv and
// linear_swiglu): x_out = x_in + y * y_scale, then the projection's input is rms_norm(x_out) * (w + w_offset)
// -- add_rms_norm(x, x_out, y, w, eps, y_scale, w_offset, x_in) with x the projection's input buffer. On
// CUDA unless fused_norm_enabled(true) says no, where the fused GEMV applies (bf16 weights and x, m <= 2,
// d <= 4096), every block computes the norm from x_in and y into shared memory (the same bits as
// add_rms_norm) and one block writes x_out, so x_in and x_out are two buffers (ping-pong) and x itself is not
// written; elsewhere add_rms_norm runs first (x written).
// Post-norm form (Gemma's post-attention / post-feed-forward norms), y_w given: x_out = (x_in + rms_norm(y) *
// (y_w + w_offset)) * x_scale, the norm's product rounded to y's dtype -- post_norm_residual's bits, with
// y_scale 1; y is unspecified afterwards (the CPU form normalises it in place).
struct AddRmsNorm {
  Tensor x_in, y, x_out;  // [m, d]: x_in, x_out f32, not overlapping; y f32|bf16
  Tensor w;               // [d] any float
  float eps = 1e-6f, y_scale = 1.0f, w_offset = 0.0f;
  Tensor y_w{};          // [d] any float, or empty: y is added as it is
  float x_scale = 1.0f;  // post-norm form only
};
// p's unfused form: add_rms_norm(out, p.x_out, p.y, p.w, p.eps, p.y_scale, p.w_offset, p.x_in); the post-norm
// form copies x_in into x_out, then post_norm_residual({x_out, y, y_w, out, w, x_scale, w_offset}).
void add_rms_norm(Context& ctx, Tensor out, const AddRmsNorm& p);
// Whether a fused projection's `pre` runs in its GEMV prologue on CUDA: the test hook, else
// BUNSEN_FUSED_NORM=0|1 (read once), else `fallback` (false in a build without CUDA). Callers that keep the
// residual in place unless the prologue runs ask here (model::norms_in_projections, with their family's
// measured default); a pre that reaches a projection runs in the prologue unless the switch or hook says 0.
bool fused_norm_enabled(bool fallback = false);
// Test hook (process-wide): -1 = BUNSEN_FUSED_NORM, 0 = never, 1 = where it applies. 1 also holds on the CPU,
// where the forwards then take the prologue's buffer path and every op runs add_rms_norm(pre) first (the
// same bits), so that path is testable without a GPU.
void set_fused_norm_for_testing(int mode);

// ---- fused row-wise norms of the decode step (dispatch_rowwise.cpp, cuda/rowwise_fused.cu). On the CPU
// each is exactly the op sequence its comment names (bit-identical); on CUDA one launch. ----

// The per-head norms of one attention layer, in place over head_dim rows:
//   v = rms_norm(v_from_k ? k : v) * v_w;  k = rms_norm(k) * k_w;  q = rms_norm(q) * q_w
// (v_from_k: v is the norm of the raw k, read before k is normalised). An empty q, k or v is skipped; an
// empty weight is no weight (ones). CPU: rms_norm(v, k|v, v_w), rms_norm(k, k, k_w), rms_norm(q, q, q_w).
struct QkvNorm {
  Tensor q{}, k{}, v{};        // [rows_x, head_dim] each, f32 (f32|bf16 on CUDA, one dtype); disjoint
  Tensor q_w{}, k_w{}, v_w{};  // [head_dim] f32|f16|bf16, or empty
  bool v_from_k = false;       // needs k and v with the same rows; v is then written only
};
void rms_norm_qkv(Context& ctx, const QkvNorm& a, float eps);

// A sandwich-norm residual step with the next norm (Gemma 2/3/4):
//   x = (x + rms_norm(y) * (w_post + w_offset)) * x_scale;  out = rms_norm(x) * (w_next + w_offset) (if out)
// CPU: rms_norm(y, y, w_post), add_scaled(x, y), scale(x, x_scale) when x_scale != 1, then
// rms_norm(out, x, w_next).
struct PostNormResidual {
  Tensor x{};       // [n, d] f32 residual, updated in place (f32|bf16 on CUDA)
  Tensor y{};       // [n, d] the branch output; scratch, unspecified on return (CPU: rms_norm(y) * w_post)
  Tensor w_post{};  // [d] f32|f16|bf16
  Tensor out{};     // [n, d] or empty (then w_next must be empty); must not overlap x or y
  Tensor w_next{};  // [d] f32|f16|bf16, or empty
  float x_scale = 1.0f;
  float w_offset = 0.0f;
};
void post_norm_residual(Context& ctx, const PostNormResidual& a, float eps);

// x *= s.   x [n, d] f32.
void scale(Context& ctx, Tensor x, float s);

// out = x · wᵀ (+ bias).   out [m, n] f32; x [m, k] f32; w [n, k] f32|f16|bf16 (row stride = k);
// bias [n] any float or empty. w must be a weight, not an activation of the same step: on CUDA the GEMV
// starts loading w before its programmatic-dependent-launch wait on the kernel before it.
void linear(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor bias = {});

// linear with a quantized weight: out = x · dequant(w)ᵀ (+ bias), dequantized inside the dot product with
// f32 accumulation.   out [m, n] f32; x [m, k] f32 (out, x f32|bf16 on CUDA); w [n, k] quantized; bias [n]
// any float or empty. Batch invariant like linear on the CPU (a row's result does not depend on m); on CUDA
// m <= 8 runs a GEMV on the exact codes (f32 accuracy) and larger m dequantizes chunks of w to bf16 for
// cuBLASLt (bf16-GEMM accuracy).
void linear_q(Context& ctx, Tensor out, Tensor x, const QuantWeight& w, Tensor bias = {});

// out = dequant(w).   out [n, k] f32 (f32|bf16 on CUDA; tests, tools; the hot paths never materialize it).
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

// out = gelu_tanh(gate) * up (GeGLU), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))): PyTorch's
// gelu(approximate="tanh") = HF "gelu_pytorch_tanh".   out, gate, up [m, f] f32 (gate/up may be column slices).
void gelu_tanh_mul(Context& ctx, Tensor out, Tensor gate, Tensor up);

// x = cap * tanh(x / cap) in place (the final logit soft-cap of Gemma).   x [m, n] f32; cap > 0.
void softcap(Context& ctx, Tensor x, float cap);

// Row-wise softmax in place.   x [m, n] f32.
void softmax(Context& ctx, Tensor x);

// Index of the row maximum (first one on ties; NaN never wins; -1 when the row is all NaN).
//   out [m] i32; x [m, n] f32. host_out (optional, [m] i32): host memory that gets the ids too -- on CUDA
// pinned memory that the kernel writes over the bus (no copy launch; visible once the stream has passed the
// launch, e.g. after an event recorded behind it), on the CPU a copy.
void argmax(Context& ctx, Tensor out, Tensor x, int32_t* host_out = nullptr);

// One token drawn per row, with sampling::sample's semantics given that call's uniform draw u in [0, 1):
// candidates are the non-NaN, non -inf logits (only the +inf ones when any is +inf, equally likely), at
// val = (logit - max) / temperature; top-k keeps every val >= the k-th largest (0 = off); min-p keeps
// exp(val) >= min_p (at least the most likely); top-p keeps the shortest prefix of the descending order
// (ties: lower id first) whose mass reaches top_p of the top-k mass (1 = off); the token is where the
// survivors' cumulative mass in that order first exceeds u times their total. out[r] = -1 when a row has
// no candidate. Greedy rows (temperature <= 0 or top_k == 1) are the caller's: they are rejected here.
//   out [m] i32; x [m, n] f32; rows [m].
struct SampleSpec {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0.0;
};
void sample(Context& ctx, Tensor out, Tensor x, std::span<const SampleSpec> rows);

// out[r, :] = x[rows[r], :] (the rows whose logits a step wants).   out [n_out, d], x [n, d] f32 (f32|bf16
// on CUDA; dtypes may differ there); rows [n_out] i32 on the tensors' device, each in [0, n).
void gather_rows(Context& ctx, Tensor out, Tensor x, Tensor rows);

// ---- fused decode ops (issue 4; dispatch_fused.cpp): each equals the unfused sequence it names on the
// CPU (the same calls, bit for bit) and saves launches on CUDA ----

// Steps of at most this many tokens take the fused GEMV paths on CUDA (= the GEMV's row limit).
constexpr int64_t kFusedDecodeMaxTokens = 8;

// One matrix of linear_multi.
struct LinearPart {
  Tensor out;   // [m, n] f32 (f32|bf16 on CUDA)
  Tensor w;     // [n, k] f32|f16|bf16
  Tensor bias;  // [n] any float, or empty
};

// parts[i].out = x · parts[i].wᵀ (+ parts[i].bias) for 1..4 parts sharing x [m, k]. CPU: linear() per
// part. CUDA: one GEMV launch over all parts' rows when m <= kFusedDecodeMaxTokens (batch invariant like
// linear; the k split may differ from a lone linear's, so equal to it up to f32 summation order), else
// linear() per part.
// With pre: add_rms_norm(pre) into x first (see AddRmsNorm; the CUDA GEMV computes it in its prologue).
void linear_multi(Context& ctx, Tensor x, std::span<const LinearPart> parts, const AddRmsNorm* pre = nullptr);

// linear_multi(x, qkv) then rope_kv_write(q3, k3, v3, cache, positions, slot_mapping, p), with q3, k3, v3 the
// three parts' outputs seen as [m, heads, head_dim]. CPU, and every case CUDA's fold does not take: exactly
// those two ops. CUDA with bf16 weights, x, outputs and a plain bf16 cache, m <= kFusedDecodeMaxTokens and
// the vectorised GEMV path: one launch whose store rounds q/k/v as stored, rotates q and k, rounds again and
// writes k and v to the cache (the two ops' bits; BUNSEN_QKV_ROPE=0 or the test hook turns the fold off).
// True when the one fused launch ran.
// With pre: add_rms_norm(pre) into x first (see AddRmsNorm; the fold computes it in its prologue).
bool linear_qkv_rope_kv(Context& ctx, Tensor x, std::span<const LinearPart> qkv, Tensor q3, Tensor k3,
                        Tensor v3, const PagedKv& cache, Tensor positions, Tensor slot_mapping,
                        const RopeParams& p, const AddRmsNorm* pre = nullptr);
// Test hook (process-wide): -1 = BUNSEN_QKV_ROPE (unset or 1: fold on CUDA where it applies; 0: never), 0 = never, 1 = fold.
void set_qkv_rope_fold_for_testing(int mode);

// The gating of the fused gate/up ops: kSilu = silu_mul (SwiGLU), kGeluTanh = gelu_tanh_mul (GeGLU).
enum class GluAct : uint8_t { kSilu, kGeluTanh };

// out = act(x · w_gateᵀ + b_gate) * (x · w_upᵀ + b_up), act = silu (default) or gelu_tanh.   out [m, f];
// x [m, k]; w_gate, w_up [f, k] (one dtype); biases [f] or empty. CPU: linear, linear, then silu_mul or
// gelu_tanh_mul through f32 temporaries (allocated per call). CUDA: one GEMV launch per 8 rows of x that
// keeps gate and up in f32 (made for decode-sized m). With pre: add_rms_norm(pre) into x first (see
// AddRmsNorm; the CUDA GEMV computes it in its prologue).
void linear_swiglu(Context& ctx, Tensor out, Tensor x, Tensor w_gate, Tensor w_up, Tensor b_gate = {},
                   Tensor b_up = {}, GluAct act = GluAct::kSilu, const AddRmsNorm* pre = nullptr);

// One quantized matrix of linear_q_multi.
struct QuantLinearPart {
  Tensor out;     // [m, n] f32 (f32|bf16 on CUDA)
  QuantWeight w;  // [n, k] quantized
  Tensor bias;    // [n] any float, or empty
};

// parts[i].out = x · dequant(parts[i].w)ᵀ (+ parts[i].bias) for 1..4 parts sharing x [m, k]
// (dispatch_quant.cpp). CPU: linear_q per part. CUDA: one tensor-core GEMV launch over all parts' rows when m
// <= kFusedDecodeMaxTokens and the parts share bits (4|8), group size, scale, output and bias dtypes with
// bf16 x (batch invariant; same kernel as linear_q), else linear_q per part. With pre: add_rms_norm(pre) into
// x first (see AddRmsNorm; with BUNSEN_QMMA_NORM=1 the CUDA 4-bit tiled and 8-bit f16 GEMVs compute it in
// their prologue, group 64, m <= 2, d <= 4096: off by default, slower on an H100).
void linear_q_multi(Context& ctx, Tensor x, std::span<const QuantLinearPart> parts,
                    const AddRmsNorm* pre = nullptr);

// out = act(x · dequant(w_gate)ᵀ + b_gate) * (x · dequant(w_up)ᵀ + b_up), act = silu (default) or gelu_tanh.
// out [m, f]; x [m, k]; w_gate, w_up [f, k] quantized with one bits, group size and scale dtype; biases [f]
// or empty. CPU: linear_q, linear_q, then silu_mul or gelu_tanh_mul through f32 temporaries (allocated per
// call). CUDA: one GEMV launch per 8 rows of x (4/8 bits, bf16 x), else the GEMV per matrix into f32
// scratch and the activation op (made for decode-sized m). With pre: as linear_q_multi's.
void linear_q_swiglu(Context& ctx, Tensor out, Tensor x, const QuantWeight& w_gate, const QuantWeight& w_up,
                     Tensor b_gate = {}, Tensor b_up = {}, GluAct act = GluAct::kSilu,
                     const AddRmsNorm* pre = nullptr);

// rope(q), rope(k) (skipped when p.rotary_dim is 0), then kv_write(cache, k, v, slot_mapping): q and k are
// rotated in place.   q [n_tokens, n_heads, head_dim]; k, v [n_tokens, n_kv_heads, head_dim]; positions
// [n_tokens] i32; slot_mapping [n_tokens] i64. CPU: exactly those calls. CUDA: one launch (unquantized
// cache, q and k of one dtype; otherwise the three calls).
void rope_kv_write(Context& ctx, Tensor q, Tensor k, Tensor v, const PagedKv& cache, Tensor positions,
                   Tensor slot_mapping, const RopeParams& p);

// ---- mixture of experts (issue 9; dispatch_moe.cpp; model/moe.h builds the MoE block on these) ----

// How router logits become expert scores.
enum class MoeScoring : uint8_t {
  kSoftmax,  // softmax over all experts (Qwen3-MoE, Qwen3-Next, Gemma 4), then top-k of the probabilities
  kSigmoid,  // sigmoid per expert, then top-k
};

struct MoeRouteParams {
  int top_k = 1;                              // 1 <= top_k <= n_experts
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool norm_topk = false;    // divide the k chosen scores by their sum (HF norm_topk_prob)
  float scale = 1.0f;        // then multiply every weight by this (routed_scaling_factor)
  Tensor expert_scale;       // [n_experts] any float, or empty: then weight *= expert_scale[id] (Gemma 4's
                             // per_expert_scale); on the weights' device
};

// Per token: scores = scoring(logits), the top_k largest (descending; ties -> the lower expert index first,
// a NaN score never wins), weights = scores of those, optionally renormalized and scaled, all in f32.
//   ids [n, top_k] i32; weights [n, top_k] f32; logits [n, n_experts] f32 (f32|bf16 on CUDA).
// Stays on the device (no host sync): the expert ops read ids/weights where they are.
void moe_route(Context& ctx, Tensor ids, Tensor weights, Tensor logits, const MoeRouteParams& p);

// Activation of a gated expert FFN: act(gate) * up.
enum class MoeActivation : uint8_t { kSilu, kGeluTanh };

// One projection of every expert: expert e's weight is a [rows, cols] row-major matrix (row stride cols)
// starting at address ptrs[e]. A table of addresses (not a stacked tensor) so that stacked checkpoints
// (views at base + e * stride) and per-expert checkpoints (separate tensors) both run without a copy.
// Float: ptrs only. MLX affine-quantized (bits > 0): ptrs -> packed u32 [rows, cols * bits / 32],
// scale_ptrs / bias_ptrs -> [rows, cols / group_size] of dtype `dtype` (same layout as QuantWeight).
// The tables live on the weights' device (model/moe.h builds them at load).
struct ExpertWeights {
  Tensor ptrs;        // [n_experts] i64 addresses
  Tensor scale_ptrs;  // [n_experts] i64 addresses (quantized only)
  Tensor bias_ptrs;   // [n_experts] i64 addresses (quantized only)
  DType dtype = DType::kBF16;  // weight dtype (float), or scales/biases dtype (quantized)
  int64_t rows = 0, cols = 0;
  int bits = 0, group_size = 0;  // bits 0 = float
  bool quantized() const { return bits > 0; }
  int64_t n_experts() const { return ptrs.numel(); }
};

// The routed experts of one MoE layer: y_e(x) = down_e(act(gate_e(x)) * up_e(x)).
struct MoeExperts {
  ExpertWeights gate;  // rows d_expert, cols d_model
  ExpertWeights up;    // rows d_expert, cols d_model
  ExpertWeights down;  // rows d_model, cols d_expert
  MoeActivation act = MoeActivation::kSilu;
};

// out[t] = sum_{j < top_k} weights[t, j] * y_{ids[t, j]}(x[t]), summed in j order (so a token's result
// does not depend on the other tokens of the step: batch invariant on the CPU like linear). Overwrites out.
// An id outside [0, n_experts) is an Error on the CPU; on CUDA that pair contributes nothing.
//   out [n, d_model] f32 (f32|bf16 on CUDA); x [n, d_model] like out; ids [n, top_k] i32;
//   weights [n, top_k] f32. CPU: per expert, its tokens gathered through linear/linear_q. CUDA: one launch
//   per projection over all (token, expert) pairs (grouped GEMV for small n, expert-sorted tiles otherwise),
//   intermediates in the stream's scratch arena; no host sync (graph-capturable).
void moe_experts(Context& ctx, Tensor out, Tensor x, Tensor ids, Tensor weights, const MoeExperts& e);

// ---- linear attention (gated DeltaNet: qwen3.5 / qwen3-next; dispatch_linear_attn.cpp) ----

// One layer's per-sequence state slots (a linear-attention layer keeps these instead of paged KV).
struct LinearState {
  Tensor conv;       // [n_slots, channels, kernel - 1] f32: the last kernel-1 conv inputs, oldest first
  Tensor recurrent;  // [n_slots, n_v_heads, k_head_dim, v_head_dim] f32: the delta-rule state S
};

// Which sequence each token of a varlen step belongs to, for the ops that carry per-sequence state.
// A sequence whose first token in the step is at position 0 starts from a zero state (new, or recomputed
// after a preemption); otherwise it continues from its slot. Both ops leave the slot holding the state
// after the sequence's last token in the step.
struct StateMeta {
  Tensor seq_starts;   // [n_seqs + 1] i32: sequence s owns tokens [seq_starts[s], seq_starts[s + 1])
  Tensor state_slots;  // [n_seqs] i32: its slot; < 0 = none (bucket padding): zero output, no state touched
  Tensor positions;    // [n_tokens] i32
};

// Causal depthwise conv1d over time, per sequence, from and into its conv state, then SiLU:
//   out[t, c] = silu(sum_j w[c, j] * xx[t + j, c]),  xx = the sequence's state rows ++ its x rows.
//   out, x [n_tokens, channels] (rows; out must not alias x); w [channels, kernel] any float;
//   state [n_slots, channels, kernel - 1] f32 (LinearState::conv). kernel >= 2.
void causal_conv1d(Context& ctx, Tensor out, Tensor x, Tensor w, Tensor state, const StateMeta& meta);

// The inputs of gated_delta_rule. v-head h reads k-head h / (n_v_heads / n_k_heads) (HF repeat_interleave).
struct DeltaRuleInputs {
  Tensor q, k;     // [n_tokens, n_k_heads, k_head_dim] (last dim contiguous; other strides free)
  Tensor v;        // [n_tokens, n_v_heads, v_head_dim] (same)
  Tensor a, b;     // [n_tokens, n_v_heads] rows: the decay and beta pre-activations
  Tensor a_log;    // [n_v_heads] any float
  Tensor dt_bias;  // [n_v_heads] any float
};

// The gated delta rule (recurrent form), per sequence and v-head, from and into its state S [k, v]:
//   q, k l2-normalised (x / sqrt(sum x^2 + 1e-6)), q *= q_scale; g = -exp(a_log) * softplus(a + dt_bias);
//   beta = sigmoid(b);  S *= exp(g);  S += k (beta (v - S^T k))^T;  out = S^T q.
//   out [n_tokens, n_v_heads, v_head_dim] (contiguous rows); state [n_slots, n_v_heads, k_head_dim,
//   v_head_dim] f32 (LinearState::recurrent). Everything is computed in f32.
// A sequence's run of >= kDeltaRuleChunkMinTokens tokens in the step (prefill) takes the chunked (WY)
// form of the same math, kDeltaRuleChunk tokens at a time (equal up to f32 rounding); shorter runs and
// decode rows take the recurrent form. The ref backend always runs the recurrent form.
void gated_delta_rule(Context& ctx, Tensor out, const DeltaRuleInputs& in, Tensor state, const StateMeta& meta,
                      float q_scale);

inline constexpr int kDeltaRuleChunk = 64;           // tokens per chunk of the chunked form
inline constexpr int kDeltaRuleChunkMinTokens = 64;  // shortest run that takes it (one full chunk)

// Which form gated_delta_rule takes per run: kAuto = by run length as above; tests force one form.
enum class DeltaRuleForm { kAuto, kRecurrent, kChunked };
void set_delta_rule_form_for_testing(DeltaRuleForm form);

// Gated RMSNorm: out = x / sqrt(mean(x^2) + eps) * w * silu(z).   out, x, z [..., d] rows (out may alias x);
// w [d] any float.
void rms_norm_gated(Context& ctx, Tensor out, Tensor x, Tensor z, Tensor w, float eps);

// One Gated-DeltaNet layer's causal_conv1d -> gated_delta_rule (recurrent form) -> rms_norm_gated in one
// launch (CUDA only; Qwen3.5 / Qwen3-Next decode steps). The inputs: qkv, the conv input; the delta rule
// reads the conv output's [q | k | v] as DeltaRuleInputs would (q, k: n_k_heads x k_head_dim each, v:
// n_v_heads x v_head_dim); the norm gates with z and weighs with norm_w.
struct DeltaNetFusedInputs {
  Tensor qkv;      // [n_tokens, 2 n_k k_head_dim + n_v v_head_dim] rows
  Tensor z;        // [n_tokens, n_v v_head_dim] rows
  Tensor a, b;     // [n_tokens, n_v_heads] rows
  Tensor conv_w;   // [channels, kernel] any float
  Tensor a_log;    // [n_v_heads] any float
  Tensor dt_bias;  // [n_v_heads] any float
  Tensor norm_w;   // [v_head_dim] any float
  int64_t n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0;
  float q_scale = 1.0f, eps = 1e-6f;
};
// out [n_tokens, n_v v_head_dim] rows = rms_norm_gated(gated_delta_rule(causal_conv1d(qkv))) with the
// same state updates as the three ops (equal up to the norm's f32 summation order). Returns false and
// launches nothing where the fused kernel does not apply: not on CUDA, turned off (BUNSEN_DELTANET_FUSED=0,
// read once, or the testing switch), dims it does not take (cuda deltanet_fused_fits), a step of >= the
// chunked form's minimum run tokens (some run might take the chunked form), or by default a step of more
// than 2 tokens (one cluster per sequence: slower than the three ops from ~3 sequences on, H200); the caller
// then runs the three ops. Invalid tensors where it applies are an Error as in the three ops.
bool deltanet_decode_fused(Context& ctx, Tensor out, const DeltaNetFusedInputs& in, const LinearState& state,
                           const StateMeta& meta);
// -1: BUNSEN_DELTANET_FUSED decides (default on for steps of <= 2 tokens); 0: never fused; 1: fused wherever
// it applies (any step under the chunked form's minimum).
void set_deltanet_fused_for_testing(int mode);

// out = x * sigmoid(gate).   out, x [..., d] rows, one shape (out may alias x); gate [..., d] rows, or
// [..., 1] (one gate per row, broadcast: Qwen3-Next's shared-expert gate).
void sigmoid_mul(Context& ctx, Tensor out, Tensor x, Tensor gate);

// Which implementation CPU calls go to: "cpu-avx512", "cpu-avx2", "cpu-scalar" or "ref".
const char* cpu_backend_name();

}  // namespace bunsen::kernels
