// Engine + SSD tier restores as asynchronous jobs on the CPU (tiny synthetic model, real files, real restore
// workers): a restore held in flight by the test hook does not stop another sequence from stepping and the
// restored request still answers bit for bit like a cold run; a second request for the prefix waits for the
// same job; cancelling a request whose restore is in flight
// leaks no block; a damaged payload with --ssd-cache-verify fails the job, the prompt is prefilled (same
// answer) and the file is quarantined.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "../../support/scratch_dir.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace bunsen::engine {
namespace {

namespace fs = std::filesystem;
using test::Collector;
using test::cpu_ctx;
using test::eventually;
using test::greedy_request;
using test::make_prompt;
using test::result_of;
using test::runner_opts;
using test::snapshot_files;
using test::tiny_model;
using test_support::ScratchDir;

constexpr int32_t kBlock = 4;

// Holds every restore job at its start until open() (the restore hook blocks on it).
class Gate {
 public:
  void pass() {
    std::unique_lock<std::mutex> lk(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return open_; });
  }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(20), [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

EngineOptions options(const std::string& dir, Gate* gate = nullptr, bool verify = false) {
  EngineOptions o;
  o.max_batch = 2;
  o.max_num_batched_tokens = 16;
  o.ssd_cache_dir = dir;
  o.ssd_cache_verify = verify;
  o.ssd_restore_threads = 3;
  if (gate) o.ssd_restore_hook = [gate] { gate->pass(); };
  return o;
}

// One request on a fresh engine (an empty device cache); dir "" = no cache at all. The engine's shutdown
// finishes the SSD writes.
test::GreedyResult run_fresh(const std::vector<int32_t>& prompt, int64_t max_tokens, const std::string& dir) {
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  EngineOptions o = options(dir);
  o.prefix_cache = !dir.empty();
  Engine e(runner, o);
  Collector c;
  e.submit(greedy_request(prompt, max_tokens, 3), c.sink());
  EXPECT_TRUE(c.wait());
  c.expect_one_terminal();
  return result_of(c);
}

size_t quarantined_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "quarantine", ec)) return 0;
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir / "quarantine"), fs::directory_iterator()));
}

TEST(EngineSsdRestore, AnotherSequenceStepsWhileARestoreIsInFlightAndTheRestoreIsExact) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(3, 23);
  const test::GreedyResult ref = run_fresh(prompt, 6, "");
  run_fresh(prompt, 6, dir.path());  // writes the snapshots
  ASSERT_FALSE(snapshot_files(dir.path()).empty());

  Gate gate;
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, options(dir.path(), &gate));
  Collector restored, other;
  e.submit(greedy_request(prompt, 6, 3), restored.sink());
  ASSERT_TRUE(gate.wait_entered(1));  // its restore job started and is held
  e.submit(greedy_request(make_prompt(40, 9), 12, 3), other.sink());  // nothing on disk for this one
  ASSERT_TRUE(other.wait());  // ran to the end while the restore was still pending
  EXPECT_EQ(other.tokens().size(), 12u);
  EXPECT_TRUE(restored.tokens().empty());  // still waiting for its restore
  EngineStats s = e.stats();
  EXPECT_EQ(s.ssd_cache_restores_pending, 1);
  EXPECT_EQ(s.waiting, 1);
  EXPECT_EQ(s.ssd_cache_hits, 0);

  gate.open();
  ASSERT_TRUE(restored.wait());
  restored.expect_one_terminal();
  const test::GreedyResult got = result_of(restored);
  EXPECT_EQ(got.usage.cached_tokens, (23 - 1) / kBlock * kBlock);
  test::expect_same_bits(got, ref, 0);
  s = e.stats();
  EXPECT_EQ(s.ssd_cache_hits, 1);
  EXPECT_EQ(s.ssd_cache_hit_tokens, (23 - 1) / kBlock * kBlock);
  EXPECT_EQ(s.ssd_cache_restores_pending, 0);
  EXPECT_GT(s.ssd_cache_restored_bytes, 0);
  EXPECT_GT(s.ssd_cache_restore_s, 0.0);
}

TEST(EngineSsdRestore, CancellingARequestWhoseRestoreIsInFlightLeaksNoBlock) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(5, 22);
  run_fresh(prompt, 5, dir.path());
  Gate gate;
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, options(dir.path(), &gate));
  const int64_t free0 = e.stats().kv_blocks_free;
  ASSERT_EQ(free0, e.stats().kv_blocks_total);
  Collector c;
  const RequestId id = e.submit(greedy_request(prompt, 5, 3), c.sink());
  ASSERT_TRUE(gate.wait_entered(1));
  // The job holds the destination blocks (the device had none of the prefix: all of it is restored).
  ASSERT_TRUE(eventually([&] { return e.stats().kv_blocks_free == free0 - (22 - 1) / kBlock; }))
      << e.stats().kv_blocks_free;
  e.cancel(id);
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(e.stats().ssd_cache_restores_pending, 1);  // the blocks stay with the job until it ends
  EXPECT_LT(e.stats().kv_blocks_free, free0);
  gate.open();
  EXPECT_TRUE(eventually([&] {
    const EngineStats s = e.stats();
    return s.ssd_cache_restores_pending == 0 && s.kv_blocks_free == free0;
  })) << e.stats().kv_blocks_free << " of " << free0;
  const EngineStats s = e.stats();
  EXPECT_EQ(s.prefix_cache_entries, 0);  // a cancelled restore's blocks are never cached
  EXPECT_EQ(s.ssd_cache_hits, 0);
  EXPECT_EQ(s.ssd_cache_restored_bytes, 0);
  // The engine goes on: the same prompt now restores and answers.
  Collector again;
  e.submit(greedy_request(prompt, 5, 3), again.sink());
  ASSERT_TRUE(again.wait());
  EXPECT_EQ(again.last().usage.cached_tokens, (22 - 1) / kBlock * kBlock);
}

TEST(EngineSsdRestore, ASecondRequestForAPrefixBeingRestoredWaitsForThatJob) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(8, 23);
  const test::GreedyResult ref = run_fresh(prompt, 4, "");
  run_fresh(prompt, 4, dir.path());
  Gate gate;
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, options(dir.path(), &gate));
  Collector a, b;
  e.submit(greedy_request(prompt, 4, 3), a.sink());
  ASSERT_TRUE(gate.wait_entered(1));
  e.submit(greedy_request(prompt, 4, 3), b.sink());
  ASSERT_TRUE(eventually([&] { return e.stats().waiting == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // steps run: b is looked up meanwhile
  EXPECT_EQ(e.stats().ssd_cache_restores_pending, 1);  // b follows a's job instead of starting its own
  gate.open();
  ASSERT_TRUE(a.wait());
  ASSERT_TRUE(b.wait());
  for (Collector* c : {&a, &b}) {
    const test::GreedyResult got = result_of(*c);
    EXPECT_EQ(got.usage.cached_tokens, (23 - 1) / kBlock * kBlock);
    test::expect_same_bits(got, ref, 0);
  }
  const EngineStats s = e.stats();
  EXPECT_EQ(s.ssd_cache_hits, 1);  // one restore served both
  EXPECT_EQ(s.ssd_cache_restores_pending, 0);
}

TEST(EngineSsdRestore, DamagedPayloadWithVerifyFailsTheJobPrefillsAndQuarantines) {
  ScratchDir dir("bunsen_engine_test");
  const auto prompt = make_prompt(6, 22);
  const test::GreedyResult ref = run_fresh(prompt, 5, "");
  run_fresh(prompt, 5, dir.path());
  const auto files = snapshot_files(dir.path());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {  // one byte of the last tensor's last block (restored: d = 0)
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(f) - 3);
    io.seekg(at);
    char ch = 0;
    io.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x21);
    io.seekp(at);
    io.write(&ch, 1);
  }
  Gate gate;
  gate.open();  // the hook only counts: the job must have run on a worker
  auto m = tiny_model();
  Runner runner(*m, runner_opts(2, 16, 0, kBlock), cpu_ctx());
  Engine e(runner, options(dir.path(), &gate, /*verify=*/true));
  Collector c;
  e.submit(greedy_request(prompt, 5, 3), c.sink());
  ASSERT_TRUE(c.wait());
  c.expect_one_terminal();
  ASSERT_TRUE(gate.wait_entered(1));
  const test::GreedyResult got = result_of(c);
  EXPECT_EQ(got.usage.cached_tokens, 0);  // prefilled
  test::expect_same_bits(got, ref, 0);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.ssd_cache_hits, 0);
  EXPECT_EQ(s.ssd_cache_misses, 1);
  EXPECT_GE(s.ssd_cache_quarantined, 1);
  EXPECT_EQ(s.ssd_cache_restored_bytes, 0);
  EXPECT_EQ(s.ssd_cache_restores_pending, 0);
  EXPECT_GE(quarantined_files(dir.path()), 1u);
  EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);  // the job's blocks went back (the request's are cached)
}

}  // namespace
}  // namespace bunsen::engine
