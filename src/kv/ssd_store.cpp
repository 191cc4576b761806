// SsdStore: POSIX implementation (openat/renameat relative to a locked directory fd, pread for the scan,
// mmap for get). Not the format (ssd_format.cpp). Invariants: the index only holds files whose header was
// verified; lock order is write_mutex_ before mutex_; every failed write removes its temp file.
#include "kv/ssd_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/log.h"
#include "core/status.h"

namespace bunsen::kv {
namespace {

constexpr const char* kComponent = "ssd-cache";
constexpr const char* kQuarantineDir = "quarantine";
constexpr const char* kTempPrefix = ".tmp-";
constexpr const char* kSuffix = ".kvs";
constexpr size_t kNameLength = 16 + 1 + 16 + 4;
constexpr size_t kMaxQuarantineFiles = 64;  // beyond this, damaged files are deleted instead of kept

// Errors that mean the directory or the disk cannot be trusted: they disable the tier.
bool is_fatal_io(int err) {
  switch (err) {
    case ENOSPC: case EDQUOT: case EFBIG: case EIO: case EROFS: case EACCES: case EPERM:
    case ENOENT: case ENOTDIR:
      return true;
    default:
      return false;
  }
}

bool parse_hex16(const char* s, uint64_t* out) {
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

std::optional<SsdEntryKey> parse_name(const std::string& name) {
  if (name.size() != kNameLength || name[16] != '-' || name.compare(33, 4, kSuffix) != 0) return std::nullopt;
  SsdEntryKey k;
  if (!parse_hex16(name.data(), &k.name_space) || !parse_hex16(name.data() + 17, &k.prefix_hash)) {
    return std::nullopt;
  }
  return k;
}

// 0 on success, else errno. Retries short writes and EINTR.
int write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

int write_zeros(int fd, uint64_t n) {
  static const char kZeros[4096] = {};
  while (n > 0) {
    size_t take = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
    if (int err = write_all(fd, kZeros, take)) return err;
    n -= take;
  }
  return 0;
}

int pread_all(int fd, void* data, size_t n, uint64_t at) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return EOF;  // shorter than announced: treated as truncation
    p += r;
    n -= static_cast<size_t>(r);
    at += static_cast<uint64_t>(r);
  }
  return 0;
}

}  // namespace

SsdMapping::~SsdMapping() {
  if (data_ && size_ > 0) ::munmap(const_cast<std::byte*>(data_), size_);
}

std::string SsdStore::file_name(const SsdEntryKey& key) {
  return strfmt("%016llx-%016llx%s", static_cast<unsigned long long>(key.name_space),
                static_cast<unsigned long long>(key.prefix_hash), kSuffix);
}

SsdStore::SsdStore(SsdStoreOptions options) : options_(std::move(options)) {
  if (!open_dir()) return;
  enabled_.store(true);
  scan_dir();
}

SsdStore::~SsdStore() {
  if (dir_fd_ >= 0) ::close(dir_fd_);  // also releases the flock
}

void SsdStore::disable(const std::string& what, int err) {
  enabled_.store(false);
  if (warned_.exchange(true)) return;
  log::warn(kComponent, strfmt("%s in '%s': %s; the SSD prefix cache is disabled, serving continues",
                               what.c_str(), options_.dir.c_str(), std::strerror(err)));
}

void SsdStore::write_failed(const std::string& what, int err) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.write_failures;
  }
  if (is_fatal_io(err)) {
    disable(what, err);
  } else {
    log::debug(kComponent, strfmt("%s: %s (entry skipped)", what.c_str(), std::strerror(err)));
  }
}

bool SsdStore::open_dir() {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) return disable("cannot create the directory", ec.value()), false;
  dir_fd_ = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) return disable("cannot open the directory", errno), false;
  if (::flock(dir_fd_, LOCK_EX | LOCK_NB) != 0) {
    return disable("the directory is in use by another SSD cache", errno), false;
  }
  if (::mkdirat(dir_fd_, kQuarantineDir, 0755) != 0 && errno != EEXIST) {
    return disable("cannot create quarantine/", errno), false;
  }
  // Probe: as root, permission bits do not stop writes, so only a real write says whether we can write.
  std::string probe = strfmt("%sprobe-%d", kTempPrefix, static_cast<int>(::getpid()));
  int fd = ::openat(dir_fd_, probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return disable("the directory is not writable", errno), false;
  int err = write_all(fd, "x", 1);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  ::unlinkat(dir_fd_, probe.c_str(), 0);
  if (err != 0) return disable("cannot write to the directory", err), false;
  return true;
}

void SsdStore::scan_dir() {
  int fd = ::dup(dir_fd_);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) ::close(fd);
    return disable("cannot list the directory", errno);
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& name : names) {
    if (name.rfind(kTempPrefix, 0) == 0) {
      ::unlinkat(dir_fd_, name.c_str(), 0);  // we hold the lock: every temp file is a crash leftover
    } else if (parse_name(name)) {
      index_file(name);
    }
  }
  int qfd = ::openat(dir_fd_, kQuarantineDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (DIR* q = qfd >= 0 ? ::fdopendir(qfd) : nullptr) {
    while (dirent* e = ::readdir(q)) quarantine_files_ += e->d_name[0] != '.';
    ::closedir(q);
  } else if (qfd >= 0) {
    ::close(qfd);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  evict_for(0, nullptr);  // the cap may have been lowered since the last run
}

void SsdStore::index_file(const std::string& name) {
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? void() : disable("cannot open a snapshot", errno);
  struct stat st {};
  std::vector<std::byte> buf(kSsdFixedHeaderBytes);
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (err == 0 && size >= kSsdFixedHeaderBytes) err = pread_all(fd, buf.data(), buf.size(), 0);
  uint64_t hb = err == 0 && size >= kSsdFixedHeaderBytes ? ssd_peek_header_bytes(buf) : 0;
  if (hb > kSsdFixedHeaderBytes && hb <= size) {
    buf.resize(hb);
    err = pread_all(fd, buf.data(), hb, 0);
  }
  ::close(fd);
  if (err != 0 && err != EOF) return disable("cannot read a snapshot", err);
  std::string why = "truncated file";
  auto h = err == 0 && size >= kSsdFixedHeaderBytes ? ssd_decode_header(buf, size, &why) : std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!h) return quarantine(name, why);
  if (!(h->key == *parse_name(name))) return quarantine(name, "key does not match the file name");
  index_insert(h->key, h->seq, size);
}

void SsdStore::index_insert(const SsdEntryKey& key, uint64_t seq, uint64_t bytes) {
  index_remove(key);
  index_[key] = Indexed{seq, bytes};
  order_[seq] = key;
  bytes_used_ += bytes;
  if (seq >= next_seq_) next_seq_ = seq + 1;
}

void SsdStore::index_remove(const SsdEntryKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  order_.erase(it->second.seq);
  bytes_used_ -= it->second.bytes;
  index_.erase(it);
}

void SsdStore::evict_for(uint64_t incoming, const SsdEntryKey* replacing) {
  auto rep = replacing ? index_.find(*replacing) : index_.end();
  uint64_t replaced = rep != index_.end() ? rep->second.bytes : 0;
  while (bytes_used_ - replaced + incoming > options_.max_bytes) {
    auto victim = order_.begin();
    while (victim != order_.end() && replacing && victim->second == *replacing) ++victim;
    if (victim == order_.end()) return;
    SsdEntryKey key = victim->second;
    if (::unlinkat(dir_fd_, file_name(key).c_str(), 0) != 0 && errno != ENOENT) {
      log::debug(kComponent, strfmt("evict %s: %s", file_name(key).c_str(), std::strerror(errno)));
    }
    index_remove(key);
    ++stats_.evictions;
  }
}

void SsdStore::quarantine(const std::string& name, const std::string& why, uint64_t ino) {
  if (ino != 0) {
    struct stat st {};
    if (::fstatat(dir_fd_, name.c_str(), &st, 0) != 0 || static_cast<uint64_t>(st.st_ino) != ino) return;
  }
  ++stats_.quarantined;
  if (auto key = parse_name(name)) index_remove(*key);
  std::string dest = strfmt("%s/%s.%lld-%llu", kQuarantineDir, name.c_str(),
                            static_cast<long long>(::time(nullptr)),
                            static_cast<unsigned long long>(stats_.quarantined));
  bool moved = quarantine_files_ < kMaxQuarantineFiles &&
               ::renameat(dir_fd_, name.c_str(), dir_fd_, dest.c_str()) == 0;
  if (moved) {
    ++quarantine_files_;
  } else {
    ::unlinkat(dir_fd_, name.c_str(), 0);
  }
  log::warn(kComponent, strfmt("%s: %s; %s", name.c_str(), why.c_str(),
                               moved ? "moved to quarantine/" : "deleted (quarantine full)"));
}

bool SsdStore::write_file(const std::string& tmp, const SsdFileHeader& h, std::span<const int32_t> tokens,
                          std::span<const std::span<const std::byte>> tensors) {
  int fd = ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return write_failed("cannot create a temp file", errno), false;
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(h.file_bytes));  // fail fast when the disk is full
  if (err == EOPNOTSUPP || err == EINVAL) err = 0;
  std::vector<std::byte> header = ssd_encode_header(h);
  if (err == 0) err = write_all(fd, header.data(), header.size());
  if (err == 0) err = write_all(fd, tokens.data(), tokens.size_bytes());
  uint64_t at = h.header_bytes + tokens.size_bytes();
  for (size_t t = 0; t < tensors.size() && err == 0; ++t) {
    err = write_zeros(fd, h.tensor_offsets[t] - at);
    if (err == 0) err = write_all(fd, tensors[t].data(), tensors[t].size());
    at = h.tensor_offsets[t] + tensors[t].size();
  }
  if (err == 0 && tensors.empty()) err = write_zeros(fd, h.file_bytes - at);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0) return true;
  ::unlinkat(dir_fd_, tmp.c_str(), 0);
  write_failed("cannot write a snapshot", err);
  return false;
}

bool SsdStore::put(const SsdEntryKey& key, std::span<const int32_t> tokens, const SsdLayout& layout,
                   std::span<const std::span<const std::byte>> tensors) {
  if (tensors.size() != layout.tensor_bytes.size()) {
    throw Error(kComponent, strfmt("put: %zu payloads for %zu layout tensors", tensors.size(),
                                   layout.tensor_bytes.size()));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].size() == layout.tensor_bytes[t]) continue;
    throw Error(kComponent, strfmt("put: payload %zu has %zu bytes, layout says %llu", t, tensors[t].size(),
                                   static_cast<unsigned long long>(layout.tensor_bytes[t])));
  }
  if (!enabled()) return false;
  SsdFileHeader h;
  h.key = key;
  h.n_tokens = tokens.size();
  h.layout = layout;
  ssd_plan_offsets(h);
  if (h.file_bytes > options_.max_bytes) return false;
  h.tokens_checksum = ssd_checksum64(std::as_bytes(tokens));
  for (const auto& t : tensors) h.tensor_checksums.push_back(ssd_checksum64(t));

  std::lock_guard<std::mutex> write_lock(write_mutex_);
  std::string name = file_name(key);
  std::string tmp;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!enabled()) return false;
    h.seq = next_seq_++;
    evict_for(h.file_bytes, &key);
    tmp = strfmt("%s%d-%llu-%s", kTempPrefix, static_cast<int>(::getpid()),
                 static_cast<unsigned long long>(++tmp_counter_), name.c_str());
  }
  if (!write_file(tmp, h, tokens, tensors)) return false;
  if (::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
    int err = errno;
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    return write_failed("cannot rename a snapshot into place", err), false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  index_insert(key, h.seq, h.file_bytes);
  if (::fsync(dir_fd_) != 0) {
    int err = errno;
    ++stats_.write_failures;
    return disable("cannot fsync the directory", err), false;
  }
  ++stats_.writes;
  return true;
}

void SsdStore::reject_loaded(const SsdEntryKey& key, uint64_t ino, const std::string& why) {
  std::lock_guard<std::mutex> write_lock(write_mutex_);  // no put may rename over the name meanwhile
  std::lock_guard<std::mutex> lock(mutex_);
  quarantine(file_name(key), why, ino);
}

std::optional<SsdEntry> SsdStore::load(const SsdEntryKey& key, bool verify_payload) {
  std::string name = file_name(key);
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      std::lock_guard<std::mutex> lock(mutex_);
      index_remove(key);  // erased or evicted meanwhile
    } else if (is_fatal_io(err)) {
      disable("cannot open a snapshot", err);
    }
    return std::nullopt;
  }
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(kSsdFixedHeaderBytes)) {
    p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  uint64_t ino = static_cast<uint64_t>(st.st_ino);
  if (p == MAP_FAILED) {
    if (st.st_size < static_cast<off_t>(kSsdFixedHeaderBytes)) reject_loaded(key, ino, "truncated header");
    return std::nullopt;
  }
  ::madvise(p, static_cast<size_t>(st.st_size), MADV_WILLNEED);  // start readahead of the payloads
  auto map = std::make_shared<const SsdMapping>(static_cast<const std::byte*>(p),
                                                static_cast<size_t>(st.st_size));
  std::span<const std::byte> bytes = map->bytes();
  std::string why;
  auto h = ssd_decode_header(bytes, bytes.size(), &why);
  if (h && !(h->key == key)) why = "key does not match the file name";
  if (h && why.empty()) {
    auto tok = bytes.subspan(h->header_bytes, 4 * h->n_tokens);
    if (ssd_checksum64(tok) != h->tokens_checksum) why = "token checksum mismatch";
  }
  for (size_t t = 0; h && why.empty() && verify_payload && t < h->tensor_offsets.size(); ++t) {
    auto payload = bytes.subspan(h->tensor_offsets[t], h->layout.tensor_bytes[t]);
    if (ssd_checksum64(payload) != h->tensor_checksums[t]) why = strfmt("payload %zu checksum mismatch", t);
  }
  if (!why.empty()) return reject_loaded(key, ino, why), std::nullopt;
  SsdEntry e;
  e.key = key;
  e.tokens.resize(h->n_tokens);
  std::memcpy(e.tokens.data(), bytes.data() + h->header_bytes, 4 * h->n_tokens);
  e.layout = h->layout;
  for (size_t t = 0; t < h->tensor_offsets.size(); ++t) {
    e.tensors.push_back(bytes.subspan(h->tensor_offsets[t], h->layout.tensor_bytes[t]));
  }
  e.mapping = std::move(map);
  e.checksums = h->tensor_checksums;
  e.inode = ino;
  return e;
}

std::optional<SsdEntry> SsdStore::get(const SsdEntryKey& key) { return get(key, options_.verify_payload); }

std::optional<SsdEntry> SsdStore::get_unverified(const SsdEntryKey& key) { return get(key, false); }

void SsdStore::reject(const SsdEntry& e, const std::string& why) {
  reject_loaded(e.key, e.inode, why);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.misses;  // counted as a hit by get(): it was not one
  if (stats_.hits > 0) --stats_.hits;
}

std::optional<SsdEntry> SsdStore::get(const SsdEntryKey& key, bool verify_payload) {
  if (!enabled()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!index_.count(key)) return ++stats_.misses, std::nullopt;
  }
  std::optional<SsdEntry> e = load(key, verify_payload);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!e) return ++stats_.misses, std::nullopt;
  ++stats_.hits;
  auto it = index_.find(key);
  if (it != index_.end()) {  // newest for eviction (in memory; the file keeps its write seq)
    order_.erase(it->second.seq);
    it->second.seq = next_seq_++;
    order_[it->second.seq] = key;
  }
  return e;
}

bool SsdStore::contains(const SsdEntryKey& key) const {
  if (!enabled()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return index_.count(key) > 0;
}

bool SsdStore::erase(const SsdEntryKey& key) {
  if (!enabled()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!index_.count(key)) return false;
  if (::unlinkat(dir_fd_, file_name(key).c_str(), 0) != 0 && errno != ENOENT) {
    log::debug(kComponent, strfmt("erase %s: %s", file_name(key).c_str(), std::strerror(errno)));
  }
  index_remove(key);
  return true;
}

size_t SsdStore::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return index_.size();
}

uint64_t SsdStore::bytes_used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_used_;
}

SsdStats SsdStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace bunsen::kv
