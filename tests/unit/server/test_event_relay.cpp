// EventRelay: tasks run in posting order on one thread that is not the poster's, close() runs what is
// queued before it returns, and later posts are dropped (counted), never run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "server/api/event_relay.h"

namespace bunsen::server {
namespace {

TEST(EventRelay, RunsTasksInOrderOnItsOwnThread) {
  EventRelay relay;
  std::mutex mu;
  std::vector<int> seen;
  std::vector<std::thread::id> threads;
  // Two posters interleave; each one's tasks must keep their order, and all run on one other thread.
  auto poster = [&](int base) {
    for (int i = 0; i < 500; ++i)
      relay.post([&, v = base + i] {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(v);
        threads.push_back(std::this_thread::get_id());
      });
  };
  std::thread a(poster, 0), b(poster, 10000);
  a.join();
  b.join();
  relay.close();  // runs everything still queued
  ASSERT_EQ(seen.size(), 1000u);
  int last_a = -1, last_b = 9999;
  for (int v : seen) {
    int& last = v < 10000 ? last_a : last_b;
    EXPECT_EQ(v, last + 1);
    last = v;
  }
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads[0]);
    EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_NE(id, a.get_id());
  }
  EXPECT_EQ(relay.dropped(), 0);
}

TEST(EventRelay, CloseRunsWhatIsQueuedThenDropsLaterPosts) {
  EventRelay relay;
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  relay.post([&] {  // holds the thread while more tasks queue behind it
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  });
  for (int i = 0; i < 20; ++i) relay.post([&] { ++ran; });
  std::thread closer([&] { relay.close(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release = true;
  closer.join();
  EXPECT_EQ(ran.load(), 21);
  relay.post([&] { ++ran; });
  relay.close();  // idempotent
  EXPECT_EQ(ran.load(), 21);
  EXPECT_EQ(relay.dropped(), 1);
}

TEST(EventRelay, ATaskThatThrowsDoesNotStopTheOthers) {
  EventRelay relay;
  std::atomic<int> ran{0};
  relay.post([] { throw std::runtime_error("sink failed"); });
  relay.post([&] { ++ran; });
  relay.close();
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace bunsen::server
