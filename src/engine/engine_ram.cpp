// Engine <-> RAM tier of the prefix cache (kv/ram_tier.h), meant for CUDA runners (`bunsen serve` enables it
// there only: on the CPU the KV pool is already host RAM; CPU runners take it too, with plain memcpy, so the
// bookkeeping is tested without a GPU). Stores: PrefixCache calls ram_store() for every block it evicts to make room; its K/V
// (every per-block tensor of every layer) is copied into a pinned host slot with copies enqueued on the
// runner's stream, so they run before any later step can overwrite the block and the engine never waits.
// Restores: before a waiting sequence is admitted, the blocks after its device-cache hit that the RAM tier
// holds are copied back (host-to-device on the same stream, ordered before its prefill) into fresh blocks
// and inserted into the device cache, so admission hits them. Not the SSD tier (engine_ssd.cpp): both run;
// RAM is consulted first. Invariant: a slot being restored is pinned until its copy is enqueued.
// Cost: neither direction waits. Restores are only enqueued (pinned host -> device on the runner's stream, which
// the sequence's prefill follows), so unlike the SSD tier's they need no restore job and no held sequence.
// Runners with a sliding-window block space have a second RamTier (own slots and bytes) for the blocks the
// sliding prefix cache evicts, under the same keys; a restore brings back, with the full-space blocks, the
// sliding blocks of the window at the deepest hit whose window is on the device or in RAM (engine_tiers.cpp),
// and only full-space blocks up to that hit.
// Hybrid models: a third RamTier (state_ram_, a share of the bytes) holds linear-attention checkpoints. The
// device's kv::StateCheckpoints calls ram_store_state() before it replaces a checkpoint, which copies it out
// (runner's stream, ordered before the copy that overwrites the slot). A restore aims at the deepest block
// boundary past the device's deepest checkpoint that has a checkpoint on the device or in RAM; blocks past it
// are not restored (a hit without the state there would be cut back anyway), and a checkpoint from RAM is
// inserted into a device slot (host-to-device copy on the same stream) before admission looks for it.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "engine/engine.h"
#include "kernels/device.h"

namespace bunsen::engine {

bool Engine::ram_open_space(RamSpace& ram, const BlockSpace& space, uint64_t bytes, const char* what) {
  const size_t per_block = space.per_block();
  const auto n_slots = static_cast<int32_t>(std::min<uint64_t>(bytes / per_block, 1u << 30));
  if (n_slots <= 0) {
    log::warn("engine", strfmt("RAM tier: %llu bytes hold no %sblock of %zu bytes; it is off",
                               (unsigned long long)bytes, what, per_block));
    return false;
  }
  try {
    const size_t n = per_block * static_cast<size_t>(n_slots);
    ram.memory = runner_.device().is_cpu() ? kernels::DeviceMemory::allocate(Device::cpu(), n)
                                           : kernels::DeviceMemory::pinned_host(n);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("RAM tier: cannot pin %zu bytes (%s); it is off", per_block * n_slots, e.what()));
    return false;
  }
  ram.tier = std::make_unique<kv::RamTier>(n_slots, runner_.block_size(), per_block);
  log::info("engine", strfmt("prefix cache RAM tier: %d %sblocks (%.2f GB pinned)", n_slots, what,
                             static_cast<double>(per_block) * n_slots / 1e9));
  return true;
}

void Engine::ram_open() {
  if (opts_.ram_cache_bytes == 0 || !cache_) return;
  if (!collect_block_tensors()) {
    log::warn("engine", "the RAM tier of the prefix cache needs contiguous KV blocks; it is off");
    return;
  }
  uint64_t full_bytes = opts_.ram_cache_bytes, swa_bytes = 0;
  if (swa_cache_) {  // each space's RAM extends its device pool by the same factor
    const auto dev_full = static_cast<double>(runner_.storage().bytes());
    const auto dev_swa = static_cast<double>(runner_.sliding_storage()->bytes());
    swa_bytes = static_cast<uint64_t>(static_cast<double>(full_bytes) * dev_swa / (dev_full + dev_swa));
    // At least one window (the blocks [window_first_block(d), d) of a hit), else no restored hit is usable.
    const auto window = static_cast<uint64_t>(runner_.sliding_window() / runner_.block_size() + 1);
    swa_bytes = std::min(full_bytes, std::max<uint64_t>(swa_bytes, window * swa_blocks_.per_block()));
    full_bytes -= swa_bytes;
  }
  if (checkpoints_) full_bytes -= ram_open_state(full_bytes);
  if (!ram_open_space(ram_, blocks_, full_bytes, "")) {
    state_ram_ = RamSpace{};
    return;
  }
  if (state_ram_.tier)
    checkpoints_->set_evict_hook([this](kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens,
                                        int32_t slot) { ram_store_state(key, parent, tokens, slot); });
  if (swa_cache_ && !ram_open_space(swa_ram_, swa_blocks_, swa_bytes, "sliding-window ")) {
    ram_ = RamSpace{};
    return;
  }
  cache_->set_evict_hook([this](kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens,
                                kv::BlockId id) { ram_store(ram_, blocks_, key, parent, tokens, id); });
  if (swa_cache_)
    swa_cache_->set_evict_hook([this](kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens,
                                      kv::BlockId id) { ram_store(swa_ram_, swa_blocks_, key, parent, tokens, id); });
  ram_publish_stats();
}

// Slot layout: tensor i of a block at slot * bytes_per_slot + i * space.bytes[0] when space.pitch > 0
// (all equal), else at the running sum of space.bytes.
void Engine::ram_copy(const RamSpace& ram, const BlockSpace& space, int32_t slot, kv::BlockId block,
                      bool to_device) {
  kernels::Context& ctx = runner_.context();
  auto* host = static_cast<std::byte*>(ram.memory.data()) + static_cast<size_t>(slot) * ram.tier->bytes_per_slot();
  if (runner_.device().is_cpu()) {
    size_t off = 0;
    for (size_t i = 0; i < space.tensors.size(); ++i) {
      const size_t bb = space.bytes[i];
      auto* dev = static_cast<std::byte*>(space.tensors[i]->data) + static_cast<size_t>(block) * bb;
      std::memcpy(to_device ? dev : host + off, to_device ? host + off : dev, bb);
      off += bb;
    }
    return;
  }
  if (space.pitch > 0) {
    const size_t bb = space.bytes[0];
    auto* dev = static_cast<std::byte*>(space.tensors[0]->data) + static_cast<size_t>(block) * bb;
    if (to_device) kernels::copy_2d_async(ctx, dev, space.pitch, host, bb, bb, space.tensors.size());
    else kernels::copy_2d_async(ctx, host, bb, dev, space.pitch, bb, space.tensors.size());
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < space.tensors.size(); ++i) {
    const size_t bb = space.bytes[i];
    auto* dev = static_cast<std::byte*>(space.tensors[i]->data) + static_cast<size_t>(block) * bb;
    if (to_device) kernels::copy_async(ctx, dev, host + off, bb);
    else kernels::copy_async(ctx, host + off, dev, bb);
    off += bb;
  }
}

void Engine::ram_store(RamSpace& ram, const BlockSpace& space, kv::BlockKey key, kv::BlockKey parent,
                       std::span<const int32_t> tokens, kv::BlockId id) {
  if (ram_failed_) return;
  const std::optional<int32_t> slot = ram.tier->store(key, parent, tokens);
  if (!slot) return;
  try {
    ram_copy(ram, space, *slot, id, /*to_device=*/false);
  } catch (const std::exception& e) {  // a failed copy leaves a slot with garbage: the tier stops
    log::warn("engine", strfmt("RAM tier: copy out failed (%s); the tier is off", e.what()));
    ram_failed_ = true;
  }
  ram_publish_stats();
}

// A quarter of the RAM tier's bytes, at least one checkpoint and at most one per 4 blocks the rest holds.
uint64_t Engine::ram_open_state(uint64_t bytes) {
  const size_t per_slot = runner_.checkpoint_bytes();
  if (per_slot == 0 || checkpoints_->n_slots() == 0) return 0;
  const uint64_t quarter = std::max<uint64_t>(bytes / 4, per_slot);
  const uint64_t blocks_then = (bytes - std::min(bytes, quarter)) / std::max<size_t>(blocks_.per_block(), 1);
  const uint64_t n = std::min<uint64_t>(quarter / per_slot, std::max<uint64_t>(blocks_then / 4, 1));
  if (n == 0 || n * per_slot >= bytes) {
    log::warn("engine", strfmt("RAM tier: %llu bytes hold no linear-attention checkpoint of %zu bytes next to "
                               "KV blocks; checkpoints stay on the device only", (unsigned long long)bytes, per_slot));
    return 0;
  }
  try {
    const size_t total = per_slot * static_cast<size_t>(n);
    state_ram_.memory = runner_.device().is_cpu() ? kernels::DeviceMemory::allocate(Device::cpu(), total)
                                                  : kernels::DeviceMemory::pinned_host(total);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("RAM tier: cannot pin %zu bytes for checkpoints (%s); they stay on the device only",
                               per_slot * static_cast<size_t>(n), e.what()));
    return 0;
  }
  state_ram_.tier = std::make_unique<kv::RamTier>(static_cast<int32_t>(n), runner_.block_size(), per_slot);
  log::info("engine", strfmt("prefix cache RAM tier: %llu linear-attention checkpoints (%.2f GB pinned)",
                             (unsigned long long)n, static_cast<double>(per_slot) * static_cast<double>(n) / 1e9));
  return per_slot * n;
}

void Engine::ram_store_state(kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens, int32_t slot) {
  if (ram_failed_) return;
  const std::optional<int32_t> at = state_ram_.tier->store(key, parent, tokens);
  if (!at) return;
  try {
    runner_.checkpoint_to_host(slot, static_cast<std::byte*>(state_ram_.memory.data()) +
                                         static_cast<size_t>(*at) * state_ram_.tier->bytes_per_slot());
  } catch (const std::exception& e) {  // a failed copy leaves a slot with garbage: the tier stops
    log::warn("engine", strfmt("RAM tier: checkpoint copy out failed (%s); the tier is off", e.what()));
    ram_failed_ = true;
  }
}

int64_t Engine::ram_pick_checkpoint(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t before,
                                    int64_t n_full, int32_t* ram_slot) {
  *ram_slot = -1;
  const auto bs = static_cast<size_t>(runner_.block_size());
  for (int64_t d = n_full; d > before; --d) {
    const auto j = static_cast<size_t>(d - 1);
    const kv::BlockKey parent = j > 0 ? keys[j - 1] : 0;
    const auto blk = std::span<const int32_t>(s.tokens).subspan(j * bs, bs);
    if (checkpoints_->holds(keys[j], parent, blk)) return d;
    if (!state_ram_.tier) continue;
    if (const std::optional<int32_t> at = state_ram_.tier->acquire(keys[j], parent, blk)) {
      *ram_slot = *at;
      return d;
    }
  }
  return before;
}

int64_t Engine::RamWindow::from_ram() const {
  int64_t k = 0;
  for (const auto& [id, slot] : blocks) k += slot >= 0;
  return k;
}

// The hit a restore aims at is the deepest n <= n_full whose window blocks are each in the sliding cache or
// the sliding RAM tier; it pays only when n is deeper than the hit the device alone allows. The window's
// entries are pinned (cache references, RAM slot pins) before any allocation, so making room for the
// restore never evicts what it needs.
Engine::RamWindow Engine::ram_pick_window(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t d,
                                          int64_t n_full) {
  const auto bs = static_cast<size_t>(runner_.block_size());
  auto parent = [&](size_t j) { return j > 0 ? keys[j - 1] : kv::BlockKey{0}; };
  auto block_tokens = [&](size_t j) { return std::span<const int32_t>(s.tokens).subspan(j * bs, bs); };
  const std::vector<kv::BlockId> on_device = sliding_on_device(s, keys.first(static_cast<size_t>(n_full)));
  std::vector<bool> have_dev(on_device.size()), have(on_device.size());
  for (size_t j = 0; j < on_device.size(); ++j) {
    have_dev[j] = on_device[j] >= 0;
    have[j] = have_dev[j] || swa_ram_.tier->holds(keys[j], parent(j), block_tokens(j));
  }
  RamWindow w;
  w.before = deepest_with_window(std::min(d, n_full), have_dev);
  w.n = deepest_with_window(n_full, have);
  w.first = w.n > w.before ? window_first_block(w.n) : w.n;
  for (auto j = static_cast<size_t>(w.first); j < static_cast<size_t>(w.n); ++j) {
    if (on_device[j] >= 0) {
      swa_cache_->acquire(on_device[j]);
      w.blocks.emplace_back(on_device[j], -1);
    } else {  // holds() said so
      w.blocks.emplace_back(-1, *swa_ram_.tier->acquire(keys[j], parent(j), block_tokens(j)));
    }
  }
  return w;
}

void Engine::ram_put_window(const Sequence& s, std::span<const kv::BlockKey> keys, const RamWindow& w,
                            std::span<const kv::BlockId> fresh) {
  const auto bs = static_cast<size_t>(runner_.block_size());
  size_t f = 0;
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const auto [id, slot] = w.blocks[i];
    if (id >= 0) {
      swa_cache_->release(id);
      continue;
    }
    swa_ram_.tier->release(slot);
    if (fresh.empty()) continue;
    const size_t j = static_cast<size_t>(w.first) + i;
    swa_cache_->release_keyed(keys[j], j > 0 ? keys[j - 1] : 0, std::span<const int32_t>(s.tokens).subspan(j * bs, bs),
                              fresh[f++]);
  }
}

// Full-space blocks after the device hit come back from RAM up to the hit aimed at (with a sliding space,
// ram_pick_window's); fresh blocks are inserted into the device caches, so admission hits them.
void Engine::ram_restore(const Sequence& s) {
  if (ram_failed_) return;
  const int32_t bs = runner_.block_size();
  const int64_t max_blocks = (s.n_tokens() - 1) / bs;  // the last token always runs
  if (max_blocks <= 0) return;
  std::vector<kv::BlockId> blocks;
  const int64_t d = cache_->match(s.cache_namespace, s.tokens, max_blocks, blocks);
  const std::vector<kv::BlockKey> keys = cache_->block_keys(s.cache_namespace, s.tokens, max_blocks);
  std::vector<int32_t> slots;  // full-space RAM slots of blocks d, d + 1, ... (pinned)
  const int64_t room = cache_->n_available();
  for (int64_t j = d; j < max_blocks && static_cast<int64_t>(slots.size()) < room; ++j) {
    const std::optional<int32_t> slot =
        ram_.tier->acquire(keys[static_cast<size_t>(j)], j > 0 ? keys[static_cast<size_t>(j - 1)] : 0,
                           std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(j * bs), bs));
    if (!slot) break;
    slots.push_back(*slot);
  }
  RamWindow w;
  w.before = d;
  w.n = d + static_cast<int64_t>(slots.size());
  int32_t state_slot = -1;  // hybrids: the RAM checkpoint at w.n to bring back (pinned), or -1
  if (checkpoints_) {  // only up to a block boundary with a checkpoint, past the deepest on the device
    w.before = deepest_checkpoint(s, keys, d);
    w.n = ram_pick_checkpoint(s, keys, w.before, w.n, &state_slot);
    const auto keep = static_cast<size_t>(std::max<int64_t>(w.n - d, 0));
    for (size_t k = keep; k < slots.size(); ++k) ram_.tier->release(slots[k]);
    slots.resize(std::min(keep, slots.size()));
  } else if (swa_cache_) {
    w = ram_pick_window(s, keys, d, w.n);
    const auto keep = static_cast<size_t>(std::max<int64_t>(w.n - d, 0));  // slots[k] holds block d + k
    for (size_t k = keep; k < slots.size(); ++k) ram_.tier->release(slots[k]);
    slots.resize(std::min(keep, slots.size()));
  }
  std::vector<kv::BlockId> fresh;  // sliding blocks the window's RAM entries are copied into
  bool ok = w.n > w.before && (!swa_cache_ || w.from_ram() <= swa_cache_->n_available());
  try {
    for (size_t k = 0; ok && k < slots.size(); ++k) {  // allocate() may evict blocks into other RAM slots
      blocks.push_back(*cache_->allocate());
      ram_copy(ram_, blocks_, slots[k], blocks.back(), /*to_device=*/true);
    }
    for (const auto& [id, slot] : w.blocks) {
      if (!ok || slot < 0) continue;
      fresh.push_back(*swa_cache_->allocate());
      ram_copy(swa_ram_, swa_blocks_, slot, fresh.back(), /*to_device=*/true);
    }
    if (ok && state_slot >= 0) {  // insert() may copy another checkpoint out: state_slot is pinned
      const auto j = static_cast<size_t>(w.n - 1);
      const int32_t ck = checkpoints_->insert(keys[j], j > 0 ? keys[j - 1] : 0,
                                              std::span<const int32_t>(s.tokens).subspan(j * bs, bs));
      runner_.checkpoint_from_host(static_cast<const std::byte*>(state_ram_.memory.data()) +
                                       static_cast<size_t>(state_slot) * state_ram_.tier->bytes_per_slot(),
                                   ck);
      state_ram_.tier->count_hit(bs);
    }
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("RAM tier: restore failed (%s); the tier is off", e.what()));
    ram_failed_ = true;
    ok = false;
    for (kv::BlockId id : fresh) swa_cache_->release(id);  // not cached: back to the free list
    for (size_t i = static_cast<size_t>(d); i < blocks.size(); ++i) cache_->release(blocks[i]);
    blocks.resize(static_cast<size_t>(d));
    fresh.clear();
  }
  for (int32_t slot : slots) ram_.tier->release(slot);
  if (state_slot >= 0) state_ram_.tier->release(state_slot);
  ram_put_window(s, keys, w, fresh);
  // The device hit and the restored blocks go back to the cache (the restored ones inserted under their keys).
  const auto n_tok = static_cast<size_t>((ok ? std::max(w.n, d) : d) * bs);
  cache_->release_sequence(s.cache_namespace, std::span<const int32_t>(s.tokens.data(), n_tok),
                           static_cast<int64_t>(n_tok), blocks);
  if (ok) {
    ram_.tier->count_hit((w.n - w.before) * bs);
    if (w.from_ram() > 0) swa_ram_.tier->count_hit(w.from_ram() * bs);
  }
  ram_publish_stats();
}

void Engine::ram_publish_stats() {
  std::lock_guard<std::mutex> lock(ram_stats_mu_);
  if (ram_.tier) ram_stats_ = ram_.tier->stats();
  if (swa_ram_.tier) swa_ram_stats_ = swa_ram_.tier->stats();
  if (state_ram_.tier) state_ram_stats_ = state_ram_.tier->stats();
}

void Engine::fill_ram_stats(EngineStats& s) const {
  std::lock_guard<std::mutex> lock(ram_stats_mu_);
  const kv::RamTierStats& t = ram_stats_;
  s.ram_cache_enabled = t.enabled;
  s.ram_cache_capacity_blocks = t.capacity;
  s.ram_cache_entries = t.entries;
  s.ram_cache_bytes = t.bytes;
  s.ram_cache_stores = t.stores;
  s.ram_cache_evictions = t.evictions;
  s.ram_cache_hits = t.hits;
  s.ram_cache_hit_tokens = t.hit_tokens;
  const kv::RamTierStats& w = swa_ram_stats_;
  s.ram_cache_sliding_capacity_blocks = w.capacity;
  s.ram_cache_sliding_entries = w.entries;
  s.ram_cache_sliding_bytes = w.bytes;
  s.ram_cache_sliding_stores = w.stores;
  s.ram_cache_sliding_evictions = w.evictions;
  s.ram_cache_sliding_hit_tokens = w.hit_tokens;
  const kv::RamTierStats& c = state_ram_stats_;
  s.ram_cache_state_capacity = c.capacity;
  s.ram_cache_state_entries = c.entries;
  s.ram_cache_state_bytes = c.bytes;
  s.ram_cache_state_stores = c.stores;
  s.ram_cache_state_evictions = c.evictions;
  s.ram_cache_state_hits = c.hits;
}

}  // namespace bunsen::engine
