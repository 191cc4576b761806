// RestorePool (restore_pool.h): prepare on one worker, pieces and checks on all of them, completion on the
// worker that finishes the job's last task (it records an event after the job's copies and waits for it, so
// the engine thread only ever reads a flag).
#include "engine/restore_pool.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "kv/ssd_format.h"

namespace bunsen::engine {

// ---- RestoreJob ----

std::string RestoreJob::error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

double RestoreJob::seconds() const {
  return done() ? std::chrono::duration<double>(t_done_ - t_submit_).count() : 0.0;
}

void RestoreJob::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!failed_.exchange(true)) error_ = why;
}

// ---- RestorePool ----

RestorePool::RestorePool(RestorePoolOptions options) : opts_(std::move(options)) {
  check(opts_.piece_bytes > 0, "engine", "RestorePool: piece_bytes must be > 0");
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n = opts_.threads > 0 ? opts_.threads : std::min(8, hw);
  cuda_ = opts_.device.is_cuda();
  if (cuda_) {
    copy_stream_ = kernels::DeviceStream::create(opts_.device);
    const int n_buf = opts_.staging_buffers > 0 ? opts_.staging_buffers : std::clamp(n, 4, 8);
    staging_.resize(static_cast<size_t>(n_buf));
    for (Staging& s : staging_) {
      s.memory = kernels::DeviceMemory::pinned_host(opts_.piece_bytes);
      s.event = kernels::DeviceEvent::create(opts_.device);
      free_staging_.push_back(&s);
    }
  }
  workers_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { run(); });
}

RestorePool::~RestorePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  for (Staging& s : staging_) {  // nothing may still read a buffer when it is freed
    try {
      s.event.synchronize();
    } catch (const std::exception& e) {
      log::warn("engine", strfmt("restore pool: staging buffer wait failed at shutdown: %s", e.what()));
    }
  }
}

std::shared_ptr<RestoreJob> RestorePool::submit(std::function<std::optional<RestorePlan>(std::string& why)> prepare,
                                                kernels::DeviceEvent after, std::function<void()> on_done) {
  auto job = std::make_shared<RestoreJob>();
  job->prepare_ = std::move(prepare);
  job->after_ = std::move(after);
  job->on_done_ = std::move(on_done);
  job->t_submit_ = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    check(!stopping_, "engine", "RestorePool: submit after shutdown");
    tasks_.push_back(Task{job, -1});
  }
  cv_.notify_one();
  return job;
}

void RestorePool::wait(const RestoreJob& job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return job.settled_; });
}

void RestorePool::run() {
  kernels::Context ctx;
  try {
    kernels::set_current_device(opts_.device);  // the current CUDA device is per thread
    ctx.cuda_stream = copy_stream_.handle();
  } catch (const std::exception& e) {
    log::warn("engine", strfmt("restore worker: %s", e.what()));  // its copies then fail with the cause
  }
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and every queued task has run
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    run_task(t, ctx);
  }
}

void RestorePool::run_task(const Task& t, kernels::Context& ctx) {
  if (t.index < 0) return prepare(t.job, ctx);
  RestoreJob& j = *t.job;
  const auto i = static_cast<size_t>(t.index);
  try {
    if (!j.cancelled() && !j.failed_.load()) {
      if (i < j.pieces_.size()) copy_piece(j, j.pieces_[i], ctx);
      else verify(j, j.plan_.checks[i - j.pieces_.size()]);
    }
  } catch (const std::exception& e) {
    j.fail(e.what());
  }
  task_done(j, ctx);
}

void RestorePool::prepare(const std::shared_ptr<RestoreJob>& job, kernels::Context& ctx) {
  RestoreJob& j = *job;
  try {
    if (opts_.job_hook) opts_.job_hook();
    std::string why;
    std::optional<RestorePlan> plan;
    if (j.cancelled()) why = "cancelled";
    else plan = j.prepare_(why);
    if (!plan) {
      j.fail(why.empty() ? "the restore could not be prepared" : why);
    } else {
      j.plan_ = std::move(*plan);
      size_t fill = opts_.piece_bytes;  // bytes in the last piece (full: start a new one)
      for (const RestoreCopy& c : j.plan_.copies) {
        for (size_t off = 0; off < c.bytes;) {
          if (fill == opts_.piece_bytes) {
            j.pieces_.emplace_back();
            fill = 0;
          }
          const size_t n = std::min(c.bytes - off, opts_.piece_bytes - fill);
          j.pieces_.back().push_back(
              {static_cast<std::byte*>(c.dst) + off, static_cast<const std::byte*>(c.src) + off, n});
          off += n;
          fill += n;
        }
      }
      // The copies must not overtake what was queued on the engine's stream for these blocks (the RAM
      // tier's copies out of evicted blocks): the copy stream waits for it.
      if (!j.pieces_.empty()) j.after_.wait_on(ctx);
    }
  } catch (const std::exception& e) {
    j.fail(e.what());
  }
  j.prepare_ = nullptr;  // drops what it captured
  const int64_t n = j.failed_.load() ? 0 : static_cast<int64_t>(j.pieces_.size() + j.plan_.checks.size());
  if (n == 0) {
    j.remaining_.store(1);
    return task_done(j, ctx);
  }
  j.remaining_.store(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 0; i < n; ++i) tasks_.push_back(Task{job, i});
  }
  cv_.notify_all();
}

RestorePool::Staging* RestorePool::take_staging() {
  std::unique_lock<std::mutex> lock(staging_mu_);
  staging_cv_.wait(lock, [&] { return !free_staging_.empty(); });
  Staging* s = free_staging_.back();
  free_staging_.pop_back();
  return s;
}

void RestorePool::give_staging(Staging* s) {
  {
    std::lock_guard<std::mutex> lock(staging_mu_);
    free_staging_.push_back(s);
  }
  staging_cv_.notify_one();
}

void RestorePool::copy_piece(RestoreJob& j, std::span<const RestoreCopy> parts, kernels::Context& ctx) {
  size_t total = 0;
  if (!cuda_) {  // host destinations: straight from the mapping
    for (const RestoreCopy& p : parts) {
      std::memcpy(p.dst, p.src, p.bytes);
      total += p.bytes;
    }
    j.bytes_ += total;
    return;
  }
  Staging* s = take_staging();
  bool issued = false;
  try {
    s->event.synchronize();  // the buffer's last copies have run
    auto* buf = static_cast<std::byte*>(s->memory.data());
    for (const RestoreCopy& p : parts) {  // the page-cache read, in parallel with the other workers'
      std::memcpy(buf + total, p.src, p.bytes);
      total += p.bytes;
    }
    size_t off = 0;
    for (const RestoreCopy& p : parts) {
      issued = true;
      j.issued_any_.store(true);
      kernels::copy_async(ctx, p.dst, buf + off, p.bytes);
      off += p.bytes;
    }
    s->event.record(ctx);
  } catch (...) {
    if (issued) {  // copies may still read the buffer: it goes back only behind an event
      try {
        s->event.record(ctx);
      } catch (...) {
      }
    }
    give_staging(s);
    throw;
  }
  give_staging(s);
  j.bytes_ += total;
}

void RestorePool::verify(RestoreJob& j, const RestoreCheck& c) {
  if (kv::ssd_checksum64(c.bytes) == c.checksum) return;
  const std::string why = strfmt("payload checksum mismatch (%zu bytes)", c.bytes.size());
  j.fail(why);
  if (!j.check_reported_.exchange(true) && j.plan_.on_check_failed) j.plan_.on_check_failed(why);
}

void RestorePool::task_done(RestoreJob& j, kernels::Context& ctx) {
  if (j.remaining_.fetch_sub(1) != 1) return;
  try {  // the job's copies are all enqueued: one event after them, and wait for it here (not on the engine)
    if (cuda_ && j.issued_any_.load()) {
      j.landed_ = kernels::DeviceEvent::create(opts_.device);
      j.landed_.record(ctx);
      j.landed_.synchronize();
    }
  } catch (const std::exception& e) {
    j.fail(e.what());
  }
  j.plan_ = RestorePlan{};  // unmaps the file once nothing reads it
  j.pieces_.clear();
  j.t_done_ = std::chrono::steady_clock::now();
  std::function<void()> on_done = std::move(j.on_done_);
  j.done_.store(true, std::memory_order_release);  // before on_done: the engine it wakes must see done()
  if (on_done) on_done();
  {
    std::lock_guard<std::mutex> lock(mu_);
    j.settled_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace bunsen::engine
