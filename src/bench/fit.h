// `bunsen fit` arithmetic: weight bytes, KV bytes per token, a step-workspace estimate, and for one
// memory pool (a GPU, this machine's RAM, or a datasheet GPU) whether a model fits, the longest context
// and how many sequences fit, and the batch-1 decode speed that memory bandwidth allows. Pure functions
// (no IO): fit_probe.h gathers the inputs. Not the engine's admission (that sizes the real KV pool);
// this mirrors its rules: paged KV in blocks of block_size tokens; full-attention layers keep KV for the whole
// context; in a model that mixes sliding-window and full layers (Gemma 2/3/4: `bunsen serve` gives the
// sliding ones their own block space) sliding layers keep min(context, window + step_tokens) tokens;
// KV-shared layers keep none; KV bf16 on CUDA and f32 on the CPU (as the Runner allocates it today); a
// hybrid model's linear-attention layers hold no KV but one f32 state slot per running sequence.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace bunsen::bench {

struct FitModel {
  std::string name;
  std::string weight_source;  // "safetensors" or "shape (bf16)" etc.
  int64_t n_layers = 0, n_kv_heads = 0, head_dim = 0, d_model = 0, n_heads = 0, d_ff = 0, vocab_size = 0;
  int64_t max_position = 0;       // max_position_embeddings (0 = unknown: no cap)
  uint64_t weight_bytes = 0;      // every tensor of the checkpoint
  uint64_t weight_read_bytes = 0; // bytes one decoded token reads (an untied embedding table counts one row)
  uint64_t params = 0;            // elements (0 when only bytes are known, e.g. quantized files)
  // Hybrid models (model::kv_layout_from_config): layers with paged KV, and the f32 linear-attention state
  // one running sequence holds (conv + recurrent, every linear layer). Others: n_kv_layers = n_layers, 0.
  int64_t n_kv_layers = -1;        // -1: every layer
  uint64_t state_bytes_per_seq = 0;
  // Sum over the layers that own KV of n_kv_heads * head_dim (per-layer shapes: Gemma 4); 0: unknown,
  // n_kv_layers x n_kv_heads x head_dim is used.
  uint64_t kv_row_elems = 0;
  // Models that mix sliding-window and full layers: the owned sliding layers' n_kv_heads * head_dim sum
  // (not in kv_row_elems) and their largest window. 0 otherwise (sliding layers then count as full).
  uint64_t swa_row_elems = 0;
  int64_t swa_window = 0;
};

// From the shape: every tensor of the family's manifest (model/registry.h) × dtype size.
FitModel fit_model_from_config(const model::ModelConfig& cfg, DType weight_dtype, const std::string& name);
// From a checkpoint's tensors (name, bytes), e.g. read from safetensors headers.
FitModel fit_model_from_tensors(const model::ModelConfig& cfg, const std::vector<std::pair<std::string, uint64_t>>& tensors,
                                const std::string& name);

// KV bytes per token of context of the full-length layers: 2 × n_kv_layers × n_kv_heads × head_dim × dtype
// size (per-layer shapes when known; without the sliding layers of a mixed model).
uint64_t kv_bytes_per_token(const FitModel& m, DType kv_dtype);
// The same for the sliding layers of a mixed model (0 otherwise): they hold min(ctx, window + step) tokens.
uint64_t sliding_kv_bytes_per_token(const FitModel& m, DType kv_dtype);

// One step's scratch for step_tokens tokens and max_seqs logits rows (the llama-family workspace:
// residual f32, activations in act_dtype, f32 logits), plus reserve_bytes (GPU: cuBLAS workspace,
// CUDA graphs and allocator slack).
struct WorkspaceParams {
  int64_t step_tokens = 2048;
  int64_t max_seqs = 1;
  DType act_dtype = DType::kBF16;
  uint64_t reserve_bytes = 0;
};
uint64_t workspace_bytes(const FitModel& m, const WorkspaceParams& p);

constexpr double kGpuBudgetFraction = 0.90;    // of free GPU memory
constexpr double kCpuBudgetFraction = 0.75;    // of total RAM
constexpr double kDatasheetEfficiency = 0.85;  // achievable fraction of a datasheet bandwidth
constexpr uint64_t kGpuReserveBytes = uint64_t{512} << 20;
constexpr int64_t kGpuStepTokens = 2048, kCpuStepTokens = 512;

// A memory pool with a bandwidth.
struct FitTarget {
  std::string name;          // "cuda:0 NVIDIA H200", "cpu", "H100 SXM (datasheet)"
  bool gpu = true;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;   // what the budget is a fraction of (GPU: free; CPU: total RAM)
  double budget_fraction = kGpuBudgetFraction;
  double bandwidth_gbps = 0;  // 1e9 B/s; 0 = unknown (no tok/s prediction)
  double efficiency = 1.0;    // 1 for a measured bandwidth
};

// Datasheet GPUs: H100 SXM, H200, A100 80GB, L40S, RTX 4090, RTX 5090 (memory in GiB as marketed).
std::vector<FitTarget> datasheet_gpus();

struct FitRequest {
  int64_t ctx = 4096;     // tokens per sequence
  int64_t batch = 1;      // sequences served at once (also sizes the logits rows)
  int32_t block_size = 16;
  int64_t step_tokens = 0;  // 0: kGpuStepTokens / kCpuStepTokens
};

struct FitResult {
  std::string target;
  bool gpu = true;
  DType kv_dtype = DType::kBF16;
  uint64_t total_bytes = 0, budget_bytes = 0, weight_bytes = 0, workspace_bytes = 0;
  uint64_t kv_bytes_per_token = 0;    // full-length layers, per token of context
  uint64_t sliding_kv_bytes_per_seq = 0;  // mixed models: sliding layers' KV of one ctx-token sequence
  uint64_t kv_budget_bytes = 0;   // budget − weights − workspace (0 when negative)
  bool weights_fit = false;       // weights + workspace within the budget
  bool fits = false;              // ... and one sequence of ctx tokens of KV
  bool batch_fits = false;        // ... and batch sequences of ctx tokens
  int64_t max_context = 0;        // tokens of KV one sequence can hold, whole blocks, capped at max_position
  int64_t concurrent_seqs = 0;    // sequences of ctx tokens whose KV (+ linear-attention state) fits at once
  uint64_t state_bytes_per_seq = 0;  // hybrid models: each sequence's state slot
  double bandwidth_gbps = 0, efficiency = 1.0;
  double bytes_per_token = 0;     // weight_read_bytes + KV of ctx tokens (sliding layers: of the window)
  double decode_tok_s = 0;        // batch 1 at ctx tokens of context; 0 when the bandwidth is unknown
};

FitResult compute_fit(const FitModel& m, const FitTarget& t, const FitRequest& r);

}  // namespace bunsen::bench
