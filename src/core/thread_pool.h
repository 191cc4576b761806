// A fixed pool of worker threads for data-parallel CPU kernels: parallel_for over [0, n) in chunks.
// Not a task queue for independent jobs. Invariants: parallel_for is called from one thread at a time
// (the engine's loop thread) and returns only when every chunk is done; workers spin briefly before
// sleeping so back-to-back kernel launches in the decode loop do not pay a futex wake each time; no heap
// allocation per call.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace bunsen {

class ThreadPool {
 public:
  // n_threads <= 0: hardware concurrency. The calling thread counts as one worker.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); chunks are at least `grain` long.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    run(n, grain, &invoke<std::remove_reference_t<F>>, static_cast<void*>(&fn));
  }

  // The process-wide pool used by the CPU backend (created on first use; BUNSEN_THREADS overrides).
  static ThreadPool& global();

 private:
  using Thunk = void (*)(void*, int64_t, int64_t);
  template <typename F>
  static void invoke(void* f, int64_t b, int64_t e) { (*static_cast<F*>(f))(b, e); }

  void run(int64_t n, int64_t grain, Thunk thunk, void* ctx);
  void worker_loop(int id);
  void work(Thunk thunk, void* ctx);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stop_{false};
  // Current job (valid while pending_ > 0).
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
};

}  // namespace bunsen
