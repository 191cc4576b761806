// RestorePool on a CUDA device: pageable host ranges reach device memory byte for byte through the pinned
// staging ring (tiny pieces and two staging buffers force every buffer to be reused behind its event), with
// several jobs in flight at once and an `after` event the copies wait for; DeviceEvent basics; and the
// throughput of a large restore from pageable host memory (printed: the SSD-tier budget is ~25 GB/s).
#include <chrono>
#include <cstring>

#include "cuda_test_util.h"
#include "engine/restore_pool.h"
#include "kernels/device.h"
#include "kv/ssd_format.h"

namespace bunsen::kernels::test {
namespace {

using engine::RestoreCopy;
using engine::RestorePlan;
using engine::RestorePool;
using engine::RestorePoolOptions;

class CudaRestorePool : public CudaTest {};

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + static_cast<size_t>(seed) * 17 + 7) & 0xff);
  return v;
}

std::vector<std::byte> read_back(const DeviceMemory& m, size_t offset, size_t n) {
  std::vector<std::byte> out(n);
  cuda::copy_to_host(out.data(), static_cast<const std::byte*>(m.data()) + offset, n);
  return out;
}

TEST_F(CudaRestorePool, EventsReportCompletionAndOrderStreams) {
  const Device dev = Device::cuda(0);
  DeviceEvent e = DeviceEvent::create(dev);
  EXPECT_TRUE(e.query());  // never recorded
  DeviceStream a = DeviceStream::create(dev), b = DeviceStream::create(dev);
  Context ca{nullptr, a.handle()}, cb{nullptr, b.handle()};
  const auto src = pattern(8 << 20, 1);
  DeviceMemory pinned = DeviceMemory::pinned_host(src.size());
  std::memcpy(pinned.data(), src.data(), src.size());
  DeviceMemory d1 = DeviceMemory::allocate(dev, src.size()), d2 = DeviceMemory::allocate(dev, src.size());
  copy_async(ca, d1.data(), pinned.data(), src.size());
  e.record(ca);
  e.wait_on(cb);  // b's copy of d1 must see a's upload
  copy_async(cb, d2.data(), d1.data(), src.size());
  synchronize(cb);
  EXPECT_TRUE(e.query());
  e.synchronize();
  EXPECT_EQ(read_back(d2, 0, src.size()), src);
}

TEST_F(CudaRestorePool, JobsLandByteForByteThroughAReusedStagingRing) {
  const Device dev = Device::cuda(0);
  RestorePoolOptions o;
  o.device = dev;
  o.threads = 4;
  o.piece_bytes = 4099;  // odd: pieces straddle copies
  o.staging_buffers = 2;
  RestorePool pool(o);
  constexpr int kJobs = 3;
  std::vector<std::vector<std::byte>> src;
  std::vector<DeviceMemory> dst;
  for (int j = 0; j < kJobs; ++j) {
    src.push_back(pattern(100003 + 7 * static_cast<size_t>(j), j));  // pageable
    dst.push_back(DeviceMemory::allocate(dev, src.back().size(), /*zero=*/true));
  }
  DeviceStream other = DeviceStream::create(dev);
  Context octx{nullptr, other.handle()};
  std::vector<std::shared_ptr<engine::RestoreJob>> jobs;
  for (int j = 0; j < kJobs; ++j) {
    DeviceEvent after = DeviceEvent::create(dev);
    after.record(octx);
    jobs.push_back(pool.submit(
        [&, j](std::string&) -> std::optional<RestorePlan> {
          RestorePlan p;
          const size_t n = src[j].size();
          for (size_t off = 0; off < n; off += 3001) {  // many small ranges, last one shorter
            const size_t len = std::min<size_t>(3001, n - off);
            p.copies.push_back({static_cast<std::byte*>(dst[j].data()) + off, src[j].data() + off, len});
          }
          p.checks.push_back({src[j], kv::ssd_checksum64(src[j])});
          return p;
        },
        after, {}));
  }
  for (int j = 0; j < kJobs; ++j) {
    pool.wait(*jobs[j]);
    ASSERT_TRUE(jobs[j]->ok()) << jobs[j]->error();
    EXPECT_EQ(jobs[j]->bytes(), src[j].size());
    EXPECT_EQ(read_back(dst[j], 0, src[j].size()), src[j]) << "job " << j;
  }
}

TEST_F(CudaRestorePool, LargeRestoreThroughput) {
  const Device dev = Device::cuda(0);
  constexpr size_t kBytes = size_t{1} << 30;
  std::vector<std::byte> src(kBytes);
  for (size_t i = 0; i < kBytes; i += 4096) src[i] = static_cast<std::byte>(i >> 12);  // touch: resident pages
  DeviceMemory dst = DeviceMemory::allocate(dev, kBytes);
  RestorePoolOptions o;
  o.device = dev;
  RestorePool pool(o);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto job = pool.submit(
        [&](std::string&) -> std::optional<RestorePlan> {
          RestorePlan p;
          for (size_t off = 0; off < kBytes; off += size_t{29} << 20)  // ranges of ~29 MB (a layer's K of a long prompt)
            p.copies.push_back({static_cast<std::byte*>(dst.data()) + off, src.data() + off,
                                std::min<size_t>(size_t{29} << 20, kBytes - off)});
          return p;
        },
        {}, {});
    pool.wait(*job);
    ASSERT_TRUE(job->ok()) << job->error();
    best = std::max(best, static_cast<double>(kBytes) / job->seconds() / 1e9);
  }
  std::printf("restore pool: %d workers, pageable host -> device: %.1f GB/s (best of 3, 1 GiB)\n", pool.threads(),
              best);
  EXPECT_EQ(read_back(dst, size_t{777} << 20, 4096), std::vector<std::byte>(src.begin() + (size_t{777} << 20),
                                                                           src.begin() + (size_t{777} << 20) + 4096));
}

}  // namespace
}  // namespace bunsen::kernels::test
