// Engine <-> SSD tier of the prefix cache (kv/ssd_tier.h). Snapshots: when a request ends, the blocks of its
// tokens that the device cache holds are copied (engine thread: each block's K, V (and, for quantized
// layers, their scale/bias tensors) per layer; a memcpy on the CPU, device-to-host copies on CUDA) into a
// buffer the writer thread owns and writes; no disk I/O here. Two prefix lengths are written from one copy:
// all cached blocks (a conversation's next turn) and the prompt's lookup length (the same prompt again).
// Restores are jobs (engine/restore_pool.h): before a step admits waiting sequences, a prompt the device cache
// does not fully cover is looked up in the disk index (no I/O), longest block-aligned prefix first; on a hit
// the engine thread allocates and holds the destination blocks (not yet cached), hands a job to the restore
// workers and holds the sequence out of admission (Scheduler::set_held) while everything else keeps stepping.
// A worker maps the file and checks its header and tokens; then all workers copy the payload in pieces and
// (--ssd-cache-verify) checksum its tensors in parallel. Every step polls the jobs without blocking: a done
// one has its blocks inserted into the device cache under their keys and the sequence released, so admission
// hits them; a failed one (unreadable, damaged -> quarantined, other layout) or a cancelled one releases the
// blocks and the prompt is prefilled. A prompt whose next missing block another job is restoring waits for
// that job (held too) and is looked up again when it ends. Not the scheduler: only PrefixCache::match/allocate/release are used.
// The RAM tier (engine_ram.cpp) is consulted first for the same sequences.
// Hybrid models (linear-attention state checkpoints, engine_state.cpp): a snapshot target is written only where
// the device holds a checkpoint at its end, and carries that checkpoint as extra tensors (a version-3 file under
// ssd_namespace(), so a file without the state is never looked up); a restore aims past the deepest device
// checkpoint, reserves a checkpoint slot, copies the file's state into it with the blocks (its checksums always
// verified: a bad state would corrupt every later token) and commits it under the last block's key when the job
// is done, so admission resumes the DeltaNet layers from it; a failed job frees the slot and the prompt is
// prefilled.
// Runners with a sliding-window block space: each snapshot target also carries the sliding blocks of the
// window at its end (a version-2 file, kv/ssd_format.h), cut back to the deepest prefix whose window the
// sliding cache still holds; a restore brings those back into the sliding cache with the full-space blocks,
// and is taken only when it makes a hit deeper than the device alone allows (engine_tiers.cpp).
// Cost: the engine thread pays an index lookup and the block allocation; nothing on the decode loop waits for
// the disk. The restoring request waits for its job: on CUDA the workers read the mapping (page cache or
// disk) into a ring of pinned staging buffers and copy them to the device on a copy stream of their own, so
// parallel page-cache reads and PCIe transfers overlap; on the CPU they memcpy straight into the pool.
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "engine/engine.h"
#include "kernels/device.h"

namespace bunsen::engine {
namespace {

constexpr size_t kMaxPendingSnapshotBytes = size_t{2} << 30;  // host bytes waiting for the writer
constexpr size_t kRestorePieceBytes = size_t{32} << 20;  // per staging buffer (CUDA) and per worker task

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
  if (sp.n_tensors != per_block.sliding.n_tensors || l.state != per_block.state) return false;
  if (sp.n_tensors > 0 &&
      (sp.window != per_block.sliding.window || sp.first_block != static_cast<uint64_t>(swa_first) ||
       sp.n_blocks != static_cast<uint64_t>(n_blocks - swa_first)))
    return false;
  const size_t n_full = l.tensor_bytes.size() - sp.n_tensors - l.state.n_tensors;
  const size_t n_state_end = n_full + l.state.n_tensors;  // state tensors: whole, not per block
  for (size_t i = 0; i < l.tensor_bytes.size(); ++i) {
    const uint64_t times = i < n_full ? static_cast<uint64_t>(n_blocks) : i < n_state_end ? 1 : sp.n_blocks;
    if (l.tensor_bytes[i] != per_block.tensor_bytes[i] * times) return false;
  }
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
  RestorePoolOptions ro;
  ro.device = runner_.device();
  ro.threads = opts_.ssd_restore_threads;
  ro.piece_bytes = kRestorePieceBytes;
  ro.job_hook = opts_.ssd_restore_hook;
  try {
    restore_pool_ = std::make_unique<RestorePool>(std::move(ro));
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: cannot start the restore workers (%s); restores are off", e.what()));
  }
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
  s.ssd_cache_restored_bytes = t.restored_bytes;
  s.ssd_cache_restore_s = t.restore_s;
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
  if (checkpoints_) {  // hybrids: the checkpoint's parts (per linear layer conv, recurrent) after the K/V
    for (const std::span<std::byte> p : runner_.checkpoint_parts(0)) l.tensor_bytes.push_back(p.size());
    l.state.n_tensors = static_cast<uint32_t>(l.tensor_bytes.size() - blocks_.bytes.size());
  }
  if (runner_.has_sliding_space()) {  // n_layers counts both spaces' layers
    l.n_layers += static_cast<int32_t>(runner_.sliding_storage()->layers().size());
    l.tensor_bytes.insert(l.tensor_bytes.end(), swa_blocks_.bytes.begin(), swa_blocks_.bytes.end());
    l.sliding.n_tensors = static_cast<uint32_t>(swa_blocks_.tensors.size());
    l.sliding.window = runner_.sliding_window();
  }
  return l;
}

uint64_t Engine::ssd_namespace(uint64_t ns) const {
  return checkpoints_ ? kv::PrefixCache::chain_key(ns, 0x4c696e5374617465ull /* "LinState" */, std::vector<int32_t>{3})
                      : ns;
}

int64_t Engine::deepest_checkpoint(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t n) const {
  const auto bs = static_cast<size_t>(runner_.block_size());
  for (int64_t d = n; d > 0; --d) {
    const auto j = static_cast<size_t>(d - 1);
    if (checkpoints_->holds(keys[j], j > 0 ? keys[j - 1] : 0, std::span<const int32_t>(s.tokens).subspan(j * bs, bs)))
      return d;
  }
  return 0;
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
  // Hybrids: only prefixes with a checkpoint at their end (the prompt's last full block) can be resumed.
  kv::SsdSnapshot snap;
  std::vector<int32_t> ckpt;  // hybrids: the checkpoint slot of each target
  for (int64_t nb : {n, std::min<int64_t>((s.n_prompt - 1) / bs, n)}) {
    if (swa_cache_ && nb > 0) nb = deepest_with_window(nb, have);
    const auto last = static_cast<size_t>(std::max<int64_t>(nb, 1) - 1);
    const kv::SsdEntryKey key{ssd_namespace(s.cache_namespace), keys[last]};
    if (nb <= 0 || (!snap.targets.empty() && snap.targets[0].key == key) || !ssd_->wants(key)) continue;
    if (checkpoints_) {
      const std::optional<int32_t> slot = checkpoints_->peek(
          keys[last], last > 0 ? keys[last - 1] : 0,
          std::span<const int32_t>(s.tokens).subspan(last * static_cast<size_t>(bs), static_cast<size_t>(bs)));
      if (!slot) continue;
      ckpt.push_back(*slot);
    }
    snap.targets.push_back({key, nb, swa_cache_ ? window_first_block(nb) : 0, {}, {}});
    snap.n_blocks = std::max(snap.n_blocks, nb);
  }
  size_t bytes = blocks_.per_block() * static_cast<size_t>(snap.n_blocks);
  for (const auto& t : snap.targets)
    bytes += swa_blocks_.per_block() * static_cast<size_t>(t.n_blocks - t.swa_first_block) +
             (checkpoints_ ? runner_.checkpoint_bytes() : 0);
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
    for (size_t i = 0; i < ckpt.size(); ++i)  // hybrids: each target's checkpoint, part by part
      for (const std::span<std::byte> p : runner_.checkpoint_parts(ckpt[i])) {
        std::vector<std::byte> buf(p.size());
        if (cpu) std::memcpy(buf.data(), p.data(), p.size());
        else kernels::copy_async(ctx, buf.data(), p.data(), p.size());
        snap.targets[i].state_tensors.push_back(std::move(buf));
      }
    if (!cpu) kernels::synchronize(ctx);
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: snapshot copy failed: %s", e.what()));
    return release_held();
  }
  release_held();
  ssd_->submit(std::move(snap));
}

void Engine::ssd_poll_restores() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    restore_done_ = false;
  }
  // Done jobs first: their blocks enter the cache before this step's admission looks for them.
  for (size_t i = 0; i < ssd_restores_.size();) {
    if (!ssd_restores_[i].job->done()) {
      ++i;
      continue;
    }
    ssd_finish_restore(ssd_restores_[i]);
    ssd_restores_.erase(ssd_restores_.begin() + static_cast<std::ptrdiff_t>(i));
    for (SeqId id : ssd_followers_) {  // looked up again this step: the device cache may now cover them
      scheduler_.set_held(id, false);
      ssd_probed_.erase(id);
    }
    ssd_followers_.clear();
  }
  counters_.ssd_cache_restores_pending = static_cast<int64_t>(ssd_restores_.size());
}

void Engine::ssd_restore_waiting() {
  const bool ssd = ssd_ && cache_ && restore_pool_ && ssd_->store().enabled();
  if (!ssd && !ram_.tier) return;
  auto slots = opts_.max_batch - static_cast<int64_t>(scheduler_.running().size());
  for (Sequence* s : scheduler_.waiting()) {
    if (slots-- <= 0) break;
    if (s->num_cached_tokens >= 0 || !ssd_probed_.insert(s->id).second) continue;  // preempted or seen
    if (ram_.tier) ram_restore(*s);  // RAM first: what it restores, the disk lookup then finds on the device
    if (ssd) ssd_restore(*s);
  }
  counters_.ssd_cache_restores_pending = static_cast<int64_t>(ssd_restores_.size());
}

int64_t Engine::ssd_lookup(const Sequence& s, std::span<const kv::BlockKey> keys, int64_t above) {
  for (auto nb = static_cast<int64_t>(keys.size()); nb > above; --nb)
    if (ssd_->store().contains(kv::SsdEntryKey{ssd_namespace(s.cache_namespace), keys[static_cast<size_t>(nb - 1)]}))
      return nb;
  return 0;
}

namespace {

// Where a restore's bytes go: tensor i of pool block b at base[i] + b * bytes[i].
struct RestoreDst {
  std::vector<std::byte*> base;
  std::vector<size_t> bytes;
};

RestoreDst restore_dst(const std::vector<const Tensor*>& tensors, const std::vector<size_t>& bytes) {
  RestoreDst d;
  for (const Tensor* t : tensors) d.base.push_back(static_cast<std::byte*>(t->data));
  d.bytes = bytes;
  return d;
}

// Copies of file blocks pos[k] (src block index pos[k] - src_first of each tensor) into pool blocks ids[k]
// for every tensor of `dst` (file tensor file_first + i); runs where both sides are consecutive are one copy.
void plan_copies(const kv::SsdEntry& e, size_t file_first, const RestoreDst& dst, std::span<const int64_t> pos,
                 int64_t src_first, std::span<const kv::BlockId> ids, std::vector<RestoreCopy>& out) {
  for (size_t i = 0; i < dst.base.size(); ++i) {
    const size_t bb = dst.bytes[i];
    for (size_t k = 0; k < ids.size();) {
      size_t m = k + 1;
      while (m < ids.size() && ids[m] == ids[m - 1] + 1 && pos[m] == pos[m - 1] + 1) ++m;
      out.push_back({dst.base[i] + static_cast<size_t>(ids[k]) * bb,
                     e.tensors[file_first + i].data() + static_cast<size_t>(pos[k] - src_first) * bb, (m - k) * bb});
      k = m;
    }
  }
}

}  // namespace

void Engine::ssd_restore(const Sequence& s) {
  const int32_t bs = runner_.block_size();
  const int64_t max_blocks = (s.n_tokens() - 1) / bs;  // the last token always runs
  if (max_blocks <= 0) return;
  SsdRestore r;
  r.seq = s.id;
  r.ns = s.cache_namespace;
  const int64_t d = cache_->match(s.cache_namespace, s.tokens, max_blocks, r.blocks);
  r.keys = cache_->block_keys(s.cache_namespace, s.tokens, max_blocks);
  // Sliding space: the hit the device alone allows is the deepest one whose window the sliding cache holds.
  const std::vector<kv::BlockId> on_device = sliding_on_device(s, r.keys);
  int64_t before = d;
  if (swa_cache_) {
    std::vector<bool> have(on_device.size());
    for (size_t j = 0; j < have.size(); ++j) have[j] = on_device[j] >= 0;
    before = deepest_with_window(d, have);
  }
  // Hybrids: the device alone allows a hit up to its deepest checkpoint.
  if (checkpoints_) before = deepest_checkpoint(s, r.keys, d);
  auto release_all = [&] {
    for (kv::BlockId id : r.swa_held) swa_cache_->release(id);
    for (kv::BlockId id : r.fresh_swa) swa_cache_->release(id);  // not cached: back to the free list
    for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) cache_->release(*it);
    if (r.checkpoint >= 0) checkpoints_->unreserve(r.checkpoint);
  };
  if (before == max_blocks) return release_all();
  const int64_t have = checkpoints_ ? before : d;  // hybrids lack the state past their deepest checkpoint
  for (const SsdRestore& f : ssd_restores_) {
    const auto j = static_cast<size_t>(have);  // the first block s lacks on the device
    if (f.ns == r.ns && f.n > have && j < f.keys.size() && f.keys[j] == r.keys[j]) {
      // Another request's job is restoring it: wait for that job (no second copy), then look again.
      ssd_followers_.push_back(s.id);
      scheduler_.set_held(s.id, true);
      return release_all();
    }
  }
  int64_t n = ssd_lookup(s, r.keys, before);
  // Its window (sliding space) or its state (hybrids) fits this length only.
  if ((swa_cache_ || checkpoints_) && n - d > cache_->n_available()) n = 0;
  n = std::min<int64_t>(n, d + cache_->n_available());
  // Sliding space: hold the window blocks the device has; the others come from the file into fresh blocks.
  const int64_t first = swa_cache_ && n > before ? window_first_block(n) : n;
  for (int64_t j = first; j < n; ++j) {
    const kv::BlockId id = on_device[static_cast<size_t>(j)];
    if (id >= 0) {
      swa_cache_->acquire(id);
      r.swa_held.push_back(id);
    } else {
      r.swa_missing.push_back(j);
    }
  }
  if (checkpoints_ && n > before) {  // the slot the file's state goes to: nobody finds or replaces it meanwhile
    const std::optional<int32_t> slot = checkpoints_->reserve();
    if (!slot) n = 0;
    else r.checkpoint = *slot;
  }
  if (n <= before || (swa_cache_ && static_cast<int64_t>(r.swa_missing.size()) > swa_cache_->n_available())) {
    ssd_->count_lookup(false, 0);
    return release_all();
  }
  std::vector<int64_t> pos;  // file block of each fresh full-space block
  std::vector<kv::BlockId> fresh;
  try {
    for (int64_t j = d; j < n; ++j) {
      const std::optional<kv::BlockId> id = cache_->allocate();
      check(id.has_value(), "engine", "ssd restore: no block to allocate");
      fresh.push_back(*id);
      pos.push_back(j);
    }
    for (size_t k = 0; k < r.swa_missing.size(); ++k) {
      const std::optional<kv::BlockId> id = swa_cache_->allocate();
      check(id.has_value(), "engine", "ssd restore: no sliding block to allocate");
      r.fresh_swa.push_back(*id);
    }
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: restore failed: %s", e.what()));
    ssd_->count_lookup(false, 0);
    for (kv::BlockId id : fresh) cache_->release(id);
    return release_all();
  }
  // Ascending ids: blocks fresh from the free list are mostly consecutive, so whole runs are one copy each.
  std::sort(fresh.begin(), fresh.end());
  std::sort(r.fresh_swa.begin(), r.fresh_swa.end());
  r.blocks.insert(r.blocks.end(), fresh.begin(), fresh.end());
  r.d = d;
  r.before = before;
  r.n = n;
  r.tokens.assign(s.tokens.begin(), s.tokens.begin() + std::max(n, d) * bs);
  // What the worker needs, by value: the engine may change anything else meanwhile.
  // Hybrids: the file's state tensors (after the K/V ones) go to the reserved checkpoint slot's parts.
  std::vector<std::span<std::byte>> state_dst;
  if (r.checkpoint >= 0) state_dst = runner_.checkpoint_parts(r.checkpoint);
  auto prepare = [store = &ssd_->store(),
                  key = kv::SsdEntryKey{ssd_namespace(s.cache_namespace), r.keys[static_cast<size_t>(n - 1)]},
                  per_block = ssd_layout(), tokens = r.tokens, n, swa_first = swa_cache_ ? first : int64_t{0},
                  full = restore_dst(blocks_.tensors, blocks_.bytes), swa = restore_dst(swa_blocks_.tensors, swa_blocks_.bytes),
                  pos = std::move(pos), fresh = std::move(fresh), swa_pos = r.swa_missing, fresh_swa = r.fresh_swa,
                  state_dst = std::move(state_dst),
                  verify = opts_.ssd_cache_verify](std::string& why) -> std::optional<RestorePlan> {
    std::optional<kv::SsdEntry> e = store->get_unverified(key);  // maps; header + tokens checked
    if (!e) {
      why = "the snapshot is unreadable or damaged";
      return std::nullopt;
    }
    if (!entry_usable(*e, per_block, tokens, n, swa_first)) {
      why = "the snapshot does not match this engine's KV layout";
      return std::nullopt;
    }
    RestorePlan p;
    plan_copies(*e, 0, full, pos, 0, fresh, p.copies);
    // The file's state tensors follow the full space's (state_dst.size() == the layout's, entry_usable checked).
    const size_t n_state = state_dst.size();
    for (size_t i = 0; i < n_state; ++i) {
      const std::span<const std::byte> src = e->tensors[full.base.size() + i];
      p.copies.push_back({state_dst[i].data(), src.data(), src.size()});
      if (!verify) p.checks.push_back({src, e->checksums[full.base.size() + i]});  // always: see the file comment
    }
    // The file's sliding tensors follow those, from block swa_first.
    plan_copies(*e, full.base.size() + n_state, swa, swa_pos, swa_first, fresh_swa, p.copies);
    if (verify)
      for (size_t t = 0; t < e->tensors.size(); ++t) p.checks.push_back({e->tensors[t], e->checksums[t]});
    p.keep_alive = e->mapping;
    p.on_check_failed = [store, entry = *e](const std::string& what) { store->reject(entry, what); };
    return p;
  };
  kernels::DeviceEvent after;
  try {  // the RAM tier's copies out of evicted blocks (the runner's stream) land before these blocks are written
    after = kernels::DeviceEvent::create(runner_.device());
    after.record(runner_.context());
    r.job = restore_pool_->submit(std::move(prepare), std::move(after), [this] {
      {
        std::lock_guard<std::mutex> lk(mu_);
        restore_done_ = true;
      }
      cv_.notify_one();
    });
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("ssd cache: restore failed: %s", e.what()));
    ssd_->count_lookup(false, 0);
    return release_all();
  }
  scheduler_.set_held(s.id, true);
  ssd_restores_.push_back(std::move(r));
}

void Engine::ssd_finish_restore(SsdRestore& r) {
  const RestoreJob& job = *r.job;
  const bool cancelled = job.cancelled();
  const bool ok = job.ok() && !cancelled;
  const auto bs = static_cast<size_t>(runner_.block_size());
  for (size_t k = 0; k < r.swa_missing.size(); ++k) {
    if (!ok) {
      swa_cache_->release(r.fresh_swa[k]);  // not cached: back to the free list
      continue;
    }
    const auto j = static_cast<size_t>(r.swa_missing[k]);
    swa_cache_->release_keyed(r.keys[j], j > 0 ? r.keys[j - 1] : 0,
                              std::span<const int32_t>(r.tokens).subspan(j * bs, bs), r.fresh_swa[k]);
  }
  for (kv::BlockId id : r.swa_held) swa_cache_->release(id);
  if (ok) {  // the device hit and the restored blocks go back to the cache, the restored ones under their keys
    cache_->release_sequence(r.ns, r.tokens, static_cast<int64_t>(r.tokens.size()), r.blocks);
  } else {  // the fresh blocks are not cached: they return to the free list
    for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) cache_->release(*it);
  }
  if (r.checkpoint >= 0 && ok) {  // hybrids: the restored state is the checkpoint of the prefix's last block
    const auto j = static_cast<size_t>(r.n - 1);
    checkpoints_->commit(r.checkpoint, r.keys[j], j > 0 ? r.keys[j - 1] : 0,
                         std::span<const int32_t>(r.tokens).subspan(j * bs, bs));
  } else if (r.checkpoint >= 0) {
    checkpoints_->unreserve(r.checkpoint);
  }
  r.checkpoint = -1;
  if (!cancelled) {
    if (!ok) log::warn("engine", strfmt("ssd cache: restore failed (%s); the prompt is prefilled", job.error().c_str()));
    ssd_->count_lookup(ok, ok ? (r.n - r.before) * static_cast<int64_t>(bs) : 0);
  }
  if (ok) ssd_->count_restore(job.seconds(), static_cast<int64_t>(job.bytes()));
  scheduler_.set_held(r.seq, false);
}

void Engine::ssd_cancel_restore(SeqId id) {
  for (SsdRestore& r : ssd_restores_)
    if (r.seq == id) r.job->cancel();  // its blocks are released once the job is done (ssd_poll_restores)
}

void Engine::ssd_drain_restores() {
  for (SsdRestore& r : ssd_restores_) {
    r.job->cancel();
    restore_pool_->wait(*r.job);
    ssd_finish_restore(r);
  }
  ssd_restores_.clear();
  ssd_followers_.clear();
  counters_.ssd_cache_restores_pending = 0;
}

}  // namespace bunsen::engine
