// Runner: owns the KV cache (BlockPool + KvStorage), the step workspace and the StepBatch buffers, and runs
// one model forward over chunks of one or more sequences. Not a scheduler: callers decide which chunks run;
// block tables are grown by the caller (Sequence) before a step. Invariants: every buffer is sized at
// construction, step() performs no heap allocation; logits returned by step() stay valid until the next step.
#pragma once
#include <cstdint>
#include <span>

#include "core/buffer.h"
#include "kernels/ops.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "model/model.h"

namespace bunsen::engine {

struct RunnerOptions {
  int64_t max_tokens_per_step = 512;  // token budget of one step (prefill chunk size)
  int64_t max_seqs = 1;               // sequences per step
  int64_t max_logit_rows = 1;         // logits rows per step (1 per sequence for generation)
  int64_t max_context = 4096;         // tokens one sequence may hold (sizes block tables)
  int32_t block_size = 16;
  int32_t n_blocks = 0;  // 0: enough for max_seqs sequences of max_context tokens
  DType kv_dtype = DType::kF32;
};

// One sequence's share of a step: tokens [start_pos, start_pos + n) of the sequence.
struct SeqChunk {
  const kv::BlockTable* table = nullptr;  // must already cover start_pos + n tokens
  const int32_t* tokens = nullptr;        // [n]
  int64_t n = 0;
  int64_t start_pos = 0;
  enum class Logits { kNone, kLast, kAll } logits = Logits::kLast;
};

class Runner {
 public:
  Runner(model::Model& model, const RunnerOptions& opts, kernels::Context ctx = {});

  // Runs the forward; returns logits [n_out, vocab_size] f32 in chunk order (rows requested by each chunk).
  Tensor step(std::span<const SeqChunk> chunks, model::ActivationHook* hook = nullptr);

  model::Model& model() { return model_; }
  kv::BlockPool& pool() { return pool_; }
  const kv::KvStorage& storage() const { return storage_; }
  const RunnerOptions& options() const { return opts_; }
  int32_t block_size() const { return opts_.block_size; }
  size_t workspace_high_water() const { return workspace_.high_water(); }

 private:
  model::Model& model_;
  RunnerOptions opts_;
  kernels::Context ctx_;
  kv::BlockPool pool_;
  kv::KvStorage storage_;
  Arena workspace_;
  OwnedTensor token_ids_;     // [max_tokens_per_step] i32
  OwnedTensor positions_;     // [max_tokens_per_step] i32
  OwnedTensor seq_index_;     // [max_tokens_per_step] i32
  OwnedTensor slot_mapping_;  // [max_tokens_per_step] i64
  OwnedTensor block_tables_;  // [max_seqs, max_blocks_per_seq] i32
  OwnedTensor logit_rows_;    // [max_logit_rows] i32
  OwnedTensor logits_;        // [max_logit_rows, vocab_size] f32
};

}  // namespace bunsen::engine
