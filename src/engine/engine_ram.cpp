// Engine <-> RAM tier of the prefix cache (kv/ram_tier.h), meant for CUDA runners (`bunsen serve` enables it
// there only: on the CPU the KV pool is already host RAM; CPU runners take it too, with plain memcpy, so the
// bookkeeping is tested without a GPU). Stores: PrefixCache calls ram_store() for every block it evicts to make room; its K/V
// (every per-block tensor of every layer) is copied into a pinned host slot with copies enqueued on the
// runner's stream, so they run before any later step can overwrite the block and the engine never waits.
// Restores: before a waiting sequence is admitted, the blocks after its device-cache hit that the RAM tier
// holds are copied back (host-to-device on the same stream, ordered before its prefill) into fresh blocks
// and inserted into the device cache, so admission hits them. Not the SSD tier (engine_ssd.cpp): both run;
// RAM is consulted first. Invariant: a slot being restored is pinned until its copy is enqueued.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "engine/engine.h"
#include "kernels/device.h"

namespace bunsen::engine {

void Engine::ram_open() {
  if (opts_.ram_cache_bytes == 0 || !cache_) return;
  if (!collect_block_tensors()) {
    log::warn("engine", "the RAM tier of the prefix cache needs contiguous KV blocks; it is off");
    return;
  }
  size_t per_block = 0;
  for (size_t b : block_bytes_) per_block += b;
  const auto n_slots = static_cast<int32_t>(std::min<uint64_t>(opts_.ram_cache_bytes / per_block, 1u << 30));
  if (n_slots <= 0) {
    log::warn("engine", strfmt("RAM tier: %llu bytes hold no block of %zu bytes; it is off",
                               (unsigned long long)opts_.ram_cache_bytes, per_block));
    return;
  }
  try {
    const size_t bytes = per_block * static_cast<size_t>(n_slots);
    ram_memory_ = runner_.device().is_cpu() ? kernels::DeviceMemory::allocate(Device::cpu(), bytes)
                                            : kernels::DeviceMemory::pinned_host(bytes);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("RAM tier: cannot pin %zu bytes (%s); it is off", per_block * n_slots, e.what()));
    return;
  }
  ram_ = std::make_unique<kv::RamTier>(n_slots, runner_.block_size(), per_block);
  cache_->set_evict_hook([this](kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens,
                                kv::BlockId id) { ram_store(key, parent, tokens, id); });
  log::info("engine", strfmt("prefix cache RAM tier: %d blocks (%.2f GB pinned)", n_slots,
                             static_cast<double>(per_block) * n_slots / 1e9));
}

// Slot layout: tensor i of a block at slot * bytes_per_slot + i * block_bytes_[0] when block_pitch_ > 0
// (all equal), else at the running sum of block_bytes_.
void Engine::ram_copy(int32_t slot, kv::BlockId block, bool to_device) {
  kernels::Context& ctx = runner_.context();
  auto* host = static_cast<std::byte*>(ram_memory_.data()) + static_cast<size_t>(slot) * ram_->bytes_per_slot();
  if (runner_.device().is_cpu()) {
    size_t off = 0;
    for (size_t i = 0; i < block_tensors_.size(); ++i) {
      const size_t bb = block_bytes_[i];
      auto* dev = static_cast<std::byte*>(block_tensors_[i]->data) + static_cast<size_t>(block) * bb;
      std::memcpy(to_device ? dev : host + off, to_device ? host + off : dev, bb);
      off += bb;
    }
    return;
  }
  if (block_pitch_ > 0) {
    const size_t bb = block_bytes_[0];
    auto* dev = static_cast<std::byte*>(block_tensors_[0]->data) + static_cast<size_t>(block) * bb;
    if (to_device) kernels::copy_2d_async(ctx, dev, block_pitch_, host, bb, bb, block_tensors_.size());
    else kernels::copy_2d_async(ctx, host, bb, dev, block_pitch_, bb, block_tensors_.size());
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < block_tensors_.size(); ++i) {
    const size_t bb = block_bytes_[i];
    auto* dev = static_cast<std::byte*>(block_tensors_[i]->data) + static_cast<size_t>(block) * bb;
    if (to_device) kernels::copy_async(ctx, dev, host + off, bb);
    else kernels::copy_async(ctx, host + off, dev, bb);
    off += bb;
  }
}

void Engine::ram_store(kv::BlockKey key, kv::BlockKey parent, std::span<const int32_t> tokens, kv::BlockId id) {
  if (ram_failed_) return;
  const std::optional<int32_t> slot = ram_->store(key, parent, tokens);
  if (!slot) return;
  try {
    ram_copy(*slot, id, /*to_device=*/false);
  } catch (const std::exception& e) {  // a failed copy leaves a slot with garbage: the tier stops
    log::warn("engine", strfmt("RAM tier: copy out failed (%s); the tier is off", e.what()));
    ram_failed_ = true;
  }
  std::lock_guard<std::mutex> lock(ram_stats_mu_);
  ram_stats_ = ram_->stats();
}

void Engine::ram_restore(const Sequence& s) {
  if (ram_failed_) return;
  const int32_t bs = runner_.block_size();
  const int64_t max_blocks = (s.n_tokens() - 1) / bs;  // the last token always runs
  if (max_blocks <= 0) return;
  std::vector<kv::BlockId> blocks;
  const int64_t d = cache_->match(s.cache_namespace, s.tokens, max_blocks, blocks);
  std::vector<int32_t> slots;
  if (d < max_blocks) {
    const std::vector<kv::BlockKey> keys = cache_->block_keys(s.cache_namespace, s.tokens, max_blocks);
    const int64_t room = cache_->n_available();
    for (int64_t j = d; j < max_blocks && static_cast<int64_t>(slots.size()) < room; ++j) {
      const std::span<const int32_t> bt(s.tokens.data() + j * bs, static_cast<size_t>(bs));
      const std::optional<int32_t> slot = ram_->acquire(keys[static_cast<size_t>(j)], j ? keys[static_cast<size_t>(j - 1)] : 0, bt);
      if (!slot) break;
      slots.push_back(*slot);
    }
  }
  try {
    for (int32_t slot : slots) {  // allocate() may evict device blocks into other (unpinned) RAM slots
      blocks.push_back(*cache_->allocate());
      ram_copy(slot, blocks.back(), /*to_device=*/true);
    }
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("RAM tier: restore failed (%s); the tier is off", e.what()));
    ram_failed_ = true;
    for (int32_t slot : slots) ram_->release(slot);
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cache_->release(*it);  // fresh ones go free
    return;
  }
  for (int32_t slot : slots) ram_->release(slot);
  const int64_t n = d + static_cast<int64_t>(slots.size());
  const auto n_tok = static_cast<size_t>(n * bs);
  cache_->release_sequence(s.cache_namespace, std::span<const int32_t>(s.tokens.data(), n_tok),
                           static_cast<int64_t>(n_tok), blocks);
  if (!slots.empty()) ram_->count_hit(static_cast<int64_t>(slots.size()) * bs);
  std::lock_guard<std::mutex> lock(ram_stats_mu_);
  ram_stats_ = ram_->stats();
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
}

}  // namespace bunsen::engine
