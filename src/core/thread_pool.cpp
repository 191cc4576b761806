// ThreadPool: generation counter + atomic chunk cursor. Workers spin ~kSpinIters polls on the generation
// before blocking on the condition variable.
#include "core/thread_pool.h"

#include <immintrin.h>

#include "core/env.h"

namespace bunsen {
namespace {
constexpr int kSpinIters = 20000;
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(env_int("BUNSEN_THREADS", 0));
  return pool;
}

void ThreadPool::work(Thunk thunk, void* ctx) {
  for (;;) {
    int64_t b = next_.fetch_add(chunk_);
    if (b >= n_) break;
    int64_t e = b + chunk_ < n_ ? b + chunk_ : n_;
    thunk(ctx, b, e);
  }
}

void ThreadPool::run(int64_t n, int64_t grain, Thunk thunk, void* ctx) {
  // About 4 chunks per thread for balance, never below grain.
  int64_t chunk = (n + n_threads_ * 4 - 1) / (n_threads_ * 4);
  if (chunk < grain) chunk = grain;
  thunk_ = thunk;
  ctx_ = ctx;
  n_ = n;
  chunk_ = chunk;
  next_.store(0);
  pending_.store(n_threads_ - 1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  work(thunk, ctx);
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
}

void ThreadPool::worker_loop(int) {
  // Generation 0 is the one at construction; loading it here instead would race with a parallel_for
  // issued before this thread starts (the worker would skip that job and run() would wait forever).
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIters) {
      _mm_pause();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    work(thunk_, ctx_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace bunsen
