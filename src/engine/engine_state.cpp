// Engine, hybrid models: restores and takes the linear-attention state checkpoints that let a prefix-cache
// hit resume the DeltaNet layers. Not bookkeeping (the Scheduler picks the chunks and the hit; the
// kv::StateCheckpoints store maps keys to slots) and not a copier (Runner::save_state/load_state).
// Invariants: restores run before the step's forward and saves after it, all on the runner's stream, so a
// checkpoint slot replaced by a save is never one a pending restore still reads; a checkpoint is keyed by
// the PrefixCache key of the block ending at its position, under the sequence's cache namespace.
#include "engine/engine.h"

namespace bunsen::engine {

void Engine::restore_states(const SchedulerOutput& out) {
  for (const StateRestore& r : out.restores) runner_.load_state(r.checkpoint, r.state_slot);
}

void Engine::save_states(const SchedulerOutput& out) {
  if (!checkpoints_ || checkpoints_->n_slots() == 0) return;
  const int32_t bs = runner_.block_size();
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.save_state) continue;
    const Sequence* s = scheduler_.find(c.id);
    if (s == nullptr || is_finished(s->status) || s->table.state_slot() < 0) continue;
    const int64_t nb = (c.start_pos + c.n_tokens) / bs;  // the chunk ends at the end of block nb - 1
    const std::vector<kv::BlockKey> keys = cache_->block_keys(s->cache_namespace, s->tokens, nb);
    const kv::BlockKey parent = nb > 1 ? keys[static_cast<size_t>(nb - 2)] : 0;
    const auto blk = std::span<const int32_t>(s->tokens).subspan(static_cast<size_t>((nb - 1) * bs), bs);
    if (checkpoints_->find(keys.back(), parent, blk)) continue;  // taken already (same prefix, same state)
    runner_.save_state(s->table.state_slot(), checkpoints_->insert(keys.back(), parent, blk));
  }
}

}  // namespace bunsen::engine
