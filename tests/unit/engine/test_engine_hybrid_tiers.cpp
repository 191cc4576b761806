// Hybrid (gated DeltaNet + attention) models through the RAM and SSD tiers of the prefix cache, on the CPU
// with the qwen3_5_text and qwen3_next golden fixtures' architectures (synthetic weights): a NEW engine on the
// same --ssd-cache directory (a restart) hits the prompt's checkpoint boundary from disk and answers bit for
// bit like an engine without any cache, from version-3 files that carry the linear-attention state; a
// checkpoint the device replaced comes back from RAM (with or without its blocks); a damaged state payload
// is a quarantined miss even without --ssd-cache-verify, and the answer stays right.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "../../support/scratch_dir.h"
#include "core/status.h"
#include "engine_test_util.h"
#include "kv/ssd_format.h"

namespace bunsen::engine::test {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;
constexpr int32_t kBs = 8;

// The answers of an engine without any cache (a fresh runner per call keeps them independent).
std::vector<TokenOut> reference(model::Model& m, const std::vector<int32_t>& prompt) {
  Runner r(m, runner_opts(2, 32, 0, kBs), cpu_ctx());
  EngineOptions off;
  off.max_batch = 2;
  off.max_num_batched_tokens = 32;
  off.prefix_cache = false;
  Engine e(r, off);
  return ask(e, prompt, 6, 2, true).tokens;
}

struct Tiers {
  std::string ssd_dir;
  bool verify = false;
  uint64_t ram_bytes = 0;
  int32_t n_blocks = 0;
  int32_t checkpoints = 8;
};

// One engine's life: a fresh runner and engine (empty device cache) on `t`, the prompts asked in order;
// destroying the engine finishes its SSD writes.
struct Lifetime {
  std::vector<Answer> answers;
  EngineStats stats;
};
Lifetime run_fresh(model::Model& m, const Tiers& t, const std::vector<std::vector<int32_t>>& prompts) {
  RunnerOptions ro = runner_opts(2, 32, t.n_blocks, kBs);
  ro.state_checkpoints = t.checkpoints;
  Runner runner(m, ro, cpu_ctx());
  EngineOptions o;
  o.max_batch = 2;
  o.max_num_batched_tokens = 32;
  o.ssd_cache_dir = t.ssd_dir;
  o.ssd_cache_verify = t.verify;
  o.ram_cache_bytes = t.ram_bytes;
  Engine e(runner, o);
  Lifetime r;
  for (const auto& p : prompts) r.answers.push_back(ask(e, p, 6, 2, true));
  e.shutdown();
  r.stats = e.stats();
  EXPECT_EQ(r.stats.kv_blocks_free, r.stats.kv_blocks_total);
  EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
  return r;
}

uint32_t file_version(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(8);
  uint32_t v = 0;
  f.read(reinterpret_cast<char*>(&v), 4);
  return v;
}

size_t quarantined_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "quarantine", ec)) return 0;
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir / "quarantine"), fs::directory_iterator()));
}

class HybridTiers : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridTiers, RestartHitsTheCheckpointFromSsdBitForBit) {
  auto m = fixture_model(GetParam());
  ScratchDir dir("bunsen_engine_test");
  const std::vector<int32_t> a = make_prompt(1, 70);  // checkpoint boundary floor(69 / 8) * 8 = 64
  const Lifetime first = run_fresh(*m, {dir.str()}, {a});
  EXPECT_EQ(first.answers[0].cached, 0);
  expect_same(first.answers[0].tokens, reference(*m, a), "cold");
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) EXPECT_EQ(file_version(f), kv::kSsdFormatVersionState) << f;
  EXPECT_EQ(files.size(), 1u) << "the prompt's checkpoint boundary only (the full prefix has no checkpoint)";

  // A restart: the same prompt, then the conversation's next turn (its checkpoint is A's, at 64).
  std::vector<int32_t> a_out;
  for (const TokenOut& t : first.answers[0].tokens) a_out.push_back(t.token);
  const std::vector<int32_t> turn2 = concat(concat(a, a_out), make_prompt(4, 12));
  const Lifetime again = run_fresh(*m, {dir.str()}, {a});
  EXPECT_EQ(again.answers[0].cached, 64);
  expect_same(again.answers[0].tokens, first.answers[0].tokens, "restart, A resent");
  EXPECT_EQ(again.stats.ssd_cache_hits, 1);
  EXPECT_EQ(again.stats.ssd_cache_hit_tokens, 64);
  EXPECT_EQ(again.stats.ssd_cache_quarantined, 0);
  EXPECT_GE(again.stats.state_checkpoint_hits, 1) << "the hit resumed from the restored checkpoint";
  const Lifetime next = run_fresh(*m, {dir.str(), /*verify=*/true}, {turn2});
  EXPECT_EQ(next.answers[0].cached, 64);
  expect_same(next.answers[0].tokens, reference(*m, turn2), "restart, next turn");
}

TEST_P(HybridTiers, ConcurrentPromptsOfOneRestoredPrefixBothHitAndOneSlotIsAMiss) {
  auto m = fixture_model(GetParam());
  ScratchDir dir("bunsen_engine_test");
  const std::vector<int32_t> a = make_prompt(6, 61);  // boundary 56
  const std::vector<int32_t> a2 = concat(a, make_prompt(7, 9));
  // References first: two engines must not run forwards of one model at the same time.
  const std::vector<std::vector<TokenOut>> want = {reference(*m, a), reference(*m, a2)};
  run_fresh(*m, {dir.str()}, {a});
  {  // a restart with both prompts in flight at once: one restores, the other waits for that job
    RunnerOptions ro = runner_opts(2, 32, 0, kBs);
    Runner runner(*m, ro, cpu_ctx());
    EngineOptions o;
    o.max_batch = 2;
    o.max_num_batched_tokens = 32;
    o.ssd_cache_dir = dir.str();
    Engine e(runner, o);
    std::vector<std::unique_ptr<Collector>> cs;
    for (const auto* p : {&a, &a2}) {
      EngineRequest r;
      r.prompt = *p;
      r.max_tokens = 6;
      r.sampling.temperature = 0.0f;
      r.top_logprobs = 2;
      r.ignore_eos = true;
      cs.push_back(std::make_unique<Collector>());
      e.submit(std::move(r), cs.back()->sink());
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      ASSERT_TRUE(cs[i]->wait());
      cs[i]->expect_one_terminal();
      EXPECT_EQ(cs[i]->last().usage.cached_tokens, 56) << i;
      expect_same(cs[i]->token_outs(), want[i], "concurrent " + std::to_string(i));
    }
    EXPECT_EQ(e.stats().ssd_cache_hits, 1) << "one restore serves both";
    e.shutdown();
    EXPECT_EQ(runner.pool().n_free_state_slots(), 2);
  }
  // One checkpoint slot: none can be reserved for a restore (insert() keeps it), so the file is a miss.
  Tiers one{dir.str()};
  one.checkpoints = 1;
  const Lifetime r = run_fresh(*m, one, {a});
  EXPECT_EQ(r.answers[0].cached, 0);
  expect_same(r.answers[0].tokens, want[0], "one checkpoint slot");
  EXPECT_EQ(r.stats.ssd_cache_hits, 0);
}

TEST_P(HybridTiers, DamagedStatePayloadIsAQuarantinedMissWithoutVerify) {
  auto m = fixture_model(GetParam());
  ScratchDir dir("bunsen_engine_test");
  const std::vector<int32_t> a = make_prompt(2, 53);  // boundary 48
  const Lifetime first = run_fresh(*m, {dir.str()}, {a});
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {  // the last byte of the last tensor: the last linear layer's recurrent state
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(fs::file_size(f)) - 1);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x21);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f)) - 1);
    io.write(&c, 1);
  }
  const Lifetime again = run_fresh(*m, {dir.str(), /*verify=*/false}, {a});
  EXPECT_EQ(again.answers[0].cached, 0);
  expect_same(again.answers[0].tokens, first.answers[0].tokens, "damaged state");
  EXPECT_GE(again.stats.ssd_cache_quarantined, 1);
  EXPECT_GE(again.stats.ssd_cache_misses, 1);
  EXPECT_EQ(again.stats.ssd_cache_hits, 0);
  EXPECT_GE(quarantined_files(dir.path()), 1u);
}

TEST_P(HybridTiers, ReplacedCheckpointComesBackFromRam) {
  auto m = fixture_model(GetParam());
  const std::vector<int32_t> a = make_prompt(1, 70), b = make_prompt(2, 45), c = make_prompt(3, 37),
                             d = make_prompt(5, 29);
  const std::vector<TokenOut> want = reference(*m, a);
  // Two checkpoint slots: B, C and D replace A's. A big pool keeps A's blocks on the device (a state-only
  // restore); a small one (24 blocks) evicts them too (blocks and state from RAM).
  for (const int32_t n_blocks : {0, 24}) {
    const std::string what = n_blocks == 0 ? "blocks on the device" : "blocks in RAM";
    Tiers t;
    t.ram_bytes = 64u << 20;
    t.n_blocks = n_blocks;
    t.checkpoints = 2;
    const Lifetime r = run_fresh(*m, t, {a, b, c, d, a});
    EXPECT_EQ(r.answers[0].cached, 0) << what;
    EXPECT_EQ(r.answers[4].cached, 64) << what;
    expect_same(r.answers[4].tokens, want, what);
    EXPECT_GE(r.stats.state_checkpoint_evictions, 3) << what;
    EXPECT_EQ(r.stats.ram_cache_hits, 1) << what;
    // The RAM tier's checkpoint area: A's checkpoint (and the others replaced) went in, A's came back.
    EXPECT_GT(r.stats.ram_cache_state_capacity, 0) << what;
    EXPECT_GE(r.stats.ram_cache_state_stores, 3) << what;
    EXPECT_GE(r.stats.ram_cache_state_entries, 1) << what;
    EXPECT_GT(r.stats.ram_cache_state_bytes, 0) << what;
    EXPECT_EQ(r.stats.ram_cache_state_hits, 1) << what;
    if (n_blocks > 0) {
      EXPECT_GT(r.stats.ram_cache_stores, 0) << what;
    }
  }
  // Without the RAM tier the same traffic misses: the checkpoint is gone (never a resume from a wrong state).
  Tiers none;
  none.checkpoints = 2;
  const Lifetime r = run_fresh(*m, none, {a, b, c, d, a});
  EXPECT_EQ(r.answers[4].cached, 0);
  expect_same(r.answers[4].tokens, want, "no RAM tier");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridTiers, ::testing::Values("qwen3_5_text", "qwen3_next"));

}  // namespace
}  // namespace bunsen::engine::test
