// RestorePool: worker threads that bring a cache tier's payload (an SSD snapshot's file mapping) into KV blocks
// off the engine thread. A job is prepared by one worker (map + check the file, list which host bytes go
// where); its copies, cut into pieces, and its payload checksums are then shared by all workers, so the page
// cache is read in parallel. CUDA: a piece goes through a ring of pinned staging buffers (allocated once) and
// is copied on the pool's own stream with an event per buffer, so reads and PCIe transfers overlap; CPU: memcpy
// straight into the pool. Not bookkeeping: the engine allocates, keys and releases the blocks. Invariants: a
// job is done() only when every copy it issued has landed and no worker touches it again; a staging buffer is
// refilled only after its last copy ran; the destructor drains the queue (cancelled jobs copy nothing) and joins.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "kernels/device.h"

namespace bunsen::engine {

struct RestoreCopy {
  void* dst = nullptr;        // device memory (CUDA) or host memory (CPU pool)
  const void* src = nullptr;  // host memory, typically a file mapping
  size_t bytes = 0;
};

// A payload range and the checksum (kv::ssd_checksum64) it must have.
struct RestoreCheck {
  std::span<const std::byte> bytes;
  uint64_t checksum = 0;
};

// What a job's prepare step hands back.
struct RestorePlan {
  std::vector<RestoreCopy> copies;
  std::vector<RestoreCheck> checks;
  std::shared_ptr<const void> keep_alive;  // owns the memory the copies and checks read (the mapping)
  // Runs on a worker, once, when a check fails (the engine quarantines the file); `why` names the range.
  std::function<void(const std::string& why)> on_check_failed;
};

class RestoreJob {
 public:
  bool done() const { return done_.load(std::memory_order_acquire); }  // never blocks
  bool ok() const { return done() && !failed_.load(); }  // every copy landed, every check passed
  std::string error() const;                              // after done(); "" when ok
  // The remaining copies are skipped; done() still waits for the copies already issued.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  size_t bytes() const { return bytes_.load(); }  // bytes copied so far
  double seconds() const;                         // submit -> done (0 before)

 private:
  friend class RestorePool;
  void fail(const std::string& why);

  std::function<std::optional<RestorePlan>(std::string& why)> prepare_;
  kernels::DeviceEvent after_;  // the copies wait for it on the copy stream (empty: nothing to wait for)
  std::function<void()> on_done_;
  RestorePlan plan_;
  std::vector<std::vector<RestoreCopy>> pieces_;  // plan_.copies cut at piece_bytes (set by prepare)
  kernels::DeviceEvent landed_;  // recorded after the job's last copy
  std::atomic<int64_t> remaining_{0};
  std::atomic<size_t> bytes_{0};
  std::atomic<bool> issued_any_{false};
  std::atomic<bool> failed_{false}, cancelled_{false}, done_{false};
  bool settled_ = false;  // under the pool's mutex: done and its on_done callback has returned
  std::atomic<bool> check_reported_{false};
  mutable std::mutex error_mu_;
  std::string error_;  // guarded by error_mu_
  std::chrono::steady_clock::time_point t_submit_, t_done_;
};

struct RestorePoolOptions {
  Device device;                           // where the destinations live
  int threads = 0;                         // 0: min(8, hardware threads)
  size_t piece_bytes = size_t{32} << 20;   // bytes per piece = per staging buffer
  int staging_buffers = 0;                 // CUDA: 0 = clamp(threads, 4, 8)
  std::function<void()> job_hook;          // tests: runs on a worker at the start of every job (may block)
};

class RestorePool {
 public:
  explicit RestorePool(RestorePoolOptions options);  // allocates the staging ring (CUDA); throws on failure
  ~RestorePool();
  RestorePool(const RestorePool&) = delete;
  RestorePool& operator=(const RestorePool&) = delete;

  // Queues a job. `prepare` runs on a worker (nullopt + why: the job fails); the copies wait on `after`
  // (recorded on the stream whose earlier work must not be overtaken: empty for none); `on_done` runs on a
  // worker once the job is done (keep it short: the engine wakes its loop).
  std::shared_ptr<RestoreJob> submit(std::function<std::optional<RestorePlan>(std::string& why)> prepare,
                                     kernels::DeviceEvent after, std::function<void()> on_done);
  // Blocks until `job` is done (shutdown and tests; the engine loop polls done()).
  void wait(const RestoreJob& job);
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Task {
    std::shared_ptr<RestoreJob> job;
    int64_t index = -1;  // -1: prepare; [0, n_pieces): a piece; then the checks
  };
  struct Staging {
    kernels::DeviceMemory memory;  // pinned, piece_bytes
    kernels::DeviceEvent event;    // recorded after the copies that read it
  };
  void run();
  void run_task(const Task& t, kernels::Context& ctx);
  void prepare(const std::shared_ptr<RestoreJob>& job, kernels::Context& ctx);
  void copy_piece(RestoreJob& job, std::span<const RestoreCopy> parts, kernels::Context& ctx);
  void verify(RestoreJob& job, const RestoreCheck& c);
  void task_done(RestoreJob& job, kernels::Context& ctx);
  Staging* take_staging();
  void give_staging(Staging* s);

  RestorePoolOptions opts_;
  bool cuda_ = false;
  kernels::DeviceStream copy_stream_;  // CUDA: every job's host-to-device copies
  std::vector<Staging> staging_;
  std::mutex staging_mu_;
  std::condition_variable staging_cv_;
  std::vector<Staging*> free_staging_;  // guarded by staging_mu_
  std::mutex mu_;
  std::condition_variable cv_;       // workers wait for tasks
  std::condition_variable done_cv_;  // wait() waits for jobs
  std::deque<Task> tasks_;           // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace bunsen::engine
