// Runner: owns the KV cache (BlockPool + KvStorage), the step workspace and the StepBatch buffers on the
// model's device, and runs one model forward over chunks of one or more sequences. Not a scheduler: callers
// decide which chunks run; block tables are grown by the caller (Sequence) before a step. Invariants: every
// buffer (host or device) is sized at construction and step() allocates nothing; on CUDA a step makes one
// host-to-device copy of its packed metadata and one device-to-host copy of its logits; logits returned by
// step() are host memory and stay valid until the next step. On CUDA, decode-only steps (every chunk one
// token, last-row logits, no hook) are padded to a batch-size bucket (powers of two up to max_seqs) and
// replayed from a CUDA graph captured the first time that bucket runs; padded rows write no KV (slot -1)
// and their logits are never copied back.
// Hybrid models (kv_layout() with kLinear layers): those layers get no paged KV but a StateStorage of
// max_seqs slots; the pool hands slot ids to block tables and each chunk's table must hold one. A chunk
// starting at position 0 starts from a zero state (so preemption = recompute from scratch needs no reset).
// They also get RunnerOptions::state_checkpoints checkpoint slots of the same shapes (runner_state.cpp):
// save_state/load_state copy one slot to/from one checkpoint, enqueued on context() so they are ordered with
// steps; a chunk that resumes a sequence at position > 0 continues from whatever its slot holds.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "kv/state_storage.h"
#include "model/model.h"

namespace bunsen::engine {

struct RunnerOptions {
  int64_t max_tokens_per_step = 512;  // token budget of one step (prefill chunk size)
  int64_t max_seqs = 1;               // sequences per step
  int64_t max_logit_rows = 1;         // logits rows per step (1 per sequence for generation)
  int64_t max_context = 4096;         // tokens one sequence may hold (sizes block tables)
  int32_t block_size = 16;
  int32_t n_blocks = 0;           // 0: enough for max_seqs sequences of max_context tokens
  std::optional<DType> kv_dtype;  // default: f32 on the CPU, bf16 on CUDA
  // Per-layer KV quantization (--kv-quant); empty = none. Quantized layers are CPU-only for now: a CUDA
  // runner with any quantized layer throws at construction.
  std::vector<kv::KvQuantSpec> kv_quant;
  bool cuda_graphs = true;        // capture decode steps as CUDA graphs (per batch bucket)
  // Hybrid models: linear-attention state checkpoints (prefix-cache hits restore one); 0 = none, which also
  // turns the prefix cache off for them. Ignored for models without linear-attention layers.
  int32_t state_checkpoints = 8;
};

struct RunnerStats {
  int64_t steps = 0;
  int64_t graph_launches = 0;  // decode steps replayed from a CUDA graph
  int64_t graph_captures = 0;  // graphs captured (buckets, plus re-captures after the scratch grew)
};

// One sequence's share of a step: tokens [start_pos, start_pos + n) of the sequence.
struct SeqChunk {
  const kv::BlockTable* table = nullptr;  // must already cover start_pos + n tokens
  const int32_t* tokens = nullptr;        // [n]
  int64_t n = 0;
  int64_t start_pos = 0;
  enum class Logits { kNone, kLast, kAll } logits = Logits::kLast;
};

// The cache layers a model owns, in layer order (KV-shared layers, which read another layer's cache, own
// none), and the per-layer quantization list `quant` ([n_layers], may be shorter) restricted to them.
std::vector<kv::KvLayerShape> owned_kv_shapes(const std::vector<model::KvLayerSpec>& layout);
std::vector<kv::KvQuantSpec> owned_kv_quant(const std::vector<model::KvLayerSpec>& layout,
                                            const std::vector<kv::KvQuantSpec>& quant);
// The state shapes of the linear-attention layers, in layer order (empty for models without them).
std::vector<kv::StateLayerShape> state_shapes(const std::vector<model::KvLayerSpec>& layout);

class Runner {
 public:
  Runner(model::Model& model, const RunnerOptions& opts, kernels::Context ctx = {});

  // Runs the forward; returns host logits [n_out, vocab_size] f32 in chunk order (rows requested by each
  // chunk). The hook sees tensors on the model's device.
  Tensor step(std::span<const SeqChunk> chunks, model::ActivationHook* hook = nullptr);
  // The same forward, but returns only the argmax id of each logits row (first maximum on ties), computed
  // where the logits are: on CUDA a [n_out] i32 copy replaces the [n_out, vocab] f32 one. Valid until the
  // next step.
  std::span<const int32_t> step_argmax(std::span<const SeqChunk> chunks);
  Device device() const { return device_; }

  model::Model& model() { return model_; }
  kv::BlockPool& pool() { return pool_; }
  const kv::KvStorage& storage() const { return storage_; }
  // Linear-attention state slots (hybrid models; empty otherwise). pool() hands out their ids: a chunk's
  // block table must hold one (BlockTable::acquire_state_slot) when has_linear_state().
  const kv::StateStorage& state_storage() const { return state_; }
  bool has_linear_state() const { return pool_.n_state_slots() > 0; }
  // Checkpoint slots of the linear-attention state (0 without linear layers or with state_checkpoints 0).
  int32_t n_state_checkpoints() const { return checkpoints_.n_slots(); }
  // Copies state slot -> checkpoint slot / checkpoint slot -> state slot, every linear layer. On CUDA the
  // copies are enqueued on context() (ordered before later steps and copies); on the CPU they run now.
  void save_state(int32_t state_slot, int32_t checkpoint_slot);
  void load_state(int32_t checkpoint_slot, int32_t state_slot);
  const RunnerOptions& options() const { return opts_; }
  // The context (thread pool, CUDA stream) every step runs on: copies enqueued on it are ordered with steps.
  kernels::Context& context() { return ctx_; }
  int32_t block_size() const { return opts_.block_size; }
  size_t workspace_high_water() const { return workspace_.high_water(); }
  const RunnerStats& stats() const { return stats_; }

 private:
  // Byte offsets of one step's metadata arrays inside the packed buffers (each kAlignment-aligned).
  struct MetaLayout {
    size_t token_ids, positions, seq_index, slot_mapping, block_tables, logit_rows, seq_starts, state_slots, end;
  };
  MetaLayout meta_layout(int64_t n, int64_t n_out, int64_t n_seqs) const;
  void init_state(const std::vector<model::KvLayerSpec>& layout);  // state_ and checkpoints_ (runner_state.cpp)
  void copy_state(const kv::StateStorage& from, int32_t from_slot, const kv::StateStorage& to, int32_t to_slot);
  // Checks the chunks and writes their arrays into meta_host_; returns host views over them and the layout.
  // `pad_seqs` extra one-token rows (bucket padding) follow the chunks: slot -1, an empty block table.
  model::StepBatch fill_host_batch(std::span<const SeqChunk> chunks, MetaLayout& m, int64_t pad_seqs = 0);
  // The bucket a decode-only step replays from a graph, or 0 when this step runs eagerly.
  int64_t graph_bucket(std::span<const SeqChunk> chunks, model::ActivationHook* hook) const;
  void run_forward(const model::ForwardArgs& args, int64_t bucket);
  // Builds and runs one step; leaves the logits where forward wrote them. Returns the real rows' count.
  int64_t forward_step(std::span<const SeqChunk> chunks, model::ActivationHook* hook);
  model::StepBatch batch_view(const MetaLayout& m, const char* base, Device dev, int64_t n, int64_t n_out,
                              int64_t n_seqs) const;

  model::Model& model_;
  RunnerOptions opts_;
  kernels::Context ctx_;
  Device device_;
  int64_t max_blocks_;               // width of the block tables
  kernels::DeviceMemory kv_memory_;  // CUDA: every layer's K and V; empty on the CPU
  kv::BlockPool pool_;
  kv::KvStorage storage_;
  std::vector<kernels::PagedKv> kv_views_;  // storage_'s layers as the kernels take them (built once)
  kernels::DeviceMemory state_memory_;       // CUDA: the linear-attention state slots; empty otherwise
  kv::StateStorage state_;
  std::vector<kernels::LinearState> state_views_;  // [n_layers] (empty views for attention layers)
  kernels::DeviceMemory checkpoint_memory_;  // CUDA: the state checkpoints; empty otherwise
  kv::StateStorage checkpoints_;               // opts_.state_checkpoints slots shaped like state_'s
  kernels::DeviceMemory workspace_memory_;  // CUDA: the workspace arena's memory
  Arena workspace_;
  // Packed step metadata: token_ids, positions, seq_index [T] i32, slot_mapping [T] i64, block_tables
  // [S, max_blocks] i32, logit_rows [R] i32. Host side (pinned on CUDA) and its device mirror.
  kernels::DeviceMemory meta_host_, meta_device_;
  kernels::DeviceMemory logits_host_;    // [max_logit_rows, vocab_size] f32 (pinned on CUDA)
  kernels::DeviceMemory logits_device_;  // CUDA: where forward writes the logits
  kernels::DeviceMemory argmax_host_;    // [max_logit_rows] i32 (pinned on CUDA)
  kernels::DeviceMemory argmax_device_;  // CUDA: where the argmax kernel writes
  kernels::DeviceStream stream_;          // CUDA: the runner's own stream when the caller gave none
  std::map<int64_t, kernels::DeviceGraph> graphs_;  // decode bucket -> captured step
  size_t graph_scratch_ = 0;  // scratch arena size the graphs were captured with (growth frees it)
  RunnerStats stats_;
};

}  // namespace bunsen::engine
