// Engine + SSD tier of the prefix cache on the CPU (tiny synthetic model): a request's prefix is
// snapshotted to disk by the writer thread; a NEW engine (new runner, new pool, empty device cache) on the
// same directory restores it, reports the hit in Usage.cached_tokens and answers bit for bit like an
// engine without any cache. Damaged files (header always checked; payload with verify) are misses that
// get quarantined and the answer stays correct; another namespace misses.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../../support/scratch_dir.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace bunsen::engine {
namespace {

namespace fs = std::filesystem;
using test::Collector;
using test::cpu_ctx;
using test::make_prompt;
using test::runner_opts;
using test::snapshot_files;
using test::tiny_model;
using test_support::ScratchDir;

constexpr int32_t kBlock = 4;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  Usage usage;
  EngineStats stats;  // after the request (and, with an SSD dir, after its snapshot was written)
};

EngineRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t salt = 0) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 3;  // full-logits path: logprobs compare the whole forward
  r.ignore_eos = true;
  r.cache_salt = salt;
  return r;
}

size_t quarantined_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "quarantine", ec)) return 0;
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir / "quarantine"), fs::directory_iterator()));
}

// Runs `req` on a fresh model + runner + engine (an empty device cache) and destroys the engine, which
// finishes the SSD writes. ssd_dir "" = no SSD tier; cache false = no prefix cache at all.
Result run_fresh(EngineRequest req, const std::string& ssd_dir, bool cache = true, bool verify = false) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  EngineOptions o;
  o.max_batch = 2;
  o.max_num_batched_tokens = 16;
  o.prefix_cache = cache;
  o.ssd_cache_dir = ssd_dir;
  o.ssd_cache_verify = verify;
  Engine e(runner, o);
  Collector c;
  e.submit(std::move(req), c.sink());
  EXPECT_TRUE(c.wait());
  c.expect_one_terminal();
  Result r;
  for (const TokenOut& t : c.token_outs()) {
    r.tokens.push_back(t.token);
    r.logprobs.push_back(t.logprob);
  }
  EXPECT_EQ(c.last().kind, EngineEvent::Kind::kFinish);
  r.usage = c.last().usage;
  e.shutdown();  // the writer thread drains when the engine (and its SSD tier) goes away...
  r.stats = e.stats();
  return r;
}

void expect_bitwise_equal(const Result& a, const Result& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.logprobs[i], &b.logprobs[i], sizeof(float)), 0)
        << "logprob " << i << ": " << a.logprobs[i] << " vs " << b.logprobs[i];
}

void flip_byte(const fs::path& file, std::streamoff offset_from_start) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(offset_from_start);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(offset_from_start);
  f.write(&c, 1);
}

TEST(EngineSsdCache, RestartHitsFromSsdBitForBit) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(3, 23);
  const Result ref = run_fresh(greedy(prompt, 6), "", /*cache=*/false);
  const Result first = run_fresh(greedy(prompt, 6), dir.path());
  EXPECT_EQ(first.usage.cached_tokens, 0);
  expect_bitwise_equal(first, ref);
  EXPECT_TRUE(first.stats.ssd_cache_enabled);
  EXPECT_FALSE(snapshot_files(dir.path()).empty());

  const Result again = run_fresh(greedy(prompt, 6), dir.path());  // new engine, new pool, same directory
  EXPECT_EQ(again.usage.cached_tokens, (23 - 1) / kBlock * kBlock);
  expect_bitwise_equal(again, ref);
  EXPECT_EQ(again.stats.ssd_cache_hits, 1);
  EXPECT_EQ(again.stats.ssd_cache_hit_tokens, (23 - 1) / kBlock * kBlock);
  EXPECT_EQ(again.stats.ssd_cache_quarantined, 0);
}

TEST(EngineSsdCache, NextTurnOfAConversationHitsTheSnapshotOfPromptPlusOutput) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(5, 21);
  const Result first = run_fresh(greedy(prompt, 7), dir.path());
  std::vector<int32_t> turn2 = prompt;
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  const auto more = make_prompt(9, 6);
  turn2.insert(turn2.end(), more.begin(), more.end());
  const Result ref = run_fresh(greedy(turn2, 5), "", /*cache=*/false);
  const Result second = run_fresh(greedy(turn2, 5), dir.path());
  // The first request computed 21 + 7 - 1 = 27 tokens: 6 full blocks were snapshotted.
  EXPECT_EQ(second.usage.cached_tokens, 27 / kBlock * kBlock);
  expect_bitwise_equal(second, ref);
}

TEST(EngineSsdCache, DamagedHeaderIsAQuarantinedMissAndTheAnswerIsRight) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(4, 22);
  const Result ref = run_fresh(greedy(prompt, 5), "", false);
  run_fresh(greedy(prompt, 5), dir.path());
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) flip_byte(f, 30);  // inside the prefix hash of the fixed header
  const Result again = run_fresh(greedy(prompt, 5), dir.path());
  EXPECT_EQ(again.usage.cached_tokens, 0);
  expect_bitwise_equal(again, ref);
  EXPECT_GE(quarantined_files(dir.path()), 1u);
  EXPECT_GE(again.stats.ssd_cache_quarantined, 1);
}

TEST(EngineSsdCache, DamagedPayloadWithVerifyIsAQuarantinedMiss) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(6, 22);
  const Result ref = run_fresh(greedy(prompt, 5), "", false);
  run_fresh(greedy(prompt, 5), dir.path());
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) flip_byte(f, static_cast<std::streamoff>(fs::file_size(f)) - 3);  // last tensor
  const Result again = run_fresh(greedy(prompt, 5), dir.path(), true, /*verify=*/true);
  EXPECT_EQ(again.usage.cached_tokens, 0);
  expect_bitwise_equal(again, ref);
  EXPECT_GE(again.stats.ssd_cache_quarantined, 1);
  EXPECT_GE(again.stats.ssd_cache_misses, 1);
  EXPECT_GE(quarantined_files(dir.path()), 1u);
}

TEST(EngineSsdCache, AnotherNamespaceMisses) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(7, 22);
  run_fresh(greedy(prompt, 5, /*salt=*/0), dir.path());
  const Result salted = run_fresh(greedy(prompt, 5, /*salt=*/99), dir.path());
  EXPECT_EQ(salted.usage.cached_tokens, 0);
  EXPECT_EQ(salted.stats.ssd_cache_hits, 0);
  EXPECT_EQ(salted.stats.ssd_cache_misses, 1);
  const Result plain = run_fresh(greedy(prompt, 5, 0), dir.path());  // the original namespace still hits
  EXPECT_EQ(plain.usage.cached_tokens, (22 - 1) / kBlock * kBlock);
}

TEST(EngineSsdCache, PartialDeviceHitIsCompletedFromSsd) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(2, 23);
  const Result ref = run_fresh(greedy(prompt, 6), "", /*cache=*/false);
  run_fresh(greedy(prompt, 6), dir.path());
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  EngineOptions o;
  o.max_batch = 2;
  o.max_num_batched_tokens = 16;
  o.ssd_cache_dir = dir.path();
  Engine e(runner, o);
  {  // the first 9 prompt tokens: 2 full blocks end up in the device cache
    Collector c;
    e.submit(greedy(std::vector<int32_t>(prompt.begin(), prompt.begin() + 9), 3), c.sink());
    ASSERT_TRUE(c.wait());
  }
  Collector c;
  e.submit(greedy(prompt, 6), c.sink());
  ASSERT_TRUE(c.wait());
  Result r;
  for (const TokenOut& t : c.token_outs()) {
    r.tokens.push_back(t.token);
    r.logprobs.push_back(t.logprob);
  }
  EXPECT_EQ(c.last().usage.cached_tokens, (23 - 1) / kBlock * kBlock);
  expect_bitwise_equal(r, ref);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.ssd_cache_hits, 1);
  EXPECT_EQ(s.ssd_cache_hit_tokens, (23 - 1) / kBlock * kBlock - 2 * kBlock);  // the device had 2 blocks
}

TEST(EngineSsdCache, DeviceHitNeedsNoDiskAndOffMeansOff) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(8, 19);
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  EngineOptions o;
  o.max_batch = 2;
  o.max_num_batched_tokens = 16;
  o.ssd_cache_dir = dir.path();
  Engine e(runner, o);
  for (int i = 0; i < 2; ++i) {
    Collector c;
    e.submit(greedy(prompt, 4), c.sink());
    ASSERT_TRUE(c.wait());
    EXPECT_EQ(c.last().usage.cached_tokens, i == 0 ? 0 : (19 - 1) / kBlock * kBlock);
  }
  const EngineStats s = e.stats();
  EXPECT_EQ(s.ssd_cache_hits, 0);  // the second one hit the device tier: no disk lookup
  EXPECT_EQ(s.ssd_cache_misses, 1);  // only the first one looked (and found an empty directory)
  const Result off = run_fresh(greedy(prompt, 4), "");
  EXPECT_FALSE(off.stats.ssd_cache_enabled);
}

}  // namespace
}  // namespace bunsen::engine
