// Runner: owns the KV cache (BlockPool + KvStorage), the step workspace and the StepBatch buffers on the
// model's device, and runs one model forward over chunks of one or more sequences. Not a scheduler: callers
// decide which chunks run; block tables are grown by the caller (Sequence) before a step. Invariants: every
// buffer (host or device) is sized at construction and step() allocates nothing; on CUDA a step makes one
// host-to-device copy of its packed metadata and one device-to-host copy of its logits (of its picked ids
// for step_argmax / enqueue_tokens; of the ids and the host-sampled rows for step_pick); logits returned by step() are host memory and stay valid until the next
// step. On CUDA, decode-only steps (every chunk one token, last-row logits, no hook) are padded to a
// batch-size bucket (powers of two up to max_seqs) and replayed from a CUDA graph captured the first time
// that bucket runs; padded rows write no KV (slot -1) and their logits are never copied back.
// Hybrid models (kv_layout() with kLinear layers): those layers get no paged KV but a StateStorage of
// max_seqs slots; the pool hands slot ids to block tables and each chunk's table must hold one. A chunk
// starting at position 0 starts from a zero state (so preemption = recompute from scratch needs no reset).
// They also get RunnerOptions::state_checkpoints checkpoint slots of the same shapes (runner_state.cpp):
// save_state/load_state copy one slot to/from one checkpoint, enqueued on context() so they are ordered with
// steps; a chunk that resumes a sequence at position > 0 continues from whatever its slot holds.
// Sliding-window block space (RunnerOptions::sliding_kv, runner_sliding.cpp): a model that mixes sliding and
// full-attention layers (Gemma 2/3/4) keeps its sliding layers' K/V in a second KvStorage + BlockPool sized for
// the window, not the context. A chunk then carries a second table (SeqChunk::swa_table) indexed by the same
// logical blocks; its leading entries may be released (the Scheduler frees blocks that left the window) and
// reach the kernels as block 0 of that space (valid memory the window mask never lets a query see). The
// forward gets that space's slot mapping and block tables (StepBatch::swa_*) and the sliding layers' views.
// KV-shared layers follow their source layer's space. Models without such a mix (or sliding_kv off) keep
// one space and the exact previous layout.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
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
  // Per-layer KV quantization (--kv-quant: affine int4/int8 or fp8 e4m3); empty = none. CPU and CUDA.
  std::vector<kv::KvQuantSpec> kv_quant;
  bool cuda_graphs = true;        // capture decode steps as CUDA graphs (per batch bucket)
  // Hybrid models: linear-attention state checkpoints (prefix-cache hits restore one); 0 = none, which also
  // turns the prefix cache off for them. Ignored for models without linear-attention layers.
  int32_t state_checkpoints = 8;
  // Give the sliding-window layers of a model that mixes them with full-attention layers their own block
  // space (see the top of this file). Every chunk must then carry swa_table (the Engine's Scheduler fills
  // it). Off: one space holding full-length KV for every layer (what callers with their own tables expect).
  bool sliding_kv = false;
  // Blocks of the sliding space; 0: sliding_pool_blocks(...) (no sliding space when that is not smaller
  // than the full pool). Must be >= sliding_min_blocks(...) so a sequence alone always progresses.
  int32_t n_sliding_blocks = 0;
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
  // Runners with a sliding space: the sequence's sliding-layer table (same logical blocks as `table`; its
  // released leading entries are never written). Ignored (may be null) otherwise.
  const kv::BlockTable* swa_table = nullptr;
};

// Which owned cache layers a block space holds: all of them (one space), the full-attention ones or the
// sliding-window ones (a runner with a sliding space).
enum class KvSpace { kAll, kFull, kSliding };

// The cache layers a model owns, in layer order (KV-shared layers, which read another layer's cache, own
// none), and the per-layer quantization list `quant` ([n_layers], may be shorter) restricted to them.
std::vector<kv::KvLayerShape> owned_kv_shapes(const std::vector<model::KvLayerSpec>& layout,
                                              KvSpace space = KvSpace::kAll);
std::vector<kv::KvQuantSpec> owned_kv_quant(const std::vector<model::KvLayerSpec>& layout,
                                            const std::vector<kv::KvQuantSpec>& quant, KvSpace space = KvSpace::kAll);
// The window a sliding space releases by: the largest window of the owned sliding layers when the model
// also owns full-attention layers; 0 (no sliding space) otherwise.
int32_t sliding_space_window(const std::vector<model::KvLayerSpec>& layout);
// Sliding blocks that max_seqs running sequences can hold at once under steps of step_tokens tokens: between
// steps each keeps positions [next - window, next) (ceil(window / bs) + 1 blocks); a step adds its chunks
// (step_tokens in all, each straddling at most one more block). Doubled so finished prompts' window blocks
// can stay in the prefix cache.
int64_t sliding_pool_blocks(int32_t window, int32_t block_size, int64_t max_seqs, int64_t step_tokens);
// The fewest sliding blocks one sequence needs to progress (one-token chunks): ceil(window / bs) + 2.
int64_t sliding_min_blocks(int32_t window, int32_t block_size);
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
  // Pipelined decoding (generate()): enqueue_tokens() builds and launches a step and picks each logits row's
  // next token where the logits are (argmax, or ops.h's sample() with `sample[r]` when given: a draw from the
  // caller's RNG in each spec), returning without waiting; wait_tokens() waits for that step and returns the
  // ids (valid until its slot is reused, two steps later). With `feed`, every chunk is one token with
  // last-row logits, and the chunks' token ids are replaced on the device by the ids the step enqueued just
  // before picked for the same rows (which the host need not have read): the next step is queued while the
  // previous one runs. A fed id outside the vocabulary (-1: a row with no candidate) reaches the embedding
  // kernels, which write NaN rows for such ids. Steps use two metadata/id slots in turn; an enqueue first
  // waits for the step that last used its slot, so at most two are ever in flight.
  struct PendingTokens {
    int slot = -1;
    int64_t n_out = 0;
  };
  PendingTokens enqueue_tokens(std::span<const SeqChunk> chunks, bool feed = false,
                               std::span<const kernels::SampleSpec> sample = {});
  std::span<const int32_t> wait_tokens(const PendingTokens& p);
  // A batch whose rows pick their tokens differently (the serving engine): each logits row is taken by
  // argmax or by ops.h's sample() where the logits are (its spec's u drawn from the row's RNG by the caller),
  // or comes back to the host for the host sampler (processors, logprobs). Only kHost rows are copied.
  struct RowPick {
    enum class Kind : uint8_t { kArgmax, kSample, kHost };
    Kind kind = Kind::kArgmax;
    kernels::SampleSpec spec{};  // kSample only
  };
  struct Picked {
    std::span<const int32_t> ids;  // [n_out]: the kArgmax / kSample rows' tokens (-1: no candidate)
    Tensor host_logits;            // [n_host, vocab] f32 host: the kHost rows' logits, in row order
  };
  // Runs the forward and picks rows[r] for logits row r (one pick per row). Valid until the next step.
  Picked step_pick(std::span<const SeqChunk> chunks, std::span<const RowPick> rows);
  // Sizes what kSample picks of up to `rows` rows need on the device now (CUDA: the stream's scratch), so
  // that sampling steps allocate nothing and drop no captured graph. Nothing on the CPU.
  void reserve_sampling(int64_t rows);
  Device device() const { return device_; }

  model::Model& model() { return model_; }
  kv::BlockPool& pool() { return pool_; }
  const kv::KvStorage& storage() const { return storage_; }
  // The sliding-window block space (sliding_kv and a model mixing sliding and full layers); sliding_window()
  // is 0 and sliding_storage() null without one.
  bool has_sliding_space() const { return swa_.window > 0; }
  int32_t sliding_window() const { return swa_.window; }
  kv::BlockPool& sliding_pool() { return swa_pool_; }
  const kv::KvStorage* sliding_storage() const { return swa_storage_.get(); }
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
  // Checkpoint slot `slot` as the cache tiers move it (engine_ram.cpp, engine_ssd.cpp): per linear layer its
  // conv then its recurrent part ([2 * linear layers] spans, device memory on CUDA), and their total bytes.
  std::vector<std::span<std::byte>> checkpoint_parts(int32_t slot) const;
  size_t checkpoint_bytes() const;
  // Checkpoint slot <-> `host` (checkpoint_bytes() bytes: the parts packed in order), enqueued on context()
  // like save_state (a plain memcpy on the CPU); `host` must stay valid until those copies have run.
  void checkpoint_to_host(int32_t slot, void* host);
  void checkpoint_from_host(const void* host, int32_t slot);
  const RunnerOptions& options() const { return opts_; }
  // The context (thread pool, CUDA stream) every step runs on: copies enqueued on it are ordered with steps.
  kernels::Context& context() { return ctx_; }
  int32_t block_size() const { return opts_.block_size; }
  size_t workspace_high_water() const { return workspace_.high_water(); }
  const RunnerStats& stats() const { return stats_; }

 private:
  // Byte offsets of one step's metadata arrays inside the packed buffers (each kAlignment-aligned).
  struct MetaLayout {
    size_t token_ids, positions, seq_index, slot_mapping, block_tables, logit_rows, seq_starts, state_slots,
        swa_slot_mapping, swa_block_tables, end;
  };
  struct SlidingPlan {
    int32_t window = 0;    // 0: no sliding space
    int32_t n_blocks = 0;
  };
  static SlidingPlan plan_sliding(const model::Model& m, const RunnerOptions& o);
  void init_views(const std::vector<model::KvLayerSpec>& layout);  // kv_views_ (runner_sliding.cpp)
  // Fills chunk s's sliding table row and token slots (runner_sliding.cpp).
  void fill_sliding(const SeqChunk& c, int32_t* table_row, int64_t* slots) const;
  MetaLayout meta_layout(int64_t n, int64_t n_out, int64_t n_seqs) const;
  void init_state(const std::vector<model::KvLayerSpec>& layout);  // state_ and checkpoints_ (runner_state.cpp)
  void copy_state(const kv::StateStorage& from, int32_t from_slot, const kv::StateStorage& to, int32_t to_slot);
  // Checks the chunks and writes their arrays into meta_host_; returns host views over them and the layout.
  // `pad_seqs` extra one-token rows (bucket padding) follow the chunks: slot -1, an empty block table.
  model::StepBatch fill_host_batch(std::span<const SeqChunk> chunks, MetaLayout& m, char* host,
                                   int64_t pad_seqs = 0);
  // The bucket a decode-only step replays from a graph, or 0 when this step runs eagerly.
  int64_t graph_bucket(std::span<const SeqChunk> chunks, model::ActivationHook* hook) const;
  void run_forward(const model::ForwardArgs& args, int64_t bucket);
  // Builds and runs one step in the next slot (slot_); leaves the logits where forward wrote them. Returns
  // the real rows' count. `feed`: the token ids come from the previous token step (enqueue_tokens).
  int64_t forward_step(std::span<const SeqChunk> chunks, model::ActivationHook* hook, bool feed = false);
  char* meta_host(int slot) {
    return static_cast<char*>(meta_host_.data()) + static_cast<size_t>(slot) * meta_stride_;
  }
  int32_t* ids_host(int slot) {
    return static_cast<int32_t*>(ids_host_.data()) + static_cast<size_t>(slot) * opts_.max_logit_rows;
  }
  model::StepBatch batch_view(const MetaLayout& m, const char* base, Device dev, int64_t n, int64_t n_out,
                              int64_t n_seqs) const;

  model::Model& model_;
  RunnerOptions opts_;
  kernels::Context ctx_;
  Device device_;
  int64_t max_blocks_;               // width of the block tables
  SlidingPlan swa_;                  // before every KV member: they are sized from it
  kernels::DeviceMemory kv_memory_;  // CUDA: every (full-space) layer's K and V; empty on the CPU
  kv::BlockPool pool_;
  kv::KvStorage storage_;
  kernels::DeviceMemory swa_memory_;  // CUDA: the sliding space's K and V; empty otherwise
  kv::BlockPool swa_pool_;            // 0 blocks without a sliding space
  std::unique_ptr<kv::KvStorage> swa_storage_;  // null without a sliding space
  std::vector<kernels::PagedKv> kv_views_;  // storage_'s layers as the kernels take them (built once)
  kernels::DeviceMemory state_memory_;       // CUDA: the linear-attention state slots; empty otherwise
  kv::StateStorage state_;
  std::vector<kernels::LinearState> state_views_;  // [n_layers] (empty views for attention layers)
  kernels::DeviceMemory checkpoint_memory_;  // CUDA: the state checkpoints; empty otherwise
  kv::StateStorage checkpoints_;               // opts_.state_checkpoints slots shaped like state_'s
  kernels::DeviceMemory workspace_memory_;  // CUDA: the workspace arena's memory
  Arena workspace_;
  // Packed step metadata: token_ids, positions, seq_index [T] i32, slot_mapping [T] i64, block_tables
  // [S, max_blocks] i32, logit_rows [R] i32. Host side (pinned on CUDA; kSlots slots of meta_stride_
  // bytes, used in turn) and its device mirror.
  static constexpr int kSlots = 2;
  kernels::DeviceMemory meta_host_, meta_device_;
  size_t meta_stride_ = 0;
  int slot_ = kSlots - 1;                   // the slot the last step used
  kernels::DeviceEvent slot_done_[kSlots];  // CUDA: recorded after an enqueued step's last use of its slot
  int64_t last_token_rows_ = -1;            // rows of the last step when it picked tokens, else -1
  kernels::DeviceMemory logits_host_;    // [max_logit_rows, vocab_size] f32 (pinned on CUDA)
  kernels::DeviceMemory logits_device_;  // CUDA: where forward writes the logits
  kernels::DeviceMemory ids_host_;       // [kSlots, max_logit_rows] i32: picked ids (pinned on CUDA)
  std::vector<kernels::SampleSpec> pick_specs_;  // step_pick: one run of sampled rows
  kernels::DeviceStream stream_;          // CUDA: the runner's own stream when the caller gave none
  std::map<int64_t, kernels::DeviceGraph> graphs_;  // decode bucket -> captured step
  size_t graph_scratch_ = 0;  // scratch arena size the graphs were captured with (growth frees it)
  RunnerStats stats_;
};

}  // namespace bunsen::engine
