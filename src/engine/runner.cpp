// Runner: builds the StepBatch arrays for a list of sequence chunks and calls Model::forward.
#include "engine/runner.h"

#include <algorithm>

#include "core/status.h"

namespace bunsen::engine {
namespace {

std::vector<kv::KvLayerShape> kv_shapes(const model::Model& m) {
  std::vector<kv::KvLayerShape> out;
  for (const auto& l : m.kv_layout()) out.push_back({l.n_kv_heads, l.head_dim});
  return out;
}

int64_t blocks_per_seq(const RunnerOptions& o) { return (o.max_context + o.block_size - 1) / o.block_size; }

int32_t pool_blocks(const RunnerOptions& o) {
  if (o.n_blocks > 0) return o.n_blocks;
  return static_cast<int32_t>(blocks_per_seq(o) * o.max_seqs);
}

}  // namespace

Runner::Runner(model::Model& model, const RunnerOptions& opts, kernels::Context ctx)
    : model_(model),
      opts_(opts),
      ctx_(ctx),
      pool_(pool_blocks(opts)),
      storage_(kv_shapes(model), {pool_blocks(opts), opts.block_size, opts.kv_dtype}),
      workspace_(model.workspace_bytes(opts.max_tokens_per_step, opts.max_logit_rows)) {
  check(opts.max_tokens_per_step > 0 && opts.max_seqs > 0 && opts.max_logit_rows > 0 && opts.block_size > 0,
        "engine", "runner options must be positive");
  const int64_t t = opts.max_tokens_per_step;
  token_ids_ = OwnedTensor::make(DType::kI32, {t});
  positions_ = OwnedTensor::make(DType::kI32, {t});
  seq_index_ = OwnedTensor::make(DType::kI32, {t});
  slot_mapping_ = OwnedTensor::make(DType::kI64, {t});
  block_tables_ = OwnedTensor::make(DType::kI32, {opts.max_seqs, blocks_per_seq(opts)});
  logit_rows_ = OwnedTensor::make(DType::kI32, {opts.max_logit_rows});
  logits_ = OwnedTensor::make(DType::kF32, {opts.max_logit_rows, model.config().vocab_size});
}

Tensor Runner::step(std::span<const SeqChunk> chunks, model::ActivationHook* hook) {
  // Messages are built only on failure: step() runs every decode step and must not allocate.
  if (chunks.empty() || static_cast<int64_t>(chunks.size()) > opts_.max_seqs)
    throw Error("engine", strfmt("step: %zu sequences, the runner holds 1 to %lld", chunks.size(), (long long)opts_.max_seqs));
  int32_t* ids = token_ids_.tensor.ptr<int32_t>();
  int32_t* pos = positions_.tensor.ptr<int32_t>();
  int32_t* sidx = seq_index_.tensor.ptr<int32_t>();
  int64_t* slots = slot_mapping_.tensor.ptr<int64_t>();
  int32_t* rows = logit_rows_.tensor.ptr<int32_t>();
  Tensor tables = block_tables_.tensor;
  const int64_t max_blocks = tables.dim(1);
  std::fill_n(tables.ptr<int32_t>(), tables.numel(), -1);
  int64_t n = 0, n_out = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SeqChunk& c = chunks[s];
    check(n + c.n <= opts_.max_tokens_per_step, "engine", "step: chunk exceeds the per-step token budget");
    check(c.table->capacity_tokens() >= c.start_pos + c.n, "engine", "step: block table too short for chunk");
    const auto& blocks = c.table->blocks();
    check(static_cast<int64_t>(blocks.size()) <= max_blocks, "engine", "step: sequence longer than max_context");
    std::copy(blocks.begin(), blocks.end(), tables.ptr<int32_t>() + static_cast<int64_t>(s) * max_blocks);
    const int64_t first_out = c.logits == SeqChunk::Logits::kAll ? 0 : c.logits == SeqChunk::Logits::kLast ? c.n - 1 : c.n;
    check(n_out + (c.n - first_out) <= opts_.max_logit_rows, "engine", "step: more logit rows than the runner holds");
    for (int64_t i = 0; i < c.n; ++i, ++n) {
      ids[n] = c.tokens[i];
      pos[n] = static_cast<int32_t>(c.start_pos + i);
      sidx[n] = static_cast<int32_t>(s);
      slots[n] = c.table->slot(c.start_pos + i);
      if (i >= first_out) rows[n_out++] = static_cast<int32_t>(n);
    }
  }
  const int64_t vocab = model_.config().vocab_size;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error("engine", strfmt("token id %d out of range [0, %lld)", ids[i], (long long)vocab));
  model::StepBatch batch;
  batch.token_ids = token_ids_.tensor.slice(0, 0, n);
  batch.positions = positions_.tensor.slice(0, 0, n);
  batch.seq_index = seq_index_.tensor.slice(0, 0, n);
  batch.slot_mapping = slot_mapping_.tensor.slice(0, 0, n);
  batch.block_tables = tables.slice(0, 0, static_cast<int64_t>(chunks.size()));
  batch.logit_rows = logit_rows_.tensor.slice(0, 0, n_out);
  model::ForwardArgs args;
  args.batch = &batch;
  args.kv = storage_.layers();
  args.workspace = &workspace_;
  args.logits = logits_.tensor.slice(0, 0, n_out);
  args.hook = hook;
  args.ctx = &ctx_;
  model_.forward(args);
  return args.logits;
}

}  // namespace bunsen::engine
