// Engine <-> SSD tier of the prefix cache (kv/ssd_tier.h). Snapshots: when a request ends, the blocks of its
// tokens that the device cache holds are copied (engine thread: each block's K, V (and, for quantized
// layers, their scale/bias tensors) per layer; a memcpy on the CPU, device-to-host copies on CUDA) into a
// buffer the writer thread owns and writes; no disk I/O here. Two prefix lengths are written from one copy:
// all cached blocks (a conversation's next turn) and the prompt's lookup length (the same prompt again). Restores: before a step admits waiting sequences, a prompt the device cache does not fully
// cover is looked up on disk (index only), longest block-aligned prefix first; a hit maps the file, copies
// the payload into freshly allocated pool blocks (memcpy / staged upload) and inserts them into the device
// cache, so admission hits them. Not the scheduler: only PrefixCache::match/allocate/release are used.
// The RAM tier (engine_ram.cpp) is consulted first for the same sequences.
// Runners with a sliding-window block space: each snapshot target also carries the sliding blocks of the
// window at its end (a version-2 file, kv/ssd_format.h), cut back to the deepest prefix whose window the
// sliding cache still holds; a restore brings those back into the sliding cache with the full-space blocks,
// and is taken only when it makes a hit deeper than the device alone allows (engine_tiers.cpp).
// Cost: a restore runs on the engine thread and delays that step by the file's mapping + verification +
// a copy of the restored bytes (memory/PCIe speed once the page cache holds the file, disk speed when not).
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "engine/engine.h"
#include "kernels/device.h"

namespace bunsen::engine {
namespace {

constexpr size_t kMaxPendingSnapshotBytes = size_t{2} << 30;  // host bytes waiting for the writer
constexpr size_t kUploadChunkBytes = size_t{64} << 20;

// Whether `e` is the prefix of n_blocks blocks of `tokens` in this engine's layout (per_block: bytes per
// block of each tensor, and the sliding part's tensors and window), with the sliding window blocks
// [swa_first, n_blocks) when there is a sliding space.
bool entry_usable(const kv::SsdEntry& e, const kv::SsdLayout& per_block, std::span<const int32_t> tokens,
                  int64_t n_blocks, int64_t swa_first) {
  const auto n_tok = static_cast<size_t>(n_blocks * per_block.block_size);
  if (e.tokens.size() != n_tok || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) return false;
  const kv::SsdLayout& l = e.layout;
  if (l.n_layers != per_block.n_layers || l.block_size != per_block.block_size || l.dtype != per_block.dtype ||
      l.n_kv_heads != per_block.n_kv_heads || l.head_dim != per_block.head_dim ||
      l.tensor_bytes.size() != per_block.tensor_bytes.size() || e.tensors.size() != l.tensor_bytes.size())
    return false;
  const kv::SsdSlidingPart& sp = l.sliding;
  if (sp.n_tensors != per_block.sliding.n_tensors) return false;
  if (sp.n_tensors > 0 &&
      (sp.window != per_block.sliding.window || sp.first_block != static_cast<uint64_t>(swa_first) ||
       sp.n_blocks != static_cast<uint64_t>(n_blocks - swa_first)))
    return false;
  const size_t n_full = l.tensor_bytes.size() - sp.n_tensors;
  for (size_t i = 0; i < l.tensor_bytes.size(); ++i)
    if (l.tensor_bytes[i] != per_block.tensor_bytes[i] * (i < n_full ? static_cast<uint64_t>(n_blocks) : sp.n_blocks))
      return false;
  return true;
}

}  // namespace

void Engine::ssd_open() {
  if (opts_.ssd_cache_dir.empty()) return;
  if (!cache_) {
    log::warn("engine", "--ssd-cache needs the prefix cache; the SSD tier is off");
    return;
  }
  if (!collect_block_tensors()) {
    log::warn("engine", "the SSD tier needs contiguous KV blocks; it is off");
    return;
  }
  kv::SsdStoreOptions so;
  so.dir = opts_.ssd_cache_dir;
  so.max_bytes = opts_.ssd_cache_max_bytes;
  so.verify_payload = opts_.ssd_cache_verify;
  ssd_ = std::make_unique<kv::SsdTier>(std::move(so), kMaxPendingSnapshotBytes);
}

void Engine::fill_ssd_stats(EngineStats& s) const {
  if (!ssd_) return;  // set once in the constructor: safe to read from any thread
  const kv::SsdTierStats t = ssd_->stats();
  s.ssd_cache_enabled = t.enabled;
  s.ssd_cache_entries = t.entries;
  s.ssd_cache_bytes = t.bytes;
  s.ssd_cache_hits = t.hits;
  s.ssd_cache_misses = t.misses;
  s.ssd_cache_hit_tokens = t.hit_tokens;
  s.ssd_cache_writes = t.writes;
  s.ssd_cache_write_failures = t.write_failures;
  s.ssd_cache_quarantined = t.quarantined;
  s.ssd_cache_evictions = t.evictions;
  s.ssd_cache_dropped = t.dropped;
}

kv::SsdLayout Engine::ssd_layout() const {
  const auto& layers = runner_.storage().layers();
  kv::SsdLayout l;
  l.n_layers = static_cast<int32_t>(layers.size());
  l.block_size = runner_.block_size();
  l.n_kv_heads = layers.empty() ? 0 : static_cast<int32_t>(layers[0].k.dim(2));
  l.head_dim = layers.empty() ? 0 : static_cast<int32_t>(layers[0].k.dim(3));
  l.dtype = runner_.storage().dtype();
  l.tensor_bytes.assign(blocks_.bytes.begin(), blocks_.bytes.end());
  if (runner_.has_sliding_space()) {  // n_layers counts both spaces' layers
    l.n_layers += static_cast<int32_t>(runner_.sliding_storage()->layers().size());
    l.tensor_bytes.insert(l.tensor_bytes.end(), swa_blocks_.bytes.begin(), swa_blocks_.bytes.end());
    l.sliding.n_tensors = static_cast<uint32_t>(swa_blocks_.tensors.size());
    l.sliding.window = runner_.sliding_window();
  }
  return l;
}

void Engine::ssd_snapshot(const Sequence& s) {
  if (!ssd_ || !cache_ || !ssd_snapshots_ || !ssd_->store().enabled()) return;
  const int32_t bs = runner_.block_size();
  const int64_t n_full = std::min(s.num_computed_tokens, s.n_tokens()) / bs;
  if (n_full <= 0) return;
  std::vector<kv::BlockId> held;
  const int64_t n = cache_->match(s.cache_namespace, s.tokens, n_full, held);
  auto release_held = [&] {
    for (auto it = held.rbegin(); it != held.rend(); ++it) cache_->release(*it);
  };
  if (n == 0) return release_held();
  const std::vector<kv::BlockKey> keys = cache_->block_keys(s.cache_namespace, s.tokens, n);
  // Sliding space: where the sliding cache holds each block, and the deepest prefixes whose window it holds.
  const std::vector<kv::BlockId> swa = sliding_on_device(s, keys);
  std::vector<bool> have(swa.size());
  for (size_t j = 0; j < swa.size(); ++j) have[j] = swa[j] >= 0;
  // Two prefix lengths: every cached block (the next turn of a conversation extends it), and the blocks a
  // resend of the same prompt looks up (never its last token).
  kv::SsdSnapshot snap;
  for (int64_t nb : {n, std::min<int64_t>((s.n_prompt - 1) / bs, n)}) {
    if (swa_cache_ && nb > 0) nb = deepest_with_window(nb, have);
    const kv::SsdEntryKey key{s.cache_namespace, keys[static_cast<size_t>(std::max<int64_t>(nb, 1) - 1)]};
    if (nb <= 0 || (!snap.targets.empty() && snap.targets[0].key == key) || !ssd_->wants(key)) continue;
    snap.targets.push_back({key, nb, swa_cache_ ? window_first_block(nb) : 0, {}});
    snap.n_blocks = std::max(snap.n_blocks, nb);
  }
  size_t bytes = blocks_.per_block() * static_cast<size_t>(snap.n_blocks);
  for (const auto& t : snap.targets)
    bytes += swa_blocks_.per_block() * static_cast<size_t>(t.n_blocks - t.swa_first_block);
  if (snap.targets.empty() || !ssd_->has_room(bytes)) return release_held();
  snap.layout = ssd_layout();
  snap.tokens.assign(s.tokens.begin(), s.tokens.begin() + snap.n_blocks * bs);
  kernels::Context ctx;
  const bool cpu = runner_.device().is_cpu();
  // Blocks ids[0..n) of every tensor of `space`, into one buffer per tensor ([n, block bytes]).
  auto copy_out = [&](const BlockSpace& space, std::span<const kv::BlockId> ids) {
    std::vector<std::vector<std::byte>> out;
    for (size_t i = 0; i < space.tensors.size(); ++i) {
      const size_t bb = space.bytes[i];
      std::vector<std::byte> buf(bb * ids.size());
      for (size_t j = 0; j < ids.size(); ++j) {
        const auto* src = static_cast<const std::byte*>(space.tensors[i]->data) + static_cast<size_t>(ids[j]) * bb;
        if (cpu) std::memcpy(buf.data() + j * bb, src, bb);
        else kernels::copy_async(ctx, buf.data() + j * bb, src, bb);
      }
      out.push_back(std::move(buf));
    }
    return out;
  };
  try {
    if (!cpu) kernels::synchronize(runner_.context());  // queued RAM-tier copies into these blocks land first
    snap.tensors = copy_out(blocks_, std::span<const kv::BlockId>(held).first(static_cast<size_t>(snap.n_blocks)));
    for (auto& t : snap.targets)  // nothing runs between the lookup and this copy: the entries stay put
      if (swa_cache_)
        t.swa_tensors = copy_out(swa_blocks_, std::span<const kv::BlockId>(swa).subspan(
                                                  static_cast<size_t>(t.swa_first_block),
                                                  static_cast<size_t>(t.n_blocks - t.swa_first_block)));
    if (!cpu) kernels::synchronize(ctx);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: snapshot copy failed: %s", e.what()));
    return release_held();
  }
  release_held();
  ssd_->submit(std::move(snap));
}

void Engine::ssd_restore_waiting() {
  const bool ssd = ssd_ && cache_ && ssd_->store().enabled();
  if (!ssd && !ram_.tier) return;
  auto slots = opts_.max_batch - static_cast<int64_t>(scheduler_.running().size());
  for (Sequence* s : scheduler_.waiting()) {
    if (slots-- <= 0) break;
    if (s->num_cached_tokens >= 0 || !ssd_probed_.insert(s->id).second) continue;  // preempted or seen
    if (ram_.tier) ram_restore(*s);  // RAM first: what it restores, the disk lookup then finds on the device
    if (ssd) ssd_restore(*s);
  }
}

std::optional<kv::SsdEntry> Engine::ssd_lookup(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t above,
                                               int64_t& n) {
  const kv::SsdLayout per_block = ssd_layout();
  for (auto nb = static_cast<int64_t>(keys.size()); nb > above; --nb) {
    const kv::SsdEntryKey key{s.cache_namespace, keys[static_cast<size_t>(nb - 1)]};
    if (!ssd_->store().contains(key)) continue;
    std::optional<kv::SsdEntry> entry = ssd_->store().get(key);  // nullopt when damaged (quarantined by the store)
    if (entry && entry_usable(*entry, per_block, s.tokens, nb, swa_cache_ ? window_first_block(nb) : 0)) {
      n = nb;
      return entry;
    }
  }
  n = 0;
  return std::nullopt;
}

void Engine::ssd_restore(const Sequence& s) {
  const int32_t bs = runner_.block_size();
  const int64_t max_blocks = (s.n_tokens() - 1) / bs;  // the last token always runs
  if (max_blocks <= 0) return;
  std::vector<kv::BlockId> blocks;
  const int64_t d = cache_->match(s.cache_namespace, s.tokens, max_blocks, blocks);
  auto release_all = [&] {
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cache_->release(*it);
  };
  const std::vector<kv::BlockKey> keys = cache_->block_keys(s.cache_namespace, s.tokens, max_blocks);
  // Sliding space: the hit the device alone allows is the deepest one whose window the sliding cache holds.
  const std::vector<kv::BlockId> on_device = sliding_on_device(s, keys);
  int64_t before = d;
  if (swa_cache_) {
    std::vector<bool> have(on_device.size());
    for (size_t j = 0; j < have.size(); ++j) have[j] = on_device[j] >= 0;
    before = deepest_with_window(d, have);
  }
  if (before == max_blocks) return release_all();
  int64_t n = 0;
  const std::optional<kv::SsdEntry> entry = ssd_lookup(s, keys, before, n);
  if (swa_cache_ && n - d > cache_->n_available()) n = 0;  // its window fits this length only
  n = std::min<int64_t>(n, d + cache_->n_available());
  // Sliding space: hold the window blocks the device has; the others come from the file into fresh blocks.
  std::vector<kv::BlockId> swa_held;
  std::vector<int64_t> swa_missing;  // block indices
  const int64_t first = swa_cache_ && entry && n > before ? window_first_block(n) : n;
  for (int64_t j = first; j < n; ++j) {
    const kv::BlockId id = on_device[static_cast<size_t>(j)];
    if (id >= 0) {
      swa_cache_->acquire(id);
      swa_held.push_back(id);
    } else {
      swa_missing.push_back(j);
    }
  }
  auto release_swa = [&] {
    for (kv::BlockId id : swa_held) swa_cache_->release(id);
  };
  if (!entry || n <= before || (swa_cache_ && static_cast<int64_t>(swa_missing.size()) > swa_cache_->n_available())) {
    ssd_->count_lookup(false, 0);
    release_swa();
    return release_all();
  }
  std::vector<kv::BlockId> fresh_swa;
  try {
    std::vector<kernels::HostToDevice> ranges;
    for (int64_t j = d; j < n; ++j) {
      blocks.push_back(*cache_->allocate());
      for (size_t i = 0; i < blocks_.tensors.size(); ++i) {
        const size_t bb = blocks_.bytes[i];
        ranges.push_back({static_cast<std::byte*>(blocks_.tensors[i]->data) + static_cast<size_t>(blocks.back()) * bb,
                          entry->tensors[i].data() + static_cast<size_t>(j) * bb, bb});
      }
    }
    for (int64_t j : swa_missing) {  // the file's sliding tensors follow the full space's, from block `first`
      fresh_swa.push_back(*swa_cache_->allocate());
      for (size_t i = 0; i < swa_blocks_.tensors.size(); ++i) {
        const size_t bb = swa_blocks_.bytes[i];
        auto* dst = static_cast<std::byte*>(swa_blocks_.tensors[i]->data) + static_cast<size_t>(fresh_swa.back()) * bb;
        ranges.push_back({dst, entry->tensors[blocks_.tensors.size() + i].data() + static_cast<size_t>(j - first) * bb,
                          bb});
      }
    }
    if (runner_.device().is_cpu()) {
      for (const auto& r : ranges) std::memcpy(r.dst, r.src, r.bytes);
    } else {
      // The RAM tier's copies (out of evicted blocks, into restored ones) are queued on the runner's
      // non-blocking stream; the upload (another stream) must not overtake them on these blocks.
      kernels::synchronize(runner_.context());
      kernels::upload(runner_.device(), ranges, kUploadChunkBytes);
    }
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: restore failed: %s", e.what()));
    ssd_->count_lookup(false, 0);
    for (kv::BlockId id : fresh_swa) swa_cache_->release(id);  // not cached: back to the free list
    release_swa();
    return release_all();  // the new blocks are not cached: they go back to the free list
  }
  for (size_t k = 0; k < swa_missing.size(); ++k) {
    const int64_t j = swa_missing[k];
    swa_cache_->release_keyed(keys[static_cast<size_t>(j)], j > 0 ? keys[static_cast<size_t>(j - 1)] : 0,
                              std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(j * bs), bs),
                              fresh_swa[k]);
  }
  release_swa();
  const auto n_tok = static_cast<size_t>(std::max(n, d) * bs);
  cache_->release_sequence(s.cache_namespace, std::span<const int32_t>(s.tokens.data(), n_tok),
                           static_cast<int64_t>(n_tok), blocks);
  ssd_->count_lookup(true, (n - before) * bs);
}

}  // namespace bunsen::engine
