// Engine, what the RAM tier (engine_ram.cpp) and the SSD tier (engine_ssd.cpp) share: the per-block tensors
// of each KV space (the full space and, for runners with one, the sliding-window space), and the window rule
// of a sliding space. Not a tier and not bookkeeping: nothing here copies or changes a cache.
// Invariant (sliding space): a tier restores the full-space blocks of a hit of d blocks only together with
// the sliding blocks [window_first_block(d), d); the Scheduler (cut_hit) cuts a hit back to the deepest d
// whose window blocks the sliding prefix cache holds, so a hit never attends over a block not restored.
#include <algorithm>

#include "engine/engine.h"

namespace bunsen::engine {

// Every per-block tensor of every layer of `st` (K and V, plus their scale/bias tensors when quantized);
// false when one is not [n_blocks, ...] with contiguous blocks.
bool Engine::collect_space(const kv::KvStorage& st, BlockSpace& out) {
  for (const kv::KvLayerView& l : st.layers()) {
    for (const Tensor* t : {&l.k, &l.v, &l.k_params, &l.v_params}) {
      if (t->empty()) continue;
      const int64_t per_block = t->ndim == 4 ? t->dim(1) * t->dim(2) * t->dim(3) : -1;
      if (per_block <= 0 || t->stride(0) != per_block || !t->rows_contiguous()) {
        out = {};
        return false;
      }
      out.tensors.push_back(t);
      out.bytes.push_back(static_cast<size_t>(per_block) * dtype_size(t->dtype));
    }
  }
  // Equal block sizes at a constant distance (one packed region): copies of a block take one 2-D copy.
  out.pitch = 0;
  if (out.tensors.size() > 1) {
    const auto* base = static_cast<const std::byte*>(out.tensors[0]->data);
    const auto pitch = static_cast<const std::byte*>(out.tensors[1]->data) - base;
    bool uniform = pitch > 0;
    for (size_t i = 0; i < out.tensors.size() && uniform; ++i)
      uniform = out.bytes[i] == out.bytes[0] &&
                static_cast<const std::byte*>(out.tensors[i]->data) - base == pitch * static_cast<ptrdiff_t>(i);
    if (uniform) out.pitch = static_cast<size_t>(pitch);
  }
  return true;
}

size_t Engine::BlockSpace::per_block() const {
  size_t n = 0;
  for (size_t b : bytes) n += b;
  return n;
}

bool Engine::collect_block_tensors() {
  if (!blocks_.tensors.empty()) return true;
  if (!collect_space(runner_.storage(), blocks_)) return false;
  if (runner_.has_sliding_space() && !collect_space(*runner_.sliding_storage(), swa_blocks_)) {
    blocks_ = {};
    return false;
  }
  return true;
}

int64_t Engine::window_first_block(int64_t d) const {
  const int32_t bs = runner_.block_size();
  return std::max<int64_t>(0, d * bs - runner_.sliding_window()) / bs;  // as Scheduler::first_live_block
}

std::vector<kv::BlockId> Engine::sliding_on_device(const Sequence& s, std::span<const kv::BlockKey> keys) const {
  std::vector<kv::BlockId> out(keys.size(), -1);
  if (!swa_cache_) return out;
  const auto bs = static_cast<size_t>(runner_.block_size());
  for (size_t j = 0; j < keys.size(); ++j) {
    const std::optional<kv::BlockId> id =
        swa_cache_->find(keys[j], j > 0 ? keys[j - 1] : 0, std::span<const int32_t>(s.tokens).subspan(j * bs, bs));
    if (id) out[j] = *id;
  }
  return out;
}

int64_t Engine::deepest_with_window(int64_t n, const std::vector<bool>& have) const {
  std::vector<int64_t> missing(static_cast<size_t>(n) + 1, 0);  // missing[j]: blocks in [0, j) without `have`
  for (int64_t j = 0; j < n; ++j)
    missing[static_cast<size_t>(j + 1)] = missing[static_cast<size_t>(j)] + (have[static_cast<size_t>(j)] ? 0 : 1);
  int64_t d = n;
  while (d > 0 && missing[static_cast<size_t>(d)] != missing[static_cast<size_t>(window_first_block(d))]) --d;
  return d;
}

}  // namespace bunsen::engine
