// Building blocks shared by the arch/ files: a Linear (float or MLX affine-quantized weight + optional bias),
// an Embedding table (float or quantized) and weight-fetching helpers that validate names, shapes and dtypes
// once at load. Not a module system: forward code stays in arch/. Invariant: a quantized module passed
// every shape check of load_quant_weight (errors name the module); it lives where its store lives.
#pragma once
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace bunsen::model {

struct Linear {
  Tensor w;                // [out, in] f32|f16|bf16; empty when quantized
  kernels::QuantWeight q;  // [out, in] MLX affine; empty when w is set
  Tensor b;                // [out] or empty
  bool quantized() const { return !q.empty(); }
  int64_t out_features() const { return quantized() ? q.rows() : w.dim(0); }
  void operator()(kernels::Context& ctx, Tensor out, Tensor x) const {
    quantized() ? kernels::linear_q(ctx, out, x, q, b) : kernels::linear(ctx, out, x, w, b);
  }
  size_t bytes() const;
};

struct Embedding {
  Tensor table;            // [vocab, d] f32|f16|bf16; empty when quantized
  kernels::QuantWeight q;  // [vocab, d] MLX affine; empty when table is set
  bool quantized() const { return !q.empty(); }
  // out [n, d] f32 = rows ids [n] i32 of the table, times scale.
  void operator()(kernels::Context& ctx, Tensor out, Tensor ids, float scale = 1.0f) const {
    quantized() ? kernels::embedding_q(ctx, out, q, ids, scale)
                : kernels::embedding(ctx, out, table, ids, scale);
  }
  size_t row_bytes() const;  // bytes read per looked-up token
  // The tied output head that reuses this table.
  Linear as_linear() const { return quantized() ? Linear{{}, q, {}} : Linear{table, {}, {}}; }
};

// Fetches a float tensor with the given shape; errors name the tensor, its file and the expected shape.
Tensor float_weight(const WeightStore& ws, const std::string& name, std::initializer_list<int64_t> shape);
// A float Linear (PREFIX.weight [out, in], PREFIX.bias [out] when `bias`).
Linear load_linear(const WeightStore& ws, const std::string& prefix, int64_t out, int64_t in, bool bias);
// The Linear module PREFIX of a checkpoint described by cfg: quantized when cfg.quant_spec(prefix) gives a
// spec and the checkpoint holds PREFIX.scales or a u32 PREFIX.weight (mlx-lm's rule), float otherwise.
Linear load_linear(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix, int64_t out,
                   int64_t in, bool bias);
// The same rule for an embedding table (PREFIX.weight [vocab, d]).
Embedding load_embedding(const WeightStore& ws, const ModelConfig& cfg, const std::string& prefix,
                         int64_t vocab, int64_t d);
// PREFIX.weight [out, in*bits/32] u32, PREFIX.scales and PREFIX.biases [out, in/group] (one float dtype).
// Errors are Error("weights", "quantized module 'PREFIX': ...") for a wrong dtype or packed width, missing
// scales/biases, their shapes or dtypes, or a group size that does not divide `in`.
kernels::QuantWeight load_quant_weight(const WeightStore& ws, const std::string& prefix, int64_t out,
                                       int64_t in, QuantSpec spec);
// Rows [begin, end) of a [out, in] linear (split of a fused projection: a contiguous view, no copy).
Linear slice_rows(const Linear& l, int64_t begin, int64_t end);

// outs[i] = linears[i](x) for 1..4 projections of one input (q/k/v, gate/up): one fused GEMV launch on CUDA
// decode steps when all are float (linear_multi) or all quantized (linear_q_multi), the plain linears
// otherwise; on the CPU exactly the plain linears. pre (optional): the residual add and norm that produce x
// (kernels::AddRmsNorm), inside the fused launch where it applies (bf16 weights; the 4-/8-bit tensor-core
// GEMVs' prologue with BUNSEN_QMMA_NORM=1), else add_rms_norm first.
void project(kernels::Context& ctx, Tensor x, std::initializer_list<std::pair<const Linear*, Tensor>> parts,
             const kernels::AddRmsNorm* pre = nullptr);

// gate and up can take kernels::linear_q_swiglu's fused launch: both quantized with one shape, 4 or 8 bits,
// one group size and scale dtype.
bool fusable_q_swiglu(const Linear& gate, const Linear& up);

// out = down(act(gate(h)) * up(h)) for a gated MLP (SwiGLU: silu; GeGLU: tanh GELU). Decode-sized CUDA
// steps (h.dim(0) <= kFusedDecodeMaxTokens) run gate, up and the gating as one launch into act
// (linear_swiglu when both are float of one dtype, linear_q_swiglu when fusable_q_swiglu); otherwise gate
// and up go into gate_buf / up_buf through project() and silu_mul / gelu_tanh_mul into act (on the CPU
// always: the plain ops in that order). BUNSEN_FUSED_GLU=0 (read once) turns the fused launch off, for
// A/B runs. act, gate_buf, up_buf: [n, f]. pre (optional): the residual add and norm that produce h
// (kernels::AddRmsNorm), run inside the fused launch where it applies (bf16 weights; the 4-/8-bit
// tensor-core GEMVs' prologue with BUNSEN_QMMA_NORM=1), else by add_rms_norm first.
void gated_mlp(kernels::Context& ctx, const Linear& gate, const Linear& up, const Linear& down, Tensor h,
               Tensor out, Tensor act, Tensor gate_buf, Tensor up_buf,
               kernels::GluAct kind = kernels::GluAct::kSilu, const kernels::AddRmsNorm* pre = nullptr);

// Whether a forward passes each residual add + RMSNorm to the projection that reads it (a kernels::AddRmsNorm
// `pre`; the residual alternates between two buffers, since the GEMV prologue writes x_out while other blocks
// still read x_in): steps of <= kFusedDecodeMaxTokens tokens without an activation hook (hooks see every
// layer's x in one buffer), with kernels::fused_norm_enabled(by_default). by_default: the family's CUDA
// default where the H200 measured it faster (docs/PERFORMANCE.md); false on the CPU (there only the test hook
// or BUNSEN_FUSED_NORM=1 turns it on, with the same bits).
inline bool norms_in_projections(bool hooked, int64_t n_tokens, bool by_default) {
  return !hooked && n_tokens <= kernels::kFusedDecodeMaxTokens && kernels::fused_norm_enabled(by_default);
}

// The output head's input: rows xo ([n_out, d] f32) through the final RMSNorm, in place; for a quantized head
// on CUDA, into the first n_out rows of bf16_buf instead ([>= n_out, d] bf16 and free by then, e.g. the
// step's h): the tensor-core GEMV runs f32 x as bf16 hi + lo halves, twice the MMAs of a launch that is
// instruction-bound (H200, Llama-3.1-8B 4-bit head: 168 us with f32 x, ~80 with bf16). The rounding of x is
// far below the 4-bit or 8-bit weights' own error; bf16 heads and the CPU keep f32.
Tensor final_norm(kernels::Context& ctx, const Linear& head, Tensor xo, Tensor bf16_buf, Tensor w, float eps,
                  float w_offset = 0.0f);

// The output head's input after the last layer: x += y * y_scale (the last residual add; y empty: none), then
// the rows b.logit_rows of x through the final RMSNorm, into xo or bf16_buf as final_norm. On CUDA, where the
// step's tokens are its logits rows in order (decode steps: n_single == n_out == n_tokens), the gather is the
// identity and is skipped: the add and the norm are one add_rms_norm launch (y empty: one rms_norm) reading
// x, instead of the add, the gather and the norm (H200 8B bf16: ~9 us of launches per token). x keeps the sum
// either way. BUNSEN_FUSED_TAIL=0 (read once): the three launches everywhere.
Tensor head_input(kernels::Context& ctx, const Linear& head, const StepBatch& b, Tensor x, Tensor y,
                  float y_scale, Tensor xo, Tensor bf16_buf, Tensor w, float eps, float w_offset = 0.0f);

// One 2-D workspace tensor of a step.
struct WorkspaceSpec {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
};
// Aligned byte size of a list of workspace tensors (matches Arena::alloc's rounding).
size_t workspace_bytes(std::span<const WorkspaceSpec> specs);

}  // namespace bunsen::model
