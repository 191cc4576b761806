// The model interface the engine drives: one forward over a StepBatch (tokens of one or more sequences,
// prefill chunks and decode rows alike) through the paged KV cache, writing logits for selected rows.
// Not a scheduler or sampler. Invariants: KV contents change only inside forward() through
// batch.slot_mapping; forward() allocates only from the workspace arena it is given.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "kernels/ops.h"
#include "model/config.h"

namespace bunsen::model {

// Description of one step, built by the engine. The tensors live on the model's device (the engine
// copies its host arrays there); forward() never reads them on the host, only the scalars below.
struct StepBatch {
  Tensor token_ids;     // [n_tokens] i32
  Tensor positions;     // [n_tokens] i32
  Tensor seq_index;     // [n_tokens] i32, row in block_tables
  Tensor slot_mapping;  // [n_tokens] i64
  Tensor block_tables;  // [n_seqs, max_blocks_per_seq] i32
  Tensor logit_rows;    // [n_out] i32, token indices whose logits are wanted
  // Linear-attention state (hybrid models; other families ignore both): tokens of sequence s are
  // [seq_starts[s], seq_starts[s + 1]) (each sequence's tokens are contiguous), and its state slot is
  // state_slots[s] (-1: bucket padding, no state). A sequence whose first token here is at position 0
  // starts from a zero state (kernels::StateMeta).
  Tensor seq_starts;   // [n_seqs + 1] i32
  Tensor state_slots;  // [n_seqs] i32
  // Sliding-window layers, when the Runner keeps them in their own block space (RunnerOptions::sliding_kv and a
  // model that mixes sliding and full layers): that space's slots and block tables (entries of blocks that
  // left the window point at some valid block; the window mask never lets a query see them). Both empty
  // otherwise: every layer then uses slot_mapping and block_tables.
  Tensor swa_slot_mapping;  // [n_tokens] i64
  Tensor swa_block_tables;  // [n_seqs, max_blocks_per_seq] i32
  int64_t max_seq_len = 0;  // host scalar: max over tokens of position + 1 (dynamic RoPE)
  int64_t n_single = 0;     // host scalar: leading tokens that are their sequence's only token in the step
                            // (decode rows); the rest are prefill chunks

  int64_t n_tokens() const { return token_ids.numel(); }
  // The slot mapping and block tables of a layer with sliding window `window` (0: full attention).
  const Tensor& slots_for(int window) const {
    return window > 0 && !swa_slot_mapping.empty() ? swa_slot_mapping : slot_mapping;
  }
  const Tensor& tables_for(int window) const {
    return window > 0 && !swa_block_tables.empty() ? swa_block_tables : block_tables;
  }
  int64_t n_out() const { return logit_rows.numel(); }
};

// What the KV cache must hold for one layer.
struct KvLayerSpec {
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int sliding_window = 0;  // 0 = full
  // >= 0: this layer attends over layer `shares_kv_with`'s cache (Gemma 4 KV-shared layers): it owns no
  // KV blocks, the Runner hands it that layer's PagedKv, and it writes nothing.
  int shares_kv_with = -1;
  // kLinear (gated DeltaNet): no paged KV (n_kv_heads, head_dim unused); one state slot per running
  // sequence instead: conv [conv_channels, conv_len] and recurrent [state_heads, state_k, state_v], f32.
  enum class Kind { kAttention, kLinear } kind = Kind::kAttention;
  int64_t conv_channels = 0, conv_len = 0;
  int64_t state_heads = 0, state_k = 0, state_v = 0;
  bool is_linear() const { return kind == Kind::kLinear; }
  // Bytes of one sequence's state for this layer (0 for attention layers).
  size_t state_bytes() const {
    return static_cast<size_t>(conv_channels * conv_len + state_heads * state_k * state_v) * sizeof(float);
  }
};

// Receives named intermediates during forward (golden tests, debugging): "embed" (embedding lookup),
// "decoder_in" (after any embedding scaling), "layer" (output of decoder layer `layer`), "final_norm"
// (rows whose logits are computed), "logits"; on MoE layers also "router_logits" and "router_ids" (moe.h's
// hook_routing, after the layer's experts ran, before its "layer"). Tensors are only valid during the call
// and live on the model's device (f32 on the CPU; on CUDA the residual stream and logits are f32, see the
// arch file).
class ActivationHook {
 public:
  virtual ~ActivationHook() = default;
  virtual void on(std::string_view name, int layer, const Tensor& t) = 0;
};

// Every tensor (batch, kv, workspace, logits) is on the model's device.
struct ForwardArgs {
  const StepBatch* batch = nullptr;
  std::span<const kernels::PagedKv> kv;  // [n_layers] (empty views for linear-attention layers)
  std::span<const kernels::LinearState> state;  // [n_layers] state slots of linear layers (empty elsewhere,
                                                // or an empty span for models without any)
  Arena* workspace = nullptr;
  Tensor logits;  // [n_out, vocab_size] f32
  ActivationHook* hook = nullptr;
  kernels::Context* ctx = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Where the weights live and forward() runs.
  virtual Device device() const = 0;
  virtual std::vector<KvLayerSpec> kv_layout() const = 0;
  virtual void forward(const ForwardArgs& args) = 0;
  // Bytes of workspace forward() needs for a step of `max_tokens` tokens and `max_out` logit rows.
  virtual size_t workspace_bytes(int64_t max_tokens, int64_t max_out) const = 0;
  // Bytes of weights read by one decode step (for roofline figures).
  virtual size_t weight_bytes_per_token() const = 0;
};

}  // namespace bunsen::model
