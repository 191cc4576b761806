// Runner: builds the StepBatch arrays for a list of sequence chunks in one packed host buffer, mirrors them
// on the model's device (one async copy), calls Model::forward and brings the logits back to the host.
// Not a sampler. Invariant: on the CPU the packed host buffer is the batch itself (no copies).
// With a sliding-window block space (runner_sliding.cpp) the packed buffer also holds that space's slots and
// block tables, and the KV members come in two sets; without one the layout and the work are as before.
#include "engine/runner.h"

#include <algorithm>
#include <cstring>

#include "core/env.h"
#include "core/status.h"

namespace bunsen::engine {
namespace {

int64_t blocks_per_seq(const RunnerOptions& o) {
  return (o.max_context + o.block_size - 1) / o.block_size;
}

int32_t pool_blocks(const RunnerOptions& o) {
  if (o.n_blocks > 0) return o.n_blocks;
  return static_cast<int32_t>(blocks_per_seq(o) * o.max_seqs);
}

const RunnerOptions& checked(const RunnerOptions& o) {
  check(o.max_tokens_per_step > 0 && o.max_seqs > 0 && o.max_logit_rows > 0 && o.block_size > 0 &&
            o.max_context > 0,
        "engine", "runner options must be positive");
  return o;
}

// The full space (or the only one) when `swa_window` is 0 or space is kFull; the sliding space otherwise.
KvSpace space_of(int32_t swa_window, bool sliding) {
  return swa_window == 0 ? KvSpace::kAll : sliding ? KvSpace::kSliding : KvSpace::kFull;
}

kv::KvStorageOptions kv_options(const model::Model& m, const RunnerOptions& o, KvSpace space, int32_t n_blocks) {
  const Device dev = m.device();
  return {n_blocks, o.block_size, o.kv_dtype.value_or(dev.is_cuda() ? DType::kBF16 : DType::kF32),
          owned_kv_quant(m.kv_layout(), o.kv_quant, space)};
}

kernels::DeviceMemory kv_memory(const model::Model& m, const RunnerOptions& o, KvSpace space, int32_t n_blocks) {
  if (!m.device().is_cuda()) return {};
  return kernels::DeviceMemory::allocate(
      m.device(), kv::KvStorage::required_bytes(owned_kv_shapes(m.kv_layout(), space), kv_options(m, o, space, n_blocks)),
      /*zero=*/true);
}

kv::KvStorage make_storage(const model::Model& m, const RunnerOptions& o, KvSpace space, int32_t n_blocks,
                           kernels::DeviceMemory& mem) {
  const std::vector<kv::KvLayerShape> shapes = owned_kv_shapes(m.kv_layout(), space);
  const kv::KvStorageOptions opts = kv_options(m, o, space, n_blocks);
  if (m.device().is_cuda()) return kv::KvStorage(shapes, opts, mem.data(), mem.size(), m.device());
  return kv::KvStorage(shapes, opts);
}

size_t align(size_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

int32_t state_slot_count(const std::vector<model::KvLayerSpec>& layout, int64_t max_seqs) {
  return state_shapes(layout).empty() ? 0 : static_cast<int32_t>(max_seqs);
}

Runner::Runner(model::Model& model, const RunnerOptions& opts, kernels::Context ctx)
    : model_(model),
      opts_(checked(opts)),
      ctx_(ctx),
      device_(model.device()),
      max_blocks_(blocks_per_seq(opts)),
      swa_(plan_sliding(model, opts)),
      kv_memory_(kv_memory(model, opts, space_of(swa_.window, false), pool_blocks(opts))),
      pool_(pool_blocks(opts), state_slot_count(model.kv_layout(), opts.max_seqs)),
      storage_(make_storage(model, opts, space_of(swa_.window, false), pool_blocks(opts), kv_memory_)),
      swa_pool_(swa_.n_blocks) {
  const std::vector<model::KvLayerSpec> layout = model.kv_layout();
  if (swa_.window > 0) {
    swa_memory_ = kv_memory(model, opts, KvSpace::kSliding, swa_.n_blocks);
    swa_storage_ =
        std::make_unique<kv::KvStorage>(make_storage(model, opts, KvSpace::kSliding, swa_.n_blocks, swa_memory_));
  }
  init_views(layout);
  init_state(layout);
  const size_t ws_bytes = model.workspace_bytes(opts.max_tokens_per_step, opts.max_logit_rows);
  const size_t meta_bytes = meta_layout(opts.max_tokens_per_step, opts.max_logit_rows, opts.max_seqs).end;
  const size_t logit_bytes =
      static_cast<size_t>(opts.max_logit_rows * model.config().vocab_size) * sizeof(float);
  meta_stride_ = meta_bytes;  // meta_layout() ends on a kAlignment boundary
  const size_t ids_bytes = static_cast<size_t>(kSlots * opts.max_logit_rows) * sizeof(int32_t);
  if (device_.is_cuda()) {
    kernels::set_current_device(device_);
    if (ctx_.cuda_stream == nullptr) {  // graphs cannot be captured on the legacy default stream
      stream_ = kernels::DeviceStream::create(device_);
      ctx_.cuda_stream = stream_.handle();
    }
    workspace_memory_ = kernels::DeviceMemory::allocate(device_, std::max<size_t>(ws_bytes, 1));
    workspace_ = Arena(workspace_memory_.data(), ws_bytes, device_);
    meta_host_ = kernels::DeviceMemory::pinned_host(kSlots * meta_bytes);
    meta_device_ = kernels::DeviceMemory::allocate(device_, meta_bytes);
    logits_host_ = kernels::DeviceMemory::pinned_host(logit_bytes);
    logits_device_ = kernels::DeviceMemory::allocate(device_, logit_bytes);
    ids_host_ = kernels::DeviceMemory::pinned_host(ids_bytes);
    for (auto& e : slot_done_) e = kernels::DeviceEvent::create(device_);
  } else {
    workspace_ = Arena(ws_bytes);
    meta_host_ = kernels::DeviceMemory::allocate(Device::cpu(), kSlots * meta_bytes);
    logits_host_ = kernels::DeviceMemory::allocate(Device::cpu(), logit_bytes);
    ids_host_ = kernels::DeviceMemory::allocate(Device::cpu(), ids_bytes);
  }
  pick_specs_.reserve(static_cast<size_t>(opts_.max_logit_rows));
}

Runner::MetaLayout Runner::meta_layout(int64_t n, int64_t n_out, int64_t n_seqs) const {
  MetaLayout m{};
  size_t at = 0;
  auto place = [&](size_t bytes) {
    const size_t here = at;
    at = align(at + bytes);
    return here;
  };
  const auto t = static_cast<size_t>(n);
  m.token_ids = place(t * sizeof(int32_t));  // offset 0: a step's picked ids land there (enqueue_tokens)
  m.positions = place(t * sizeof(int32_t));
  m.seq_index = place(t * sizeof(int32_t));
  m.slot_mapping = place(t * sizeof(int64_t));
  m.block_tables = place(static_cast<size_t>(n_seqs * max_blocks_) * sizeof(int32_t));
  m.logit_rows = place(static_cast<size_t>(n_out) * sizeof(int32_t));
  m.seq_starts = place(static_cast<size_t>(n_seqs + 1) * sizeof(int32_t));
  m.state_slots = place(static_cast<size_t>(n_seqs) * sizeof(int32_t));
  const size_t swa = swa_.window > 0 ? 1 : 0;  // no sliding space: empty arrays, the layout is unchanged
  m.swa_slot_mapping = place(swa * t * sizeof(int64_t));
  m.swa_block_tables = place(swa * static_cast<size_t>(n_seqs * max_blocks_) * sizeof(int32_t));
  m.end = std::max<size_t>(at, kAlignment);
  return m;
}

model::StepBatch Runner::batch_view(const MetaLayout& m, const char* base, Device dev, int64_t n,
                                    int64_t n_out, int64_t n_seqs) const {
  auto at = [&](size_t off) { return const_cast<char*>(base) + off; };
  model::StepBatch b;
  b.token_ids = Tensor::view(at(m.token_ids), DType::kI32, {n}, dev);
  b.positions = Tensor::view(at(m.positions), DType::kI32, {n}, dev);
  b.seq_index = Tensor::view(at(m.seq_index), DType::kI32, {n}, dev);
  b.slot_mapping = Tensor::view(at(m.slot_mapping), DType::kI64, {n}, dev);
  b.block_tables = Tensor::view(at(m.block_tables), DType::kI32, {n_seqs, max_blocks_}, dev);
  b.logit_rows = Tensor::view(at(m.logit_rows), DType::kI32, {n_out}, dev);
  b.seq_starts = Tensor::view(at(m.seq_starts), DType::kI32, {n_seqs + 1}, dev);
  b.state_slots = Tensor::view(at(m.state_slots), DType::kI32, {n_seqs}, dev);
  if (swa_.window > 0) {
    b.swa_slot_mapping = Tensor::view(at(m.swa_slot_mapping), DType::kI64, {n}, dev);
    b.swa_block_tables = Tensor::view(at(m.swa_block_tables), DType::kI32, {n_seqs, max_blocks_}, dev);
  }
  return b;
}

model::StepBatch Runner::fill_host_batch(std::span<const SeqChunk> chunks, MetaLayout& m, char* host,
                                         int64_t pad_seqs) {
  // Messages are built only on failure: this runs every decode step and must not allocate.
  if (chunks.empty() || static_cast<int64_t>(chunks.size()) > opts_.max_seqs)
    throw Error("engine", strfmt("step: %zu sequences, the runner holds 1 to %lld", chunks.size(),
                                 (long long)opts_.max_seqs));
  int64_t n = 0, n_out = 0, max_seq_len = 0;
  for (const SeqChunk& c : chunks) {
    check(c.n > 0 && c.start_pos >= 0, "engine",
          "step: a chunk needs at least one token and a position >= 0");
    n += c.n;
    n_out += c.logits == SeqChunk::Logits::kAll ? c.n : c.logits == SeqChunk::Logits::kLast ? 1 : 0;
    max_seq_len = std::max(max_seq_len, c.start_pos + c.n);
  }
  check(n <= opts_.max_tokens_per_step, "engine", "step: chunk exceeds the per-step token budget");
  check(n_out <= opts_.max_logit_rows, "engine", "step: more logit rows than the runner holds");
  const int64_t n_real = n;
  n += pad_seqs;
  n_out += pad_seqs;
  const auto n_seqs = static_cast<int64_t>(chunks.size()) + pad_seqs;
  m = meta_layout(n, n_out, n_seqs);
  model::StepBatch hb = batch_view(m, host, Device::cpu(), n, n_out, n_seqs);
  int32_t* ids = hb.token_ids.ptr<int32_t>();
  int32_t* pos = hb.positions.ptr<int32_t>();
  int32_t* sidx = hb.seq_index.ptr<int32_t>();
  int64_t* slots = hb.slot_mapping.ptr<int64_t>();
  int32_t* rows = hb.logit_rows.ptr<int32_t>();
  int32_t* tables = hb.block_tables.ptr<int32_t>();
  int32_t* starts = hb.seq_starts.ptr<int32_t>();
  int32_t* state_slots = hb.state_slots.ptr<int32_t>();
  const bool stateful = pool_.n_state_slots() > 0;
  std::fill_n(tables, n_seqs * max_blocks_, -1);
  const bool sliding = swa_.window > 0;
  int32_t* swa_tables = sliding ? hb.swa_block_tables.ptr<int32_t>() : nullptr;
  int64_t* swa_slots = sliding ? hb.swa_slot_mapping.ptr<int64_t>() : nullptr;
  if (sliding) std::fill_n(swa_tables, n_seqs * max_blocks_, -1);
  int64_t t = 0, r = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(chunks.size()); ++s) {
    const SeqChunk& c = chunks[static_cast<size_t>(s)];
    check(c.table->capacity_tokens() >= c.start_pos + c.n, "engine", "step: block table too short for chunk");
    const auto& blocks = c.table->blocks();
    check(static_cast<int64_t>(blocks.size()) <= max_blocks_, "engine",
          "step: sequence longer than max_context");
    std::copy(blocks.begin(), blocks.end(), tables + s * max_blocks_);
    if (sliding) fill_sliding(c, swa_tables + s * max_blocks_, swa_slots + t);
    starts[s] = static_cast<int32_t>(t);
    state_slots[s] = stateful ? c.table->state_slot() : -1;
    if (stateful && (state_slots[s] < 0 || state_slots[s] >= pool_.n_state_slots()))
      throw Error("engine", "step: the model has linear-attention layers and a chunk's block table holds no "
                            "state slot (BlockTable::acquire_state_slot)");
    const int64_t first_out = c.logits == SeqChunk::Logits::kAll    ? 0
                              : c.logits == SeqChunk::Logits::kLast ? c.n - 1
                                                                    : c.n;
    for (int64_t i = 0; i < c.n; ++i, ++t) {
      ids[t] = c.tokens[i];
      pos[t] = static_cast<int32_t>(c.start_pos + i);
      sidx[t] = static_cast<int32_t>(s);
      slots[t] = c.table->slot(c.start_pos + i);
      if (i >= first_out) rows[r++] = static_cast<int32_t>(t);
    }
  }
  for (int64_t s = static_cast<int64_t>(chunks.size()); s < n_seqs; ++s, ++t) {  // bucket padding
    starts[s] = static_cast<int32_t>(t);
    state_slots[s] = -1;
    ids[t] = 0;
    pos[t] = 0;
    sidx[t] = static_cast<int32_t>(s);
    slots[t] = -1;
    if (sliding) swa_slots[t] = -1;
    rows[r++] = static_cast<int32_t>(t);
  }
  starts[n_seqs] = static_cast<int32_t>(t);
  const int64_t vocab = model_.config().vocab_size;
  for (int64_t i = 0; i < n_real; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error("engine", strfmt("token id %d out of range [0, %lld)", ids[i], (long long)vocab));
  hb.max_seq_len = max_seq_len;
  hb.n_single = 0;
  for (const SeqChunk& c : chunks) {
    if (c.n != 1) break;
    ++hb.n_single;
  }
  if (hb.n_single == static_cast<int64_t>(chunks.size())) hb.n_single += pad_seqs;
  return hb;
}

int64_t Runner::graph_bucket(std::span<const SeqChunk> chunks, model::ActivationHook* hook) const {
  if (!device_.is_cuda() || !opts_.cuda_graphs || hook != nullptr) return 0;
  if (model_.config().rope.type == model::RopeType::kDynamic) return 0;  // its table depends on the length
  for (const SeqChunk& c : chunks)
    if (c.n != 1 || c.logits != SeqChunk::Logits::kLast) return 0;
  int64_t bucket = 1;
  while (bucket < static_cast<int64_t>(chunks.size())) bucket *= 2;
  const int64_t cap = std::min({opts_.max_seqs, opts_.max_logit_rows, opts_.max_tokens_per_step});
  return bucket <= cap ? bucket : 0;
}

// Eager forward, or the bucket's graph: captured after one eager run of the same shapes (which sizes
// every scratch buffer and computes this step), replayed afterwards. A graph is dropped when the stream's
// scratch arena grew since it was captured (growth frees the memory the graph points into).
void Runner::run_forward(const model::ForwardArgs& args, int64_t bucket) {
  if (bucket == 0) {
    model_.forward(args);
    return;
  }
  if (kernels::scratch_capacity(ctx_) != graph_scratch_) graphs_.clear();
  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) {
    it->second.launch(ctx_);
    ++stats_.graph_launches;
    return;
  }
  model_.forward(args);  // warm-up: this step's real result
  kernels::synchronize(ctx_);
  if (kernels::scratch_capacity(ctx_) != graph_scratch_) {
    graphs_.clear();
    graph_scratch_ = kernels::scratch_capacity(ctx_);
  }
  kernels::DeviceGraph::begin_capture(ctx_);
  try {
    model_.forward(args);
  } catch (...) {
    kernels::DeviceGraph::abort_capture(ctx_);
    throw;
  }
  graphs_[bucket] = kernels::DeviceGraph::end_capture(ctx_);
  ++stats_.graph_captures;
}

int64_t Runner::forward_step(std::span<const SeqChunk> chunks, model::ActivationHook* hook, bool feed) {
  const int64_t bucket = graph_bucket(chunks, hook);
  const int64_t pad = bucket > 0 ? bucket - static_cast<int64_t>(chunks.size()) : 0;
  const int prev_slot = slot_;
  slot_ = (slot_ + 1) % kSlots;
  slot_done_[slot_].synchronize();  // the step that last used this slot has copied its metadata and ids
  char* host = meta_host(slot_);
  MetaLayout m{};
  const model::StepBatch hb = fill_host_batch(chunks, m, host, pad);
  const int64_t n = hb.n_tokens(), n_out = hb.n_out(), n_seqs = hb.block_tables.dim(0);
  const int64_t vocab = model_.config().vocab_size;
  const bool cuda = device_.is_cuda();
  // Fed: the ids the previous step picked are this step's tokens (row r feeds chunk r). On CUDA that step
  // wrote them where the token ids live (meta_device_ at offset 0, after its forward had read its own), so
  // the metadata copy starts after them; on the CPU they are in that step's host slot.
  const int64_t n_real = n_out - pad;
  if (cuda) {
    const size_t from = feed ? m.positions : 0;
    kernels::copy_async(ctx_, static_cast<char*>(meta_device_.data()) + from, host + from, m.end - from);
  } else if (feed) {
    std::memcpy(host + m.token_ids, ids_host(prev_slot), static_cast<size_t>(n_real) * sizeof(int32_t));
  }
  model::StepBatch batch =
      cuda ? batch_view(m, static_cast<const char*>(meta_device_.data()), device_, n, n_out, n_seqs) : hb;
  batch.max_seq_len = hb.max_seq_len;
  batch.n_single = hb.n_single;
  model::ForwardArgs args;
  args.batch = &batch;
  args.kv = kv_views_;
  args.state = state_views_;
  args.workspace = &workspace_;
  args.logits = cuda ? Tensor::view(logits_device_.data(), DType::kF32, {n_out, vocab}, device_)
                     : Tensor::view(logits_host_.data(), DType::kF32, {n_out, vocab});
  args.hook = hook;
  args.ctx = &ctx_;
  run_forward(args, bucket);
  ++stats_.steps;
  last_token_rows_ = -1;
  return n_real;
}

Tensor Runner::step(std::span<const SeqChunk> chunks, model::ActivationHook* hook) {
  const int64_t n_out = forward_step(chunks, hook);
  const int64_t vocab = model_.config().vocab_size;
  if (device_.is_cuda()) {
    kernels::copy_async(ctx_, logits_host_.data(), logits_device_.data(),
                        static_cast<size_t>(n_out * vocab) * sizeof(float));
    kernels::synchronize(ctx_);  // also keeps the pinned metadata untouched until its copy has run
  }
  return Tensor::view(logits_host_.data(), DType::kF32, {n_out, vocab});
}

Runner::PendingTokens Runner::enqueue_tokens(std::span<const SeqChunk> chunks, bool feed,
                                             std::span<const kernels::SampleSpec> sample) {
  if (feed) {
    bool decode = last_token_rows_ == static_cast<int64_t>(chunks.size());
    for (const SeqChunk& c : chunks) decode = decode && c.n == 1 && c.logits == SeqChunk::Logits::kLast;
    check(decode, "engine",
          "enqueue_tokens: a fed step needs one-token chunks, one per row of the token step just before it");
  }
  const int64_t n_out = forward_step(chunks, nullptr, feed);  // kernels::sample checks one spec per row
  const int64_t vocab = model_.config().vocab_size;
  int32_t* ids = ids_host(slot_);
  // Greedy on CUDA, the argmax writes the pinned ids itself (BUNSEN_IDS_DIRECT=0: a copy after it): one
  // stream operation less between two decode steps.
  static const bool direct = env_flag("BUNSEN_IDS_DIRECT", true);
  const bool ids_direct = direct && sample.empty() && device_.is_cuda();
  auto pick = [&](Tensor out, Tensor logits) {
    if (sample.empty())
      kernels::argmax(ctx_, out, logits, ids_direct ? ids : nullptr);
    else
      kernels::sample(ctx_, out, logits, sample);
  };
  if (device_.is_cuda()) {
    // Into the token ids of meta_device_ (this step's forward has read them): a fed next step finds them
    // there. n_out <= the step's tokens, so they fit.
    pick(Tensor::view(meta_device_.data(), DType::kI32, {n_out}, device_),
         Tensor::view(logits_device_.data(), DType::kF32, {n_out, vocab}, device_));
    if (!ids_direct)
      kernels::copy_async(ctx_, ids, meta_device_.data(), static_cast<size_t>(n_out) * sizeof(int32_t));
    slot_done_[slot_].record(ctx_);
  } else {
    pick(Tensor::view(ids, DType::kI32, {n_out}),
         Tensor::view(logits_host_.data(), DType::kF32, {n_out, vocab}));
  }
  last_token_rows_ = n_out;
  return {slot_, n_out};
}

std::span<const int32_t> Runner::wait_tokens(const PendingTokens& p) {
  check(p.slot >= 0 && p.slot < kSlots, "engine", "wait_tokens: not an enqueued step");
  slot_done_[p.slot].synchronize();
  return {ids_host(p.slot), static_cast<size_t>(p.n_out)};
}

std::span<const int32_t> Runner::step_argmax(std::span<const SeqChunk> chunks) {
  return wait_tokens(enqueue_tokens(chunks));
}

void Runner::reserve_sampling(int64_t rows) {
  if (device_.is_cuda()) kernels::reserve_sample_scratch(ctx_, rows, model_.config().vocab_size);
}

Runner::Picked Runner::step_pick(std::span<const SeqChunk> chunks, std::span<const RowPick> rows) {
  const int64_t n_out = forward_step(chunks, nullptr);
  check(static_cast<int64_t>(rows.size()) == n_out, "engine",
        strfmt("step_pick: %zu picks for %lld logits rows", rows.size(), static_cast<long long>(n_out)));
  const int64_t vocab = model_.config().vocab_size;
  const bool cuda = device_.is_cuda();
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  int32_t* ids_h = ids_host(slot_);
  // On CUDA the ids go where enqueue_tokens puts them (meta_device_'s token ids, read by this step already).
  const Tensor ids = cuda ? Tensor::view(meta_device_.data(), DType::kI32, {n_out}, device_)
                          : Tensor::view(ids_h, DType::kI32, {n_out});
  const Tensor logits = cuda ? Tensor::view(logits_device_.data(), DType::kF32, {n_out, vocab}, device_)
                             : Tensor::view(logits_host_.data(), DType::kF32, {n_out, vocab});
  using Kind = RowPick::Kind;
  // Runs [r0, r1) of one kind: argmax over every row once when any wants it, a sample() launch per run of
  // sampled rows (their ids overwrite the argmax's), a copy per run of host rows.
  bool any_argmax = false;
  for (const RowPick& p : rows) any_argmax = any_argmax || p.kind == Kind::kArgmax;
  if (any_argmax) kernels::argmax(ctx_, ids, logits);
  auto run_end = [&](int64_t r0) {
    int64_t r1 = r0 + 1;
    while (r1 < n_out && rows[static_cast<size_t>(r1)].kind == rows[static_cast<size_t>(r0)].kind) ++r1;
    return r1;
  };
  for (int64_t r0 = 0, r1; r0 < n_out; r0 = r1) {
    r1 = run_end(r0);
    if (rows[static_cast<size_t>(r0)].kind != Kind::kSample) continue;
    pick_specs_.clear();
    for (int64_t r = r0; r < r1; ++r) pick_specs_.push_back(rows[static_cast<size_t>(r)].spec);
    kernels::sample(ctx_, ids.slice(0, r0, r1), logits.slice(0, r0, r1), pick_specs_);
  }
  if (cuda)
    kernels::copy_async(ctx_, ids_h, meta_device_.data(), static_cast<size_t>(n_out) * sizeof(int32_t));
  // The host rows, packed in row order into logits_host_ (on the CPU moved down within it: row k <= r).
  auto* host = static_cast<char*>(logits_host_.data());
  int64_t n_host = 0;
  for (int64_t r0 = 0, r1; r0 < n_out; r0 = r1) {
    r1 = run_end(r0);
    if (rows[static_cast<size_t>(r0)].kind != Kind::kHost) continue;
    const size_t bytes = static_cast<size_t>(r1 - r0) * row_bytes;
    char* dst = host + static_cast<size_t>(n_host) * row_bytes;
    if (cuda)
      kernels::copy_async(ctx_, dst, static_cast<const char*>(logits_device_.data()) + r0 * row_bytes, bytes);
    else if (n_host != r0)
      std::memmove(dst, host + static_cast<size_t>(r0) * row_bytes, bytes);
    n_host += r1 - r0;
  }
  if (cuda) kernels::synchronize(ctx_);  // also keeps the pinned metadata untouched until its copy has run
  return {{ids_h, static_cast<size_t>(n_out)},
          Tensor::view(logits_host_.data(), DType::kF32, {n_host, vocab})};
}

}  // namespace bunsen::engine
