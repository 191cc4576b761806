// RestorePool on the CPU: jobs copy every byte they are given (odd sizes, pieces smaller than a copy, several
// workers, jobs side by side), payload checks run and a mismatch fails the job and is reported once, a failed
// prepare or a cancelled job copies nothing, and wait()/done() agree.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>

#include "engine/restore_pool.h"
#include "kv/ssd_format.h"

namespace bunsen::engine {
namespace {

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + static_cast<size_t>(seed) * 17 + 7) & 0xff);
  return v;
}

RestorePoolOptions cpu_options(int threads, size_t piece_bytes) {
  RestorePoolOptions o;
  o.device = Device::cpu();
  o.threads = threads;
  o.piece_bytes = piece_bytes;
  return o;
}

TEST(RestorePool, CopiesEveryByteInPiecesAcrossWorkers) {
  RestorePool pool(cpu_options(3, 7));  // pieces of 7 bytes: every copy is cut, some pieces span two copies
  EXPECT_EQ(pool.threads(), 3);
  std::vector<std::shared_ptr<RestoreJob>> jobs;
  std::vector<std::vector<std::byte>> src, dst;
  std::atomic<int> done_calls{0};
  for (int j = 0; j < 4; ++j) {
    src.push_back(pattern(1 + 33 * static_cast<size_t>(j) + 31, j));
    dst.emplace_back(src.back().size(), std::byte{0});
  }
  for (int j = 0; j < 4; ++j) {
    auto prepare = [&, j](std::string&) -> std::optional<RestorePlan> {
      RestorePlan p;
      const size_t n = src[j].size(), half = n / 3;  // two copies, the second one reversed in order
      p.copies.push_back({dst[j].data() + half, src[j].data() + half, n - half});
      p.copies.push_back({dst[j].data(), src[j].data(), half});
      p.checks.push_back({src[j], kv::ssd_checksum64(src[j])});
      return p;
    };
    jobs.push_back(pool.submit(prepare, {}, [&] { ++done_calls; }));
  }
  for (int j = 0; j < 4; ++j) {
    pool.wait(*jobs[j]);
    EXPECT_TRUE(jobs[j]->ok()) << jobs[j]->error();
    EXPECT_EQ(jobs[j]->bytes(), src[j].size());
    EXPECT_EQ(dst[j], src[j]) << "job " << j;
    EXPECT_GT(jobs[j]->seconds(), 0.0);
  }
  EXPECT_EQ(done_calls.load(), 4);
}

TEST(RestorePool, ChecksumMismatchFailsTheJobAndIsReportedOnce) {
  RestorePool pool(cpu_options(4, 16));
  const auto src = pattern(100, 3);
  std::vector<std::byte> dst(src.size());
  std::atomic<int> reported{0};
  std::string why_seen;
  auto job = pool.submit(
      [&](std::string&) -> std::optional<RestorePlan> {
        RestorePlan p;
        p.copies.push_back({dst.data(), src.data(), src.size()});
        for (int i = 0; i < 5; ++i)  // every check fails: one report all the same
          p.checks.push_back({std::span<const std::byte>(src).subspan(20 * i, 20), 12345});
        p.on_check_failed = [&](const std::string& why) {
          ++reported;
          why_seen = why;
        };
        return p;
      },
      {}, {});
  pool.wait(*job);
  EXPECT_TRUE(job->done());
  EXPECT_FALSE(job->ok());
  EXPECT_NE(job->error().find("checksum"), std::string::npos) << job->error();
  EXPECT_EQ(reported.load(), 1);
  EXPECT_NE(why_seen.find("checksum"), std::string::npos);
}

TEST(RestorePool, FailedPrepareAndCancelledJobsCopyNothing) {
  std::atomic<bool> gate{false};
  RestorePoolOptions o = cpu_options(2, 8);
  o.job_hook = [&] {
    while (!gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  RestorePool pool(std::move(o));
  const auto src = pattern(64, 5);
  std::vector<std::byte> dst(src.size(), std::byte{0});
  auto plan = [&](std::string&) -> std::optional<RestorePlan> {
    RestorePlan p;
    p.copies.push_back({dst.data(), src.data(), src.size()});
    return p;
  };
  auto failing = pool.submit([](std::string& why) -> std::optional<RestorePlan> {
    why = "no such snapshot";
    return std::nullopt;
  }, {}, {});
  auto cancelled = pool.submit(plan, {}, {});
  cancelled->cancel();  // before its prepare ran (the hook holds every job)
  EXPECT_FALSE(failing->done());
  gate = true;
  pool.wait(*failing);
  pool.wait(*cancelled);
  EXPECT_FALSE(failing->ok());
  EXPECT_EQ(failing->error(), "no such snapshot");
  EXPECT_FALSE(cancelled->ok());
  EXPECT_TRUE(cancelled->cancelled());
  EXPECT_EQ(cancelled->bytes(), 0u);
  EXPECT_EQ(dst, std::vector<std::byte>(src.size(), std::byte{0}));
  auto fine = pool.submit(plan, {}, {});  // the pool still works
  pool.wait(*fine);
  EXPECT_TRUE(fine->ok());
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace bunsen::engine
