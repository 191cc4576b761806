// Scheduler, sliding-window block space: allocation in both spaces, release of the sliding blocks that left
// the window, and the sliding side of a prefix hit. Host bookkeeping only. Invariants: a sequence's swa_table
// has as many entries as its table; its released entries are a prefix and cover only positions
// < num_computed_tokens - window, which no later query of the sequence can see (kernels mask q_pos - p >=
// window); a released full block enters the sliding prefix cache under the same chain key as its full-space
// twin, so a hit can ask for exactly the blocks its window needs.
#include <algorithm>

#include "core/status.h"
#include "engine/scheduler.h"

namespace bunsen::engine {

int32_t Scheduler::n_available() const {
  const int32_t full = cache_ ? cache_->n_available() : pool_.n_free();
  if (!sw_.pool) return full;
  return std::min(full, sw_.cache ? sw_.cache->n_available() : sw_.pool->n_free());
}

kv::BlockId Scheduler::allocate_sliding() {
  const std::optional<kv::BlockId> id = sw_.cache ? sw_.cache->allocate() : sw_.pool->allocate();
  check(id.has_value(), "engine", "sliding block pool exhausted after n_available() said it had room");
  return *id;
}

int64_t Scheduler::first_live_block(int64_t next_pos) const {
  return std::max<int64_t>(0, next_pos - sw_.window) / cfg_.block_size;
}

const std::vector<kv::BlockKey>& Scheduler::keys_of(Sequence& s, int64_t n) const {
  const int32_t bs = cfg_.block_size;
  check(n * bs <= s.n_tokens(), "engine",
        strfmt("keys_of: %lld blocks of %d tokens exceed sequence %lld's %lld tokens", (long long)n, bs,
               (long long)s.id, (long long)s.n_tokens()));
  std::vector<kv::BlockKey>& k = s.block_keys;
  while (static_cast<int64_t>(k.size()) < n) {
    const size_t j = k.size();
    k.push_back(kv::PrefixCache::chain_key(s.cache_namespace, j > 0 ? k[j - 1] : 0,
                                           std::span<const int32_t>(s.tokens).subspan(j * bs, bs)));
  }
  return k;
}

std::vector<kv::BlockId> Scheduler::sliding_hits(Sequence& s, int64_t n) const {
  std::vector<kv::BlockId> found(static_cast<size_t>(n), -1);
  if (!sw_.cache || n == 0) return found;
  const int32_t bs = cfg_.block_size;
  const std::vector<kv::BlockKey>& keys = keys_of(s, n);
  for (int64_t j = 0; j < n; ++j) {
    const auto blk = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(j * bs), bs);
    const std::optional<kv::BlockId> id =
        sw_.cache->find(keys[static_cast<size_t>(j)], j > 0 ? keys[static_cast<size_t>(j - 1)] : 0, blk);
    if (id) found[static_cast<size_t>(j)] = *id;
  }
  return found;
}

void Scheduler::attach_sliding(Sequence& s, int64_t d, const std::vector<kv::BlockId>& found) {
  check(s.swa_table.blocks().empty(), "engine",
        strfmt("sequence %lld: a prefix hit attaches to an empty sliding table", (long long)s.id));
  const int64_t lo = d > 0 ? first_live_block(d * cfg_.block_size) : 0;
  for (int64_t j = 0; j < lo; ++j) s.swa_table.append_released();
  for (int64_t j = lo; j < d; ++j) {
    const kv::BlockId id = found[static_cast<size_t>(j)];
    if (id < 0)
      throw Error("engine", strfmt("sequence %lld: sliding block %lld of the hit is not cached",
                                   (long long)s.id, (long long)j));
    sw_.cache->acquire(id);
    s.swa_table.append(id);
  }
}

void Scheduler::release_out_of_window(Sequence& s) {
  const int32_t bs = cfg_.block_size;
  const int64_t live = std::min<int64_t>(first_live_block(s.num_computed_tokens),
                                         static_cast<int64_t>(s.swa_table.blocks().size()));
  while (s.swa_table.n_released() < live) {
    const int64_t j = s.swa_table.n_released();
    const kv::BlockId id = s.swa_table.release_front();
    if (!sw_.cache) {
      sw_.pool->release(id);
      continue;
    }
    // Full and computed: (j + 1) * bs <= num_computed_tokens - window.
    const std::vector<kv::BlockKey>& keys = keys_of(s, j + 1);
    sw_.cache->release_keyed(keys[static_cast<size_t>(j)], j > 0 ? keys[static_cast<size_t>(j - 1)] : 0,
                             std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(j * bs), bs), id);
  }
}

void Scheduler::release_sliding(Sequence& s) {
  const int32_t bs = cfg_.block_size;
  const std::vector<kv::BlockId> blocks = s.swa_table.blocks();
  const int64_t first = s.swa_table.n_released();
  const int64_t n_full = std::min<int64_t>({s.num_computed_tokens / bs, s.n_tokens() / bs,
                                            static_cast<int64_t>(blocks.size())});
  s.swa_table.clear();
  for (int64_t j = static_cast<int64_t>(blocks.size()); j-- > first;) {  // deepest first, as release_sequence
    const kv::BlockId id = blocks[static_cast<size_t>(j)];
    if (!sw_.cache) {
      sw_.pool->release(id);
    } else if (j < n_full) {
      const std::vector<kv::BlockKey>& keys = keys_of(s, j + 1);
      sw_.cache->release_keyed(keys[static_cast<size_t>(j)], j > 0 ? keys[static_cast<size_t>(j - 1)] : 0,
                               std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(j * bs), bs), id);
    } else {
      sw_.cache->release(id);
    }
  }
}

}  // namespace bunsen::engine
