// SsdStore: the prefix cache's disk tier: a directory of prefix snapshots (tokens + per-layer K/V
// payloads, format in ssd_format.h) that survives restarts. Host memory and POSIX files only: no CUDA, no
// hashing of tokens (the caller supplies SsdEntryKey), no threads of its own (call it from a background
// thread: put() and get() touch the disk). Invariants: a file is only visible under its final name when
// complete and fsynced (temp + fsync + rename + dir fsync); a file that fails a check is never served, it is
// moved to DIR/quarantine/; after the first I/O failure (missing/read-only/full dir, EIO, ENOSPC) the tier
// is disabled with ONE warning and every call is a no-op miss. Nothing throws except on caller contract
// violations (payload spans that disagree with the layout). Thread-safe; puts serialize with each other.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/ssd_format.h"

namespace bunsen::kv {

struct SsdStoreOptions {
  std::string dir;                     // created (with parents) when missing
  uint64_t max_bytes = 32ull << 30;    // cap on the sum of entry file sizes; oldest entries are evicted
  bool verify_payload = false;         // also verify payload checksums on get (header + tokens always are)
};

struct SsdStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t writes = 0;
  uint64_t write_failures = 0;
  uint64_t quarantined = 0;
  uint64_t evictions = 0;
};

// A read-only file mapping, unmapped when the last SsdEntry that uses it goes away.
class SsdMapping {
 public:
  SsdMapping(const std::byte* data, size_t size) : data_(data), size_(size) {}
  ~SsdMapping();
  SsdMapping(const SsdMapping&) = delete;
  SsdMapping& operator=(const SsdMapping&) = delete;
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  const std::byte* data_;
  size_t size_;
};

// A verified snapshot. Payloads are zero-copy views into a private read-only mmap of the file: they stay
// valid while this object (or a copy) lives, even if the entry is evicted or erased meanwhile (the mapping
// keeps the inode alive). Caveat of mmap: an external process truncating the file, or a disk read error
// while touching a payload page, raises SIGBUS; get() with verify_payload touches every page up front.
struct SsdEntry {
  SsdEntryKey key;
  std::vector<int32_t> tokens;  // [n_tokens] the prefix's token ids
  SsdLayout layout;
  std::vector<std::span<const std::byte>> tensors;  // one per layout.tensor_bytes entry, same order
  std::shared_ptr<const SsdMapping> mapping;        // owns the memory behind `tensors`
  std::vector<uint64_t> checksums;  // the header's ssd_checksum64 of each tensor (for callers that verify)
  uint64_t inode = 0;               // of the file mapped (reject() quarantines only that file)
};

class SsdStore {
 public:
  // Opens (creating if needed) and locks DIR, removes stale temp files, quarantines damaged snapshots and
  // rebuilds the index (oldest-first order from the sequence number in each header). Never throws on
  // I/O: on failure the store is disabled (one warning).
  explicit SsdStore(SsdStoreOptions options);
  ~SsdStore();
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  // Writes (or replaces) the snapshot of `key`. tensors[i].size() must equal layout.tensor_bytes[i]
  // (throws bunsen::Error otherwise). Evicts oldest entries to stay under max_bytes. false when disabled,
  // when the entry alone exceeds max_bytes, or on an I/O failure (which disables the tier).
  bool put(const SsdEntryKey& key, std::span<const int32_t> tokens, const SsdLayout& layout,
           std::span<const std::span<const std::byte>> tensors);
  // A verified snapshot, or nullopt (miss). A hit makes the entry the newest for eviction (in memory only;
  // after a restart the order is the write order).
  std::optional<SsdEntry> get(const SsdEntryKey& key);
  // get() without the payload checksums, whatever verify_payload says: a caller that verifies them itself
  // (in parallel, against entry.checksums) reports a mismatch with reject().
  std::optional<SsdEntry> get_unverified(const SsdEntryKey& key);
  // Quarantines the file `e` was loaded from (unless a put replaced it meanwhile); `why` goes to the log.
  void reject(const SsdEntry& e, const std::string& why);
  bool verify_payload() const { return options_.verify_payload; }
  // Index lookup only, no I/O: whether get() may hit.
  bool contains(const SsdEntryKey& key) const;
  bool erase(const SsdEntryKey& key);

  size_t entries() const;
  uint64_t bytes_used() const;
  SsdStats stats() const;
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  const std::string& dir() const { return options_.dir; }
  // Relative file name of a key's snapshot inside dir(): "<namespace hex>-<prefix hash hex>.kvs".
  static std::string file_name(const SsdEntryKey& key);

 private:
  struct Indexed {
    uint64_t seq = 0;
    uint64_t bytes = 0;
  };

  bool open_dir();
  void scan_dir();
  void index_file(const std::string& name);
  void index_insert(const SsdEntryKey& key, uint64_t seq, uint64_t bytes);  // requires mutex_
  void index_remove(const SsdEntryKey& key);                                 // requires mutex_
  // Evicts oldest entries until `incoming` more bytes fit (requires mutex_). `replacing` (may be null) is
  // about to be overwritten: its bytes are not counted and it is never the victim.
  void evict_for(uint64_t incoming, const SsdEntryKey* replacing);
  bool write_file(const std::string& tmp, const SsdFileHeader& h, std::span<const int32_t> tokens,
                  std::span<const std::span<const std::byte>> tensors);
  std::optional<SsdEntry> load(const SsdEntryKey& key, bool verify_payload);
  std::optional<SsdEntry> get(const SsdEntryKey& key, bool verify_payload);
  // Moves DIR/name to DIR/quarantine/ (requires mutex_). For a file opened by get(): only if DIR/name is
  // still the inode `ino` (a concurrent put may have replaced it).
  void quarantine(const std::string& name, const std::string& why, uint64_t ino = 0);
  void reject_loaded(const SsdEntryKey& key, uint64_t ino, const std::string& why);
  void write_failed(const std::string& what, int err);
  void disable(const std::string& what, int err);

  SsdStoreOptions options_;
  int dir_fd_ = -1;  // open + flock'ed while the store lives
  std::atomic<bool> enabled_{false};
  std::atomic<bool> warned_{false};
  mutable std::mutex mutex_;  // index_, order_, bytes_used_, stats_, next_seq_
  std::mutex write_mutex_;    // one put at a time
  std::unordered_map<SsdEntryKey, Indexed, SsdEntryKeyHash> index_;
  std::map<uint64_t, SsdEntryKey> order_;  // seq -> key, oldest first
  uint64_t bytes_used_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t tmp_counter_ = 0;
  size_t quarantine_files_ = 0;
  SsdStats stats_;
};

}  // namespace bunsen::kv
