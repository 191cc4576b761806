// Runner, sliding-window block space: which layers live in which space, how big the sliding space is, the
// per-layer views, and each chunk's sliding table row + slots. Not bookkeeping: the Scheduler decides which
// blocks a sequence holds and releases the ones that left the window. Invariants: a KV-shared layer lives in
// its source layer's space; released table entries reach the kernels as block 0 (valid memory, never
// visible through the window mask, never written: slots of released blocks are an error); without a sliding
// space nothing here runs on the step path.
#include <algorithm>

#include "core/status.h"
#include "engine/runner.h"

namespace bunsen::engine {
namespace {

bool owns_kv(const model::KvLayerSpec& l) { return l.shares_kv_with < 0 && !l.is_linear(); }

bool in_space(const model::KvLayerSpec& l, KvSpace space) {
  if (space == KvSpace::kAll) return true;
  return (l.sliding_window > 0) == (space == KvSpace::kSliding);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<kv::KvLayerShape> owned_kv_shapes(const std::vector<model::KvLayerSpec>& layout, KvSpace space) {
  std::vector<kv::KvLayerShape> out;
  for (const auto& l : layout)
    if (owns_kv(l) && in_space(l, space)) out.push_back({l.n_kv_heads, l.head_dim});
  return out;
}

std::vector<kv::KvQuantSpec> owned_kv_quant(const std::vector<model::KvLayerSpec>& layout,
                                            const std::vector<kv::KvQuantSpec>& quant, KvSpace space) {
  std::vector<kv::KvQuantSpec> out;
  for (size_t i = 0; i < layout.size() && i < quant.size(); ++i)
    if (owns_kv(layout[i]) && in_space(layout[i], space)) out.push_back(quant[i]);
  return out;
}

int32_t sliding_space_window(const std::vector<model::KvLayerSpec>& layout) {
  int32_t window = 0;
  bool full = false;
  for (const auto& l : layout) {
    if (!owns_kv(l)) continue;
    if (l.sliding_window > 0) window = std::max(window, static_cast<int32_t>(l.sliding_window));
    else full = true;
  }
  return full ? window : 0;
}

int64_t sliding_pool_blocks(int32_t window, int32_t block_size, int64_t max_seqs, int64_t step_tokens) {
  check(window > 0 && block_size > 0 && max_seqs > 0 && step_tokens > 0, "engine",
        strfmt("sliding_pool_blocks: window %d, block_size %d, max_seqs %lld and step_tokens %lld must be > 0",
               window, block_size, (long long)max_seqs, (long long)step_tokens));
  return 2 * (max_seqs * (ceil_div(window, block_size) + 2) + ceil_div(step_tokens, block_size));
}

int64_t sliding_min_blocks(int32_t window, int32_t block_size) { return ceil_div(window, block_size) + 2; }

Runner::SlidingPlan Runner::plan_sliding(const model::Model& m, const RunnerOptions& o) {
  SlidingPlan p;
  if (!o.sliding_kv) return p;
  const int32_t window = sliding_space_window(m.kv_layout());
  if (window <= 0) return p;
  const int64_t full = o.n_blocks > 0 ? o.n_blocks
                                      : ceil_div(o.max_context, o.block_size) * o.max_seqs;
  int64_t n = o.n_sliding_blocks;
  if (n <= 0) {
    n = sliding_pool_blocks(window, o.block_size, o.max_seqs, o.max_tokens_per_step);
    if (n >= full) return p;  // the window is no smaller than the context: one space, as without sliding_kv
  }
  const int64_t need = sliding_min_blocks(window, o.block_size);
  check(n >= need, "engine",
        strfmt("n_sliding_blocks %lld is too small: a sequence needs %lld blocks of %d tokens for a window of %d",
               (long long)n, (long long)need, o.block_size, window));
  p.window = window;
  p.n_blocks = static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX / 2));
  return p;
}

// One view per model layer: a KV-shared layer gets its source layer's view; owned layers take the next
// layer of their space's storage (storage_ holds the full-space or every layer, swa_storage_ the sliding ones).
void Runner::init_views(const std::vector<model::KvLayerSpec>& layout) {
  size_t owned = 0, owned_swa = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const model::KvLayerSpec& l = layout[i];
    if (l.is_linear()) {  // no paged KV: its state slots come from init_state
      kv_views_.push_back({});
      continue;
    }
    const int src = l.shares_kv_with;
    if (src >= 0) {
      check(static_cast<size_t>(src) < i && layout[static_cast<size_t>(src)].shares_kv_with < 0, "engine",
            strfmt("kv layout: layer %zu shares the cache of layer %d, which is not an earlier owning layer", i, src));
      check(swa_.window == 0 || (l.sliding_window > 0) == (layout[static_cast<size_t>(src)].sliding_window > 0),
            "engine",
            strfmt("kv layout: layer %zu (window %d) shares the cache of layer %d (window %d): a sliding and a full "
                   "layer cannot share one cache",
                   i, l.sliding_window, src, layout[static_cast<size_t>(src)].sliding_window));
      kv_views_.push_back(kv_views_[static_cast<size_t>(src)]);
      continue;
    }
    const bool sliding = swa_.window > 0 && l.sliding_window > 0;
    const kv::KvLayerView& v = sliding ? swa_storage_->layers()[owned_swa++] : storage_.layers()[owned++];
    kv_views_.push_back({v.k, v.v, v.k_params, v.v_params, v.bits, v.group_size, v.fp8});
  }
}

// Messages are built only on failure: this runs every step.
void Runner::fill_sliding(const SeqChunk& c, int32_t* table_row, int64_t* slots) const {
  const kv::BlockTable* t = c.swa_table;
  if (t == nullptr)
    throw Error("engine", "step: the runner keeps sliding-window layers in their own block space (sliding_kv) and "
                          "a chunk carries no swa_table");
  const auto& blocks = t->blocks();
  if (static_cast<int64_t>(blocks.size()) > max_blocks_ || t->capacity_tokens() < c.start_pos + c.n)
    throw Error("engine", strfmt("step: sliding table of %zu blocks does not cover positions [%lld, %lld) within "
                                 "%lld blocks",
                                 blocks.size(), (long long)c.start_pos, (long long)(c.start_pos + c.n),
                                 (long long)max_blocks_));
  for (size_t j = 0; j < blocks.size(); ++j) table_row[j] = blocks[j] < 0 ? 0 : blocks[j];
  for (int64_t i = 0; i < c.n; ++i) slots[i] = t->slot(c.start_pos + i);
}

}  // namespace bunsen::engine
