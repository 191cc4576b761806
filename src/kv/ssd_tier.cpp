// SsdTier: queue + one writer thread over SsdStore, debouncing and counters. Not I/O itself (SsdStore does
// every file operation and its own failure handling: a failed put disables the tier, later puts are
// no-ops). Invariants: pending_bytes_ == sum of bytes() of the queued snapshots plus the one being written.
#include "kv/ssd_tier.h"

#include "core/log.h"
#include "core/status.h"

namespace bunsen::kv {

size_t SsdSnapshot::bytes() const {
  size_t n = tokens.size() * sizeof(int32_t);
  for (const auto& t : tensors) n += t.size();
  for (const Target& t : targets)
    for (const auto& b : t.swa_tensors) n += b.size();
  for (const Target& t : targets)
    for (const auto& b : t.state_tensors) n += b.size();
  return n;
}

SsdTier::SsdTier(SsdStoreOptions options, size_t max_pending_bytes)
    : store_(std::move(options)), max_pending_bytes_(max_pending_bytes) {
  refresh_store_stats();
  thread_ = std::thread([this] { run(); });
}

SsdTier::~SsdTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool SsdTier::wants(const SsdEntryKey& key) const {
  if (!store_.enabled()) return false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (seen_.count(key)) return false;
  }
  return !store_.contains(key);
}

bool SsdTier::has_room(size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (pending_bytes_ + bytes <= max_pending_bytes_) return true;
  ++dropped_;
  return false;
}

bool SsdTier::submit(SsdSnapshot snapshot) {
  if (!store_.enabled()) return false;
  const size_t bytes = snapshot.bytes();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return false;
    if (pending_bytes_ + bytes > max_pending_bytes_) {
      ++dropped_;
      return false;
    }
    std::vector<SsdSnapshot::Target> wanted;
    for (const auto& t : snapshot.targets)
      if (seen_.insert(t.key).second) wanted.push_back(t);
    if (wanted.empty()) return false;
    snapshot.targets = std::move(wanted);
    pending_bytes_ += bytes;
    queue_.push_back(std::move(snapshot));
  }
  cv_.notify_one();
  return true;
}

void SsdTier::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

void SsdTier::count_lookup(bool hit, int64_t restored_tokens) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (hit) {
      ++hits_;
      hit_tokens_ += restored_tokens;
    } else {
      ++misses_;
    }
  }
  refresh_store_stats();  // a lookup may have quarantined a file
}

void SsdTier::count_restore(double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  restore_s_ += seconds;
  restored_bytes_ += bytes;
}

// The store's numbers are read here, where waiting on its lock (held across a directory fsync) is fine,
// and cached for stats(), which the engine loop calls every step.
void SsdTier::refresh_store_stats() {
  SsdTierStats s;
  const SsdStats st = store_.stats();
  s.enabled = store_.enabled();
  s.entries = static_cast<int64_t>(store_.entries());
  s.bytes = static_cast<int64_t>(store_.bytes_used());
  s.writes = static_cast<int64_t>(st.writes);
  s.write_failures = static_cast<int64_t>(st.write_failures);
  s.quarantined = static_cast<int64_t>(st.quarantined);
  s.evictions = static_cast<int64_t>(st.evictions);
  std::lock_guard<std::mutex> lk(mu_);
  store_stats_ = s;
}

SsdTierStats SsdTier::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  SsdTierStats s = store_stats_;
  s.hits = hits_;
  s.misses = misses_;
  s.hit_tokens = hit_tokens_;
  s.dropped = dropped_;
  s.restored_bytes = restored_bytes_;
  s.restore_s = restore_s_;
  s.pending = static_cast<int64_t>(queue_.size()) + (busy_ ? 1 : 0);
  return s;
}

// Drains the queue even while stopping: what the engine handed over is written before the process ends
// (a kill -9 meanwhile leaves at most a temp file, which the next open removes).
void SsdTier::run() {
  for (;;) {
    SsdSnapshot s;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      s = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    try {
      write(s);
    } catch (const std::exception& e) {  // a contract violation: log it, keep serving
      log::warn("kv", strfmt("ssd cache: snapshot not written: %s", e.what()));
    }
    refresh_store_stats();
    {
      std::lock_guard<std::mutex> lk(mu_);
      busy_ = false;
      pending_bytes_ -= s.bytes();
    }
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void SsdTier::write(const SsdSnapshot& s) {
  const size_t block_size = static_cast<size_t>(s.layout.block_size);
  for (const SsdSnapshot::Target& t : s.targets) {
    check(t.n_blocks > 0 && t.n_blocks <= s.n_blocks, "kv", "ssd snapshot target outside the snapshot");
    const auto nb = static_cast<size_t>(t.n_blocks);
    SsdLayout layout = s.layout;
    std::vector<std::span<const std::byte>> spans;
    const size_t n_swa = layout.sliding.n_tensors, n_state = layout.state.n_tensors;
    check(s.tensors.size() + n_state + n_swa == layout.tensor_bytes.size() && t.swa_tensors.size() == n_swa &&
              t.state_tensors.size() == n_state,
          "kv", "ssd snapshot: tensors do not match the layout");
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      layout.tensor_bytes[i] = s.layout.tensor_bytes[i] * nb;
      spans.emplace_back(s.tensors[i].data(), static_cast<size_t>(layout.tensor_bytes[i]));
    }
    for (size_t i = 0; i < n_state; ++i)  // whole tensors (put() checks the sizes)
      spans.emplace_back(t.state_tensors[i].data(), t.state_tensors[i].size());
    if (n_swa > 0) {  // this target's own window of sliding blocks
      check(t.swa_first_block >= 0 && t.swa_first_block < t.n_blocks, "kv", "ssd snapshot: bad sliding range");
      const auto n_win = static_cast<uint64_t>(t.n_blocks - t.swa_first_block);
      layout.sliding.first_block = static_cast<uint64_t>(t.swa_first_block);
      layout.sliding.n_blocks = n_win;
      for (size_t i = 0; i < n_swa; ++i) {
        const size_t at = s.tensors.size() + n_state + i;
        layout.tensor_bytes[at] = s.layout.tensor_bytes[at] * n_win;
        spans.emplace_back(t.swa_tensors[i].data(), t.swa_tensors[i].size());  // put() checks the size
      }
    }
    const std::span<const int32_t> tokens(s.tokens.data(), nb * block_size);
    store_.put(t.key, tokens, layout, spans);  // false: disabled, too big or failed (the store warned)
  }
}

}  // namespace bunsen::kv
