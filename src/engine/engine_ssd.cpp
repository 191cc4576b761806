// Engine <-> SSD tier of the prefix cache (kv/ssd_tier.h). Snapshots: when a request ends, the blocks of its
// tokens that the device cache holds are copied (engine thread: each block's K, V (and, for quantized
// layers, their scale/bias tensors) per layer; a memcpy on the CPU, device-to-host copies on CUDA) into a
// buffer the writer thread owns and writes; no disk I/O here. Two prefix lengths are written from one copy:
// all cached blocks (a conversation's next turn) and the prompt's lookup length (the same prompt again). Restores: before a step admits waiting sequences, a prompt the device cache does not fully
// cover is looked up on disk (index only), longest block-aligned prefix first; a hit maps the file, copies
// the payload into freshly allocated pool blocks (memcpy / staged upload) and inserts them into the device
// cache, so admission hits them. Not the scheduler: only PrefixCache::match/allocate/release are used.
// The RAM tier (engine_ram.cpp) is consulted first for the same sequences.
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

bool entry_usable(const kv::SsdEntry& e, const kv::SsdLayout& per_block, std::span<const int32_t> tokens,
                  int64_t n_blocks) {
  const auto n_tok = static_cast<size_t>(n_blocks * per_block.block_size);
  if (e.tokens.size() != n_tok || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) return false;
  const kv::SsdLayout& l = e.layout;
  if (l.n_layers != per_block.n_layers || l.block_size != per_block.block_size || l.dtype != per_block.dtype ||
      l.n_kv_heads != per_block.n_kv_heads || l.head_dim != per_block.head_dim ||
      l.tensor_bytes.size() != per_block.tensor_bytes.size() || e.tensors.size() != l.tensor_bytes.size())
    return false;
  for (size_t i = 0; i < l.tensor_bytes.size(); ++i)
    if (l.tensor_bytes[i] != per_block.tensor_bytes[i] * static_cast<uint64_t>(n_blocks)) return false;
  return true;
}

}  // namespace

bool Engine::collect_block_tensors() {
  if (!block_tensors_.empty()) return true;
  const kv::KvStorage& st = runner_.storage();
  // Every per-block tensor of every layer: K and V, plus their scale/bias tensors when quantized.
  for (const kv::KvLayerView& l : st.layers()) {
    for (const Tensor* t : {&l.k, &l.v, &l.k_params, &l.v_params}) {
      if (t->empty()) continue;
      const int64_t per_block = t->ndim == 4 ? t->dim(1) * t->dim(2) * t->dim(3) : -1;
      if (per_block <= 0 || t->stride(0) != per_block || !t->rows_contiguous()) {
        block_tensors_.clear();
        block_bytes_.clear();
        return false;
      }
      block_tensors_.push_back(t);
      block_bytes_.push_back(static_cast<size_t>(per_block) * dtype_size(t->dtype));
    }
  }
  // Equal block sizes at a constant distance (one packed region): copies of a block take one 2-D copy.
  block_pitch_ = 0;
  if (block_tensors_.size() > 1) {
    const auto* base = static_cast<const std::byte*>(block_tensors_[0]->data);
    const auto pitch = static_cast<const std::byte*>(block_tensors_[1]->data) - base;
    bool uniform = pitch > 0;
    for (size_t i = 0; i < block_tensors_.size() && uniform; ++i)
      uniform = block_bytes_[i] == block_bytes_[0] &&
                static_cast<const std::byte*>(block_tensors_[i]->data) - base == pitch * static_cast<ptrdiff_t>(i);
    if (uniform) block_pitch_ = static_cast<size_t>(pitch);
  }
  return true;
}

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
  l.tensor_bytes.assign(block_bytes_.begin(), block_bytes_.end());
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
  // Two prefix lengths: every cached block (the next turn of a conversation extends it), and the blocks a
  // resend of the same prompt looks up (never its last token).
  kv::SsdSnapshot snap;
  for (int64_t nb : {n, std::min<int64_t>((s.n_prompt - 1) / bs, n)}) {
    const kv::SsdEntryKey key{s.cache_namespace, keys[static_cast<size_t>(std::max<int64_t>(nb, 1) - 1)]};
    if (nb <= 0 || (!snap.targets.empty() && snap.targets[0].key == key) || !ssd_->wants(key)) continue;
    snap.targets.push_back({key, nb});
    snap.n_blocks = std::max(snap.n_blocks, nb);
  }
  size_t per_block = 0;
  for (size_t b : block_bytes_) per_block += b;
  if (snap.targets.empty() || !ssd_->has_room(per_block * static_cast<size_t>(snap.n_blocks))) return release_held();
  snap.layout = ssd_layout();
  snap.tokens.assign(s.tokens.begin(), s.tokens.begin() + snap.n_blocks * bs);
  kernels::Context ctx;
  try {
    for (size_t i = 0; i < block_bytes_.size(); ++i) {
      const Tensor& t = *block_tensors_[i];
      const size_t bb = block_bytes_[i];
      std::vector<std::byte> buf(bb * static_cast<size_t>(snap.n_blocks));
      for (int64_t j = 0; j < snap.n_blocks; ++j) {
        const auto* src = static_cast<const std::byte*>(t.data) + static_cast<size_t>(held[j]) * bb;
        if (runner_.device().is_cpu())
          std::memcpy(buf.data() + static_cast<size_t>(j) * bb, src, bb);
        else
          kernels::copy_async(ctx, buf.data() + static_cast<size_t>(j) * bb, src, bb);
      }
      snap.tensors.push_back(std::move(buf));
    }
    if (!runner_.device().is_cpu()) kernels::synchronize(ctx);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: snapshot copy failed: %s", e.what()));
    return release_held();
  }
  release_held();
  ssd_->submit(std::move(snap));
}

void Engine::ssd_restore_waiting() {
  const bool ssd = ssd_ && cache_ && ssd_->store().enabled();
  if (!ssd && !ram_) return;
  auto slots = opts_.max_batch - static_cast<int64_t>(scheduler_.running().size());
  for (Sequence* s : scheduler_.waiting()) {
    if (slots-- <= 0) break;
    if (s->num_cached_tokens >= 0 || !ssd_probed_.insert(s->id).second) continue;  // preempted or seen
    if (ram_) ram_restore(*s);  // RAM first: what it restores, the disk lookup then finds on the device
    if (ssd) ssd_restore(*s);
  }
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
  if (d == max_blocks) return release_all();
  const std::vector<kv::BlockKey> keys = cache_->block_keys(s.cache_namespace, s.tokens, max_blocks);
  const kv::SsdLayout per_block = ssd_layout();
  std::optional<kv::SsdEntry> entry;
  int64_t n = 0;
  for (int64_t nb = max_blocks; nb > d && !entry; --nb) {
    const kv::SsdEntryKey key{s.cache_namespace, keys[static_cast<size_t>(nb - 1)]};
    if (!ssd_->store().contains(key)) continue;
    entry = ssd_->store().get(key);  // nullopt when damaged (quarantined by the store)
    if (entry && !entry_usable(*entry, per_block, s.tokens, nb)) entry.reset();
    n = entry ? nb : 0;
  }
  n = std::min<int64_t>(n, d + cache_->n_available());
  if (!entry || n <= d) {
    ssd_->count_lookup(false, 0);
    return release_all();
  }
  try {
    std::vector<kernels::HostToDevice> ranges;
    for (int64_t j = d; j < n; ++j) {
      blocks.push_back(*cache_->allocate());
      for (size_t i = 0; i < block_bytes_.size(); ++i) {
        const Tensor& t = *block_tensors_[i];
        const size_t bb = block_bytes_[i];
        ranges.push_back({static_cast<std::byte*>(t.data) + static_cast<size_t>(blocks.back()) * bb,
                          entry->tensors[i].data() + static_cast<size_t>(j) * bb, bb});
      }
    }
    if (runner_.device().is_cpu())
      for (const auto& r : ranges) std::memcpy(r.dst, r.src, r.bytes);
    else
      kernels::upload(runner_.device(), ranges, kUploadChunkBytes);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: restore failed: %s", e.what()));
    ssd_->count_lookup(false, 0);
    return release_all();  // the new blocks are not cached: they go back to the free list
  }
  const auto n_tok = static_cast<size_t>(n * bs);
  cache_->release_sequence(s.cache_namespace, std::span<const int32_t>(s.tokens.data(), n_tok),
                           static_cast<int64_t>(n_tok), blocks);
  ssd_->count_lookup(true, (n - d) * bs);
}

}  // namespace bunsen::engine
