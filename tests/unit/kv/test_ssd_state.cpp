// Linear-attention state in the prefix cache's tiers, kv side: SSD snapshots with a state part are version-3
// files (header extension, round trip after a restart with payload verification), damaged or inconsistent
// state parts are quarantined; kv::StateCheckpoints' evict hook sees a checkpoint before its slot is reused,
// and reserved slots (restores in flight) are never found or replaced and always leave one slot for insert().
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "../../support/scratch_dir.h"
#include "core/status.h"
#include "kv/ssd_store.h"
#include "kv/state_checkpoints.h"
#include "ssd_test_util.h"

namespace bunsen::kv {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kNs = 0x5eed5eed12345678ull;

using Sample = test::SsdSample;
using test::read_u32;
using test_support::ScratchDir;

// 8 tokens = 2 blocks of 4; 2 K/V tensors of [2, 4, 1, 8] bf16, then `n_state` state tensors of 24 + 8 * i bytes.
Sample make_state_sample(uint64_t prefix_hash, uint32_t seed, uint32_t n_state) {
  Sample s;
  s.key = {kNs, prefix_hash};
  for (int i = 0; i < 8; ++i) s.tokens.push_back(static_cast<int32_t>(seed * 100 + i));
  s.layout.n_layers = 1;
  s.layout.block_size = 4;
  s.layout.n_kv_heads = 1;
  s.layout.head_dim = 8;
  uint32_t x = seed * 2654435761u + 3;
  for (int t = 0; t < 2; ++t) s.add_payload(2 * 4 * 1 * 8 * 2, x);
  for (uint32_t i = 0; i < n_state; ++i) s.add_payload(24 + 8 * i, x);
  s.layout.state.n_tensors = n_state;
  return s;
}

template <typename Edit>
void reseal_header(const fs::path& p, Edit edit) {
  const uint32_t header_bytes = read_u32(p, 12);
  std::vector<std::byte> head(header_bytes);
  {
    std::ifstream f(p, std::ios::binary);
    f.read(reinterpret_cast<char*>(head.data()), header_bytes);
  }
  edit(head);
  const uint64_t sum = ssd_checksum64(std::span<const std::byte>(head).first(header_bytes - 8));
  std::memcpy(head.data() + header_bytes - 8, &sum, 8);
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(head.data()), header_bytes);
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

class SsdStateTest : public ::testing::Test {
 protected:
  SsdStoreOptions opts(bool verify = false) const {
    return SsdStoreOptions{(root_.path() / "c").string(), 1ull << 30, verify};
  }
  fs::path file_of(const SsdEntryKey& k) const { return root_.path() / "c" / SsdStore::file_name(k); }
  ScratchDir root_{"bunsen-ssd-state"};
};

TEST_F(SsdStateTest, StatePartIsVersion3AndSurvivesARestartVerified) {
  const Sample a = make_state_sample(1, 1, 4);
  {
    SsdStore store(opts());
    ASSERT_TRUE(store.put(a.key, a.tokens, a.layout, a.spans()));
  }
  EXPECT_EQ(read_u32(file_of(a.key), 8), kSsdFormatVersionState);
  EXPECT_EQ(read_u32(file_of(a.key), 12), kSsdFixedHeaderBytes + 6 * 16 + kSsdSlidingExtBytes + kSsdStateExtBytes + 8);
  SsdStore store(opts(/*verify=*/true));
  ASSERT_EQ(store.entries(), 1u);
  const auto e = store.get(a.key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->layout, a.layout);
  EXPECT_EQ(e->layout.state.n_tensors, 4u);
  EXPECT_EQ(e->layout.sliding.n_tensors, 0u);
  ASSERT_EQ(e->tensors.size(), a.payloads.size());
  for (size_t t = 0; t < a.payloads.size(); ++t)
    EXPECT_EQ(std::memcmp(e->tensors[t].data(), a.payloads[t].data(), a.payloads[t].size()), 0) << t;
  EXPECT_EQ(store.stats().quarantined, 0u);
}

TEST_F(SsdStateTest, InconsistentStatePartsAreQuarantined) {
  const Sample a = make_state_sample(1, 1, 2), b = make_state_sample(2, 2, 2), c = make_state_sample(3, 3, 2),
               plain = make_state_sample(4, 4, 0);
  {
    SsdStore store(opts());
    for (const Sample* s : {&a, &b, &c, &plain}) ASSERT_TRUE(store.put(s->key, s->tokens, s->layout, s->spans()));
  }
  EXPECT_EQ(read_u32(file_of(plain.key), 8), kSsdFormatVersionNoSliding) << "no state: still version 1";
  const size_t state_ext = kSsdFixedHeaderBytes + 4 * 16 + kSsdSlidingExtBytes;
  reseal_header(file_of(a.key), [&](std::vector<std::byte>& h) {  // more state tensors than tensors
    const uint32_t n = 5;
    std::memcpy(h.data() + state_ext, &n, 4);
  });
  reseal_header(file_of(b.key), [&](std::vector<std::byte>& h) {  // the reserved word is not zero
    const uint32_t n = 1;
    std::memcpy(h.data() + state_ext + 4, &n, 4);
  });
  reseal_header(file_of(c.key), [&](std::vector<std::byte>& h) {  // zero state tensors called version 3
    const uint32_t n = 0;
    std::memcpy(h.data() + state_ext, &n, 4);
  });
  reseal_header(file_of(plain.key), [&](std::vector<std::byte>& h) {  // a version-1 header called version 3
    const uint32_t v = kSsdFormatVersionState;
    std::memcpy(h.data() + 8, &v, 4);
  });
  SsdStore store(opts());
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_EQ(store.stats().quarantined, 4u);
}

TEST_F(SsdStateTest, AFlippedStateByteIsCaughtByItsChecksum) {
  const Sample a = make_state_sample(1, 1, 2);
  {
    SsdStore store(opts());
    ASSERT_TRUE(store.put(a.key, a.tokens, a.layout, a.spans()));
  }
  flip_byte(file_of(a.key), fs::file_size(file_of(a.key)) - 1);  // the last state tensor's last byte
  SsdStore store(opts());
  auto e = store.get_unverified(a.key);  // header + tokens are fine
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(ssd_checksum64(e->tensors[2]), e->checksums[2]);
  EXPECT_NE(ssd_checksum64(e->tensors[3]), e->checksums[3]);
  store.reject(*e, "state checksum");
  EXPECT_FALSE(store.contains(a.key));
  EXPECT_EQ(store.stats().quarantined, 1u);
}

std::vector<int32_t> block(int32_t first) { return {first, first + 1, first + 2, first + 3}; }

TEST(StateCheckpointsTiers, EvictHookSeesTheReplacedCheckpointBeforeItsSlotIsReused) {
  StateCheckpoints c(2, 4);
  std::vector<std::pair<BlockKey, int32_t>> seen;
  c.set_evict_hook([&](BlockKey key, BlockKey parent, std::span<const int32_t> tokens, int32_t slot) {
    EXPECT_EQ(parent, key - 1);
    EXPECT_EQ(tokens[0], static_cast<int32_t>(key) * 10);
    EXPECT_TRUE(c.holds(key, parent, tokens)) << "still stored while the hook runs";
    seen.emplace_back(key, slot);
  });
  const int32_t a = c.insert(1, 0, block(10));
  const int32_t b = c.insert(2, 1, block(20));
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(c.insert(2, 1, block(20)), b);  // the same key again: no eviction
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(c.insert(3, 2, block(30)), a);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(BlockKey{1}, a));
  EXPECT_FALSE(c.holds(1, 0, block(10)));
  EXPECT_EQ(c.stats().evictions, 1);
}

TEST(StateCheckpointsTiers, ReservedSlotsAreNeverFoundNorReplacedAndOneSlotStaysFree) {
  StateCheckpoints c(3, 4);
  int evicted = 0;
  c.set_evict_hook([&](BlockKey, BlockKey, std::span<const int32_t>, int32_t) { ++evicted; });
  c.insert(1, 0, block(10));
  const auto r = c.reserve();  // free slots: nothing evicted
  const auto r2 = c.reserve();
  ASSERT_TRUE(r.has_value() && r2.has_value());
  EXPECT_NE(*r, *r2);
  EXPECT_EQ(evicted, 0);
  EXPECT_FALSE(c.reserve().has_value()) << "the last unreserved slot stays for insert()";
  EXPECT_EQ(c.n_reserved(), 2);
  EXPECT_FALSE(c.holds(1, 0, block(10)) && (c.find(1, 0, block(10)) == r || c.find(1, 0, block(10)) == r2));
  c.unreserve(*r2);
  // Inserts cycle through the two unreserved slots; the reserved one is never handed out.
  for (BlockKey k = 2; k < 8; ++k) EXPECT_NE(c.insert(k, k - 1, block(static_cast<int32_t>(k) * 10)), *r);
  EXPECT_EQ(evicted, 5);
  EXPECT_EQ(c.stats().entries, 2);
  // commit: findable under its key; a slot holding the same key already is dropped (no duplicate).
  c.commit(*r, 7, 6, block(70));
  EXPECT_EQ(c.find(7, 6, block(70)), r);
  EXPECT_EQ(c.stats().entries, 2);
  EXPECT_EQ(c.n_reserved(), 0);
  // unreserve: the slot comes back empty and is used before any stored checkpoint is replaced.
  const auto r3 = c.reserve();
  ASSERT_TRUE(r3.has_value());
  EXPECT_NE(*r3, *r);
  const int before = evicted;
  c.unreserve(*r3);
  EXPECT_EQ(c.insert(100, 0, block(1000)), *r3);
  EXPECT_EQ(evicted, before);
  EXPECT_THROW(c.commit(*r3, 5, 4, block(50)), Error);  // not reserved
  EXPECT_THROW(c.unreserve(*r3), Error);
  StateCheckpoints one(1, 4);
  EXPECT_FALSE(one.reserve().has_value()) << "a single slot is never reserved";
}

}  // namespace
}  // namespace bunsen::kv
