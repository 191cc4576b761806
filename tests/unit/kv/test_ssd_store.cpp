// Tests for SsdStore (the prefix cache's disk tier) on real files in a per-test temp directory: round trip,
// restart, every kind of damage (flipped bytes, truncation, wrong name/namespace/version) → miss +
// quarantine, crash leftovers, the byte cap, and the failure policy (unwritable/removed/full directory →
// disabled with one warning, never a throw). Disk-full runs in forked children (tmpfs or RLIMIT_FSIZE).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../../support/scratch_dir.h"
#include "core/status.h"
#include "kv/ssd_store.h"
#include "ssd_test_util.h"

namespace fs = std::filesystem;
using bunsen::kv::SsdEntryKey;
using bunsen::kv::SsdLayout;
using bunsen::kv::SsdStore;
using bunsen::kv::SsdStoreOptions;
using bunsen::test_support::ScratchDir;

namespace {

constexpr uint64_t kNs = 0x1234abcd5678ef01ull;

using Sample = bunsen::kv::test::SsdSample;
using bunsen::kv::test::read_u32;

// One prefix's snapshot: tokens + 2 layers x (K, V) of [n_blocks, 4, 2, 8] bf16, filled from a seed.
Sample make_sample(uint64_t prefix_hash, uint32_t seed, int n_tokens = 10, uint64_t ns = kNs) {
  Sample s;
  s.key = {ns, prefix_hash};
  for (int i = 0; i < n_tokens; ++i) s.tokens.push_back(static_cast<int32_t>(seed * 1000 + i * 7));
  s.layout = {2, 4, 2, 8, bunsen::DType::kBF16, {}};
  uint64_t n_blocks = (n_tokens + 3) / 4;
  uint32_t x = seed * 2654435761u + 1;
  for (int t = 0; t < 4; ++t) s.add_payload(n_blocks * 4 * 2 * 8 * 2, x);
  return s;
}

bool put(SsdStore& store, const Sample& s) { return store.put(s.key, s.tokens, s.layout, s.spans()); }

// Hit with exactly the sample's tokens, layout and payload bytes.
void expect_hit(SsdStore& store, const Sample& s) {
  auto e = store.get(s.key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->tokens, s.tokens);
  EXPECT_EQ(e->layout, s.layout);
  ASSERT_EQ(e->tensors.size(), s.payloads.size());
  for (size_t t = 0; t < s.payloads.size(); ++t) {
    ASSERT_EQ(e->tensors[t].size(), s.payloads[t].size());
    EXPECT_EQ(std::memcmp(e->tensors[t].data(), s.payloads[t].data(), s.payloads[t].size()), 0) << t;
  }
}

void flip_byte(const fs::path& p, uint64_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

size_t count_files(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

int count_warnings(const std::string& err) {
  int n = 0;
  for (size_t at = 0; (at = err.find("[bunsen warn] ssd-cache", at)) != std::string::npos; ++at) ++n;
  return n;
}

class SsdStoreTest : public ::testing::Test {
 protected:
  void TearDown() override {  // a test may leave dir_ read-only
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
  }
  SsdStoreOptions opts(uint64_t max_bytes = 1ull << 30, bool verify = false) const {
    return SsdStoreOptions{dir_.string(), max_bytes, verify};
  }
  fs::path file_of(const SsdEntryKey& k) const { return dir_ / SsdStore::file_name(k); }

  ScratchDir root_{"bunsen-ssd-test"};
  fs::path dir_ = root_.path() / "cache";
};

TEST(SsdChecksum, EverySingleByteFlipAndLengthChangesIt) {
  std::vector<std::byte> buf(77);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 31 + 5);
  uint64_t base = bunsen::kv::ssd_checksum64(buf);
  for (size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(bunsen::kv::ssd_checksum64(buf), base) << i << ":" << bit;
      buf[i] ^= static_cast<std::byte>(1 << bit);
    }
  }
  EXPECT_EQ(bunsen::kv::ssd_checksum64(buf), base);
  std::vector<std::byte> zero1(1), zero2(2);
  EXPECT_NE(bunsen::kv::ssd_checksum64(zero1), bunsen::kv::ssd_checksum64(zero2));
  EXPECT_NE(bunsen::kv::ssd_checksum64({}), bunsen::kv::ssd_checksum64(zero1));
}

TEST_F(SsdStoreTest, RoundTrip) {
  SsdStore store(opts());
  ASSERT_TRUE(store.enabled());
  Sample a = make_sample(1, 1, 10), b = make_sample(2, 2, 33);
  ASSERT_TRUE(put(store, a));
  ASSERT_TRUE(put(store, b));
  EXPECT_EQ(store.entries(), 2u);
  EXPECT_TRUE(store.contains(a.key));
  expect_hit(store, a);
  expect_hit(store, b);
  EXPECT_FALSE(store.get(make_sample(3, 3).key).has_value());
  EXPECT_EQ(store.bytes_used(), fs::file_size(file_of(a.key)) + fs::file_size(file_of(b.key)));
  auto st = store.stats();
  EXPECT_EQ(st.writes, 2u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.quarantined, 0u);
  EXPECT_EQ(count_files(dir_), 2u) << "no temp files left behind";
}

TEST_F(SsdStoreTest, EntryOutlivesEraseWhileMapped) {
  SsdStore store(opts());
  Sample a = make_sample(1, 1);
  ASSERT_TRUE(put(store, a));
  auto e = store.get(a.key);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(store.erase(a.key));
  EXPECT_FALSE(fs::exists(file_of(a.key)));
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_EQ(store.bytes_used(), 0u);
  EXPECT_EQ(std::memcmp(e->tensors[3].data(), a.payloads[3].data(), a.payloads[3].size()), 0);
  EXPECT_FALSE(store.get(a.key).has_value());
}

TEST_F(SsdStoreTest, ReplacingAKeyKeepsOneFile) {
  SsdStore store(opts());
  Sample a1 = make_sample(1, 1, 10), a2 = make_sample(1, 9, 20);
  ASSERT_TRUE(put(store, a1));
  ASSERT_TRUE(put(store, a2));
  EXPECT_EQ(store.entries(), 1u);
  EXPECT_EQ(store.bytes_used(), fs::file_size(file_of(a2.key)));
  expect_hit(store, a2);
}

TEST_F(SsdStoreTest, SurvivesRestart) {
  std::vector<Sample> samples = {make_sample(11, 1, 5), make_sample(12, 2, 16), make_sample(13, 3, 40)};
  uint64_t bytes = 0;
  {
    SsdStore store(opts());
    for (const auto& s : samples) ASSERT_TRUE(put(store, s));
    bytes = store.bytes_used();
  }
  SsdStore reopened(opts());
  ASSERT_TRUE(reopened.enabled());
  EXPECT_EQ(reopened.entries(), 3u);
  EXPECT_EQ(reopened.bytes_used(), bytes);
  for (const auto& s : samples) expect_hit(reopened, s);
  EXPECT_EQ(reopened.stats().quarantined, 0u);
}

// Damages the only entry's file, then expects a miss, one quarantined file, and the entry gone.
void expect_quarantined_on_get(SsdStore& store, const Sample& s, const fs::path& dir) {
  EXPECT_FALSE(store.get(s.key).has_value());
  EXPECT_EQ(store.stats().quarantined, 1u);
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_EQ(store.bytes_used(), 0u);
  EXPECT_FALSE(fs::exists(dir / SsdStore::file_name(s.key)));
  EXPECT_EQ(count_files(dir / "quarantine"), 1u);
  EXPECT_FALSE(store.get(s.key).has_value());
}

TEST_F(SsdStoreTest, FlippedHeaderBytesAreQuarantined) {
  Sample a = make_sample(1, 1);
  // magic, version, namespace, n_tokens, head_dim, a tensor size in the table, the header checksum.
  for (uint64_t at : {0ull, 9ull, 20ull, 40ull, 61ull, 96ull + 16 + 2, 96ull + 4 * 16 + 3}) {
    fs::remove_all(dir_);
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
    flip_byte(file_of(a.key), at);
    SCOPED_TRACE(at);
    expect_quarantined_on_get(store, a, dir_);
  }
}

TEST_F(SsdStoreTest, FlippedTokenByteIsQuarantinedEvenWithoutVerify) {
  SsdStore store(opts(1ull << 30, /*verify=*/false));
  Sample a = make_sample(1, 1);
  ASSERT_TRUE(put(store, a));
  uint64_t header_bytes = read_u32(file_of(a.key), 12);
  flip_byte(file_of(a.key), header_bytes + 4 * 3 + 1);  // token 3
  expect_quarantined_on_get(store, a, dir_);
}

TEST_F(SsdStoreTest, FlippedPayloadByteIsQuarantinedWithVerify) {
  Sample a = make_sample(1, 1);
  {
    SsdStore store(opts(1ull << 30, /*verify=*/true));
    ASSERT_TRUE(put(store, a));
  }
  uint64_t size = fs::file_size(file_of(a.key));
  flip_byte(file_of(a.key), size - 5);  // inside the last tensor
  {
    SsdStore unverified(opts(1ull << 30, /*verify=*/false));  // documented: payloads are trusted
    auto e = unverified.get(a.key);
    ASSERT_TRUE(e.has_value());
    EXPECT_NE(std::memcmp(e->tensors[3].data(), a.payloads[3].data(), a.payloads[3].size()), 0);
  }
  SsdStore store(opts(1ull << 30, /*verify=*/true));
  expect_quarantined_on_get(store, a, dir_);
}

TEST_F(SsdStoreTest, UnverifiedGetHandsTheChecksumsToTheCallerWhoRejects) {
  Sample a = make_sample(1, 1);
  SsdStore store(opts(1ull << 30, /*verify=*/true));
  ASSERT_TRUE(put(store, a));
  flip_byte(file_of(a.key), fs::file_size(file_of(a.key)) - 5);  // inside the last tensor
  auto e = store.get_unverified(a.key);  // the caller verifies (the engine's restore workers, in parallel)
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->checksums.size(), 4u);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(bunsen::kv::ssd_checksum64(e->tensors[t]), e->checksums[t]) << t;
  EXPECT_NE(bunsen::kv::ssd_checksum64(e->tensors[3]), e->checksums[3]);
  EXPECT_EQ(store.stats().quarantined, 0u);
  store.reject(*e, "payload 3 checksum mismatch");
  EXPECT_EQ(store.stats().quarantined, 1u);
  EXPECT_EQ(store.stats().hits, 0u);
  EXPECT_FALSE(store.contains(a.key));
  EXPECT_FALSE(fs::exists(file_of(a.key)));
  EXPECT_EQ(count_files(dir_ / "quarantine"), 1u);
  // A put that replaced the file meanwhile is never quarantined by a stale reject.
  ASSERT_TRUE(put(store, a));
  store.reject(*e, "stale");
  EXPECT_TRUE(store.contains(a.key));
  expect_hit(store, a);
}

TEST_F(SsdStoreTest, TruncatedFileIsQuarantinedOnGet) {
  Sample a = make_sample(1, 1, 12);
  for (uint64_t keep : {0ull, 50ull, 100ull, 170ull, 4200ull, 1ull << 40}) {
    fs::remove_all(dir_);
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
    uint64_t size = fs::file_size(file_of(a.key));
    fs::resize_file(file_of(a.key), keep < size ? keep : size - 1);
    SCOPED_TRACE(keep);
    expect_quarantined_on_get(store, a, dir_);
  }
}

TEST_F(SsdStoreTest, DamagedFilesFoundAtOpenAreQuarantined) {
  Sample a = make_sample(1, 1), b = make_sample(2, 2), c = make_sample(3, 3);
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a) && put(store, b) && put(store, c));
  }
  fs::resize_file(file_of(a.key), 60);
  flip_byte(file_of(b.key), 30);
  SsdStore store(opts());
  EXPECT_EQ(store.stats().quarantined, 2u);
  EXPECT_EQ(store.entries(), 1u);
  EXPECT_EQ(count_files(dir_ / "quarantine"), 2u);
  EXPECT_FALSE(store.get(a.key).has_value());
  EXPECT_FALSE(store.get(b.key).has_value());
  expect_hit(store, c);
}

TEST_F(SsdStoreTest, OtherNamespaceMissesAndLeavesTheEntryAlone) {
  SsdStore store(opts());
  Sample a = make_sample(7, 1, 10, kNs);
  ASSERT_TRUE(put(store, a));
  EXPECT_FALSE(store.get(SsdEntryKey{kNs + 1, 7}).has_value());
  EXPECT_FALSE(store.contains(SsdEntryKey{kNs + 1, 7}));
  EXPECT_EQ(store.stats().quarantined, 0u);
  expect_hit(store, a);
}

TEST_F(SsdStoreTest, FileUnderAnotherKeysNameIsQuarantined) {
  Sample a = make_sample(7, 1, 10, kNs);
  SsdEntryKey other{kNs + 1, 7};  // same prefix, another adapter set / KV scheme
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
  }
  fs::copy_file(file_of(a.key), file_of(other));
  SsdStore store(opts());
  EXPECT_FALSE(store.get(other).has_value());
  EXPECT_EQ(store.stats().quarantined, 1u);
  expect_hit(store, a);
}

TEST_F(SsdStoreTest, OtherFormatVersionIsAMiss) {
  Sample a = make_sample(1, 1);
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
  }
  // Rewrite the version and re-seal the header, as a future writer would.
  fs::path p = file_of(a.key);
  uint32_t header_bytes = read_u32(p, 12);
  std::vector<std::byte> head(header_bytes);
  {
    std::ifstream f(p, std::ios::binary);
    f.read(reinterpret_cast<char*>(head.data()), header_bytes);
  }
  uint32_t version = bunsen::kv::kSsdFormatVersionState + 1;
  std::memcpy(head.data() + 8, &version, 4);
  uint64_t sum = bunsen::kv::ssd_checksum64(std::span<const std::byte>(head).first(header_bytes - 8));
  std::memcpy(head.data() + header_bytes - 8, &sum, 8);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.write(reinterpret_cast<const char*>(head.data()), header_bytes);
  }
  SsdStore store(opts());
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_FALSE(store.get(a.key).has_value());
  EXPECT_EQ(store.stats().quarantined, 1u);
}

// A sample with a sliding-window part: its last two tensors hold blocks [1, 3) of the prefix (12 tokens).
Sample make_sliding_sample(uint64_t prefix_hash, uint32_t seed) {
  Sample s = make_sample(prefix_hash, seed, 12);
  uint32_t x = seed * 40503u + 7;
  for (int t = 0; t < 2; ++t) {
    std::vector<std::byte> p(2 * 4 * 1 * 8 * 2);
    for (auto& b : p) b = static_cast<std::byte>((x = x * 1664525u + 1013904223u) >> 24);
    s.layout.tensor_bytes.push_back(p.size());
    s.payloads.push_back(std::move(p));
  }
  s.layout.sliding = {2, 8, 1, 2};
  return s;
}

// Re-seals the header after editing it with `edit(bytes)` (a writer that wrote these values on purpose).
template <typename Edit>
void reseal_header(const fs::path& p, Edit edit) {
  uint32_t header_bytes = read_u32(p, 12);
  std::vector<std::byte> head(header_bytes);
  {
    std::ifstream f(p, std::ios::binary);
    f.read(reinterpret_cast<char*>(head.data()), header_bytes);
  }
  edit(head);
  uint64_t sum = bunsen::kv::ssd_checksum64(std::span<const std::byte>(head).first(header_bytes - 8));
  std::memcpy(head.data() + header_bytes - 8, &sum, 8);
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(head.data()), header_bytes);
}

TEST_F(SsdStoreTest, SlidingPartIsVersion2AndPlainSnapshotsStayVersion1) {
  Sample plain = make_sample(1, 1), sliding = make_sliding_sample(2, 2);
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, plain));
    ASSERT_TRUE(put(store, sliding));
  }
  EXPECT_EQ(read_u32(file_of(plain.key), 8), 1u);
  EXPECT_EQ(read_u32(file_of(plain.key), 12), bunsen::kv::kSsdFixedHeaderBytes + 4 * 16 + 8) << "v1 header";
  EXPECT_EQ(read_u32(file_of(sliding.key), 8), 2u);
  EXPECT_EQ(read_u32(file_of(sliding.key), 12),
            bunsen::kv::kSsdFixedHeaderBytes + 6 * 16 + bunsen::kv::kSsdSlidingExtBytes + 8);
  SsdStore store(opts(1ull << 30, /*verify=*/true));  // after a restart, payload checksums verified too
  EXPECT_EQ(store.entries(), 2u);
  expect_hit(store, plain);
  expect_hit(store, sliding);  // layout (with its sliding part), tokens and all six payloads
  EXPECT_EQ(store.stats().quarantined, 0u);
}

TEST_F(SsdStoreTest, SlidingPartOutsideThePrefixOrAFalseVersionIsQuarantined) {
  Sample a = make_sliding_sample(1, 1), b = make_sliding_sample(2, 2), c = make_sample(3, 3);
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
    ASSERT_TRUE(put(store, b));
    ASSERT_TRUE(put(store, c));
  }
  const size_t ext = bunsen::kv::kSsdFixedHeaderBytes + 6 * 16;
  reseal_header(file_of(a.key), [&](std::vector<std::byte>& h) {  // blocks [2, 4) of a 3-block prefix
    uint64_t first = 2;
    std::memcpy(h.data() + ext + 8, &first, 8);
  });
  reseal_header(file_of(b.key), [&](std::vector<std::byte>& h) {  // more sliding tensors than tensors
    uint32_t n = 7;
    std::memcpy(h.data() + ext, &n, 4);
  });
  reseal_header(file_of(c.key), [&](std::vector<std::byte>& h) {  // a version-1 header called version 2
    uint32_t v = 2;
    std::memcpy(h.data() + 8, &v, 4);
  });
  SsdStore store(opts());
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_EQ(store.stats().quarantined, 3u);
  for (const Sample* s : {&a, &b, &c}) EXPECT_FALSE(store.get(s->key).has_value());
}

TEST_F(SsdStoreTest, StaleTempFileFromACrashIsIgnoredAndCleaned) {
  Sample a = make_sample(1, 1), b = make_sample(2, 2);
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a));
  }
  // A crash mid-write: the first half of b's would-be file under a temp name.
  fs::path tmp = dir_ / (".tmp-99999-1-" + SsdStore::file_name(b.key));
  {
    std::ifstream src(file_of(a.key), std::ios::binary);
    std::vector<char> half(fs::file_size(file_of(a.key)) / 2);
    src.read(half.data(), static_cast<std::streamsize>(half.size()));
    std::ofstream(tmp, std::ios::binary).write(half.data(), static_cast<std::streamsize>(half.size()));
  }
  SsdStore store(opts());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(store.entries(), 1u);
  EXPECT_EQ(store.bytes_used(), fs::file_size(file_of(a.key)));
  EXPECT_FALSE(store.get(b.key).has_value());
  EXPECT_EQ(store.stats().quarantined, 0u);
  expect_hit(store, a);
}

TEST_F(SsdStoreTest, ByteCapEvictsOldestFirst) {
  std::vector<Sample> s;
  for (int i = 0; i < 5; ++i) s.push_back(make_sample(100 + i, i + 1));  // all the same size
  uint64_t one = 0;
  {
    SsdStore probe(opts());
    ASSERT_TRUE(put(probe, s[0]));
    one = probe.bytes_used();
  }
  fs::remove_all(dir_);
  {
    SsdStore store(opts(3 * one));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(put(store, s[i]));
    EXPECT_EQ(store.stats().evictions, 0u);
    ASSERT_TRUE(store.get(s[0].key).has_value());  // a hit makes s0 the newest (in memory)
    ASSERT_TRUE(put(store, s[3]));
    EXPECT_EQ(store.stats().evictions, 1u);
    EXPECT_FALSE(store.contains(s[1].key));
    EXPECT_FALSE(fs::exists(file_of(s[1].key)));
    EXPECT_TRUE(store.contains(s[0].key) && store.contains(s[2].key) && store.contains(s[3].key));
    EXPECT_LE(store.bytes_used(), 3 * one);
  }
  // After a restart the order is the write order: s0 (written first) is now the oldest.
  SsdStore store(opts(3 * one));
  EXPECT_EQ(store.entries(), 3u);
  ASSERT_TRUE(put(store, s[4]));
  EXPECT_FALSE(store.contains(s[0].key));
  EXPECT_EQ(count_files(dir_), 3u);
}

TEST_F(SsdStoreTest, LoweredCapEvictsOnOpenAndOversizedEntryIsRejected) {
  Sample a = make_sample(1, 1), b = make_sample(2, 2), big = make_sample(3, 3, 400);
  uint64_t one = 0;
  {
    SsdStore store(opts());
    ASSERT_TRUE(put(store, a) && put(store, b));
    one = fs::file_size(file_of(a.key));
  }
  SsdStore store(opts(one + one / 2));
  EXPECT_EQ(store.entries(), 1u);
  EXPECT_TRUE(store.contains(b.key));
  EXPECT_FALSE(fs::exists(file_of(a.key)));
  EXPECT_FALSE(put(store, big));  // larger than the whole cap: not written, nothing evicted
  EXPECT_TRUE(store.enabled());
  EXPECT_TRUE(store.contains(b.key));
  EXPECT_FALSE(fs::exists(file_of(big.key)));
}

TEST_F(SsdStoreTest, MismatchedPayloadSizesAreACallerError) {
  SsdStore store(opts());
  Sample a = make_sample(1, 1);
  auto spans = a.spans();
  spans.pop_back();
  EXPECT_THROW(store.put(a.key, a.tokens, a.layout, spans), bunsen::Error);
  spans = a.spans();
  spans[1] = spans[1].first(10);
  EXPECT_THROW(store.put(a.key, a.tokens, a.layout, spans), bunsen::Error);
}

// Opens a store that must be disabled, exercises every call, and expects exactly one warning.
void expect_disabled_quietly(const SsdStoreOptions& o) {
  ::testing::internal::CaptureStderr();
  {
    SsdStore store(o);
    Sample a = make_sample(1, 1);
    EXPECT_FALSE(store.enabled());
    EXPECT_NO_THROW({
      EXPECT_FALSE(put(store, a));
      EXPECT_FALSE(put(store, a));
      EXPECT_FALSE(store.get(a.key).has_value());
      EXPECT_FALSE(store.contains(a.key));
      EXPECT_FALSE(store.erase(a.key));
    });
    EXPECT_EQ(store.entries(), 0u);
    EXPECT_EQ(store.stats().writes, 0u);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_warnings(err), 1) << err;
}

TEST_F(SsdStoreTest, PathUnderARegularFileDisablesWithOneWarning) {
  std::ofstream(root_.path() / "plain") << "x";
  expect_disabled_quietly(SsdStoreOptions{(root_.path() / "plain" / "cache").string(), 1 << 20, false});
}

TEST_F(SsdStoreTest, ReadOnlyDirectoryDisablesWithOneWarning) {
  fs::create_directories(dir_);
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  bool root_can_write = ::access(dir_.c_str(), W_OK) == 0;  // root ignores permission bits
  if (root_can_write) {
    // Running as root: chmod does not stop writes, force ENOTDIR with a path under a regular file.
    std::ofstream(root_.path() / "plain") << "x";
    return expect_disabled_quietly(SsdStoreOptions{(root_.path() / "plain" / "c").string(), 1 << 20, false});
  }
  expect_disabled_quietly(opts());
}

TEST_F(SsdStoreTest, MissingDirectoryIsCreated) {
  SsdStore store(SsdStoreOptions{(root_.path() / "a" / "b" / "c").string(), 1 << 20, false});
  EXPECT_TRUE(store.enabled());
  EXPECT_TRUE(put(store, make_sample(1, 1)));
}

TEST_F(SsdStoreTest, DirectoryRemovedWhileOpenDisablesWithOneWarning) {
  SsdStore store(opts());
  Sample a = make_sample(1, 1), b = make_sample(2, 2);
  ASSERT_TRUE(put(store, a));
  fs::remove_all(dir_);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(put(store, b));
  EXPECT_FALSE(store.enabled());
  EXPECT_FALSE(put(store, b));
  EXPECT_FALSE(store.get(a.key).has_value());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_warnings(err), 1) << err;
  EXPECT_EQ(store.stats().write_failures, 1u);
}

TEST_F(SsdStoreTest, SecondStoreOnTheSameDirectoryIsDisabled) {
  SsdStore first(opts());
  ASSERT_TRUE(first.enabled());
  expect_disabled_quietly(opts());
  EXPECT_TRUE(put(first, make_sample(1, 1)));
}

TEST_F(SsdStoreTest, ConcurrentPutsAndGetsNeverServeTornEntries) {
  SsdStore store(opts());
  std::vector<Sample> s;
  for (int i = 0; i < 40; ++i) s.push_back(make_sample(500 + i, i + 1, 4 + i));
  std::thread writer([&] {
    for (const auto& x : s) EXPECT_TRUE(put(store, x));
  });
  int hits = 0;
  for (int round = 0; round < 200; ++round) {
    const Sample& x = s[round % s.size()];
    if (store.contains(x.key)) {
      expect_hit(store, x);
      ++hits;
    }
  }
  writer.join();
  for (const auto& x : s) expect_hit(store, x);
  EXPECT_EQ(store.stats().quarantined, 0u);
  EXPECT_EQ(store.entries(), s.size());
}

}  // namespace
