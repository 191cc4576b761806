// Timeouts and shutdown over real sockets: idle keep-alive and slow-header timeouts close connections,
// stop() ends open streams (on_disconnect fires) and joins, lets a pending full answer finish within the
// grace period, force-closes one that does not, refuses new connections afterwards; handles outliving
// the server are harmless; install_signal_stop turns SIGTERM into a graceful stop.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <thread>

#include "http_test_client.h"
#include "server/http/server.h"

namespace bunsen::server::http {
namespace {

using testing::TestClient;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

ServerOptions test_options() {
  ServerOptions o;
  o.io_threads = 2;
  o.header_timeout = milliseconds(2000);
  o.idle_timeout = milliseconds(2000);
  o.shutdown_grace = milliseconds(1000);
  return o;
}

template <typename F>
bool eventually(F cond, int ms) {
  auto deadline = Clock::now() + milliseconds(ms);
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return cond();
}

TEST(HttpLifecycle, IdleKeepAliveConnectionIsClosed) {
  ServerOptions o = test_options();
  o.idle_timeout = milliseconds(200);
  Server server(o);
  server.router().add("GET", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/x"));
  ASSERT_TRUE(c.read_response().has_value());
  auto t0 = Clock::now();
  EXPECT_TRUE(c.wait_closed(2000));
  EXPECT_GE(Clock::now() - t0, milliseconds(150));
  EXPECT_TRUE(eventually([&] { return server.connection_count() == 0; }, 1000));
}

TEST(HttpLifecycle, SlowHeaderIsCutOff) {
  ServerOptions o = test_options();
  o.header_timeout = milliseconds(200);
  Server server(o);
  server.router().add("GET", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  TestClient silent(server.port());  // never sends a byte
  TestClient slow(server.port());
  ASSERT_TRUE(slow.send_raw("GET /x HTTP/1.1\r\nHost: h\r\n"));  // head never finishes
  EXPECT_TRUE(silent.wait_closed(2000));
  auto r = slow.read_response();  // a request that began gets a 408 before the close
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(slow.wait_closed(2000));
  auto ok = testing::fetch(server.port(), "GET", "/x");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpLifecycle, ChunkedBodyWithoutTerminatorTimesOutWith408) {
  ServerOptions o = test_options();
  o.read_timeout = milliseconds(200);
  Server server(o);
  server.router().add("POST", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_raw("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"));
  auto t0 = Clock::now();
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  EXPECT_GE(Clock::now() - t0, milliseconds(150));
  EXPECT_TRUE(c.wait_closed(2000));
}

TEST(HttpLifecycle, StopEndsOpenStreamsAndJoins) {
  Server server(test_options());
  std::mutex mu;
  std::vector<SseStream> streams;
  std::atomic<int> disconnects{0};
  server.router().add("GET", "/held", [&](Request&, Responder res) {
    SseStream s = res.start_sse();
    s.on_disconnect([&] { disconnects++; });
    s.send("", "first");
    std::lock_guard lock(mu);
    streams.push_back(s);
  });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/held"));
  ASSERT_TRUE(c.read_head().has_value());
  ASSERT_EQ(c.read_sse(1).size(), 1u);
  ASSERT_TRUE(eventually([&] { std::lock_guard l(mu); return streams.size() == 1; }, 2000));
  auto t0 = Clock::now();
  std::thread stopper([&] { server.stop(); });
  bool ended = false;
  c.read_sse(10, &ended);  // the stream is ended properly (terminating chunk) ...
  EXPECT_TRUE(ended);
  EXPECT_TRUE(c.wait_closed(2000));  // ... and the connection closed
  c.close();
  stopper.join();
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));
  EXPECT_EQ(disconnects.load(), 1);
  EXPECT_FALSE(streams[0].is_open());
  EXPECT_FALSE(streams[0].send("", "after stop"));
  TestClient refused(server.port());
  EXPECT_FALSE(refused.connected() && refused.send_request("GET", "/held") && refused.read_head());
}

TEST(HttpLifecycle, StopLetsAPendingAnswerFinish) {
  Server server(test_options());
  std::thread worker;
  std::atomic<bool> received{false};
  server.router().add("POST", "/slow", [&](Request&, Responder res) {
    received = true;
    worker = std::thread([res]() mutable {
      std::this_thread::sleep_for(milliseconds(300));
      res.send(Response::text(200, "finished"));
    });
  });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("POST", "/slow", {}, "{}"));
  ASSERT_TRUE(eventually([&] { return received.load(); }, 2000));
  std::thread stopper([&] { server.stop(); });
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "finished");
  EXPECT_EQ(r->headers.get("Connection"), "close");
  c.close();
  stopper.join();
  worker.join();
}

TEST(HttpLifecycle, StopForceClosesAnAnswerPastTheGracePeriod) {
  ServerOptions o = test_options();
  o.shutdown_grace = milliseconds(300);
  Server server(o);
  std::mutex mu;
  std::vector<Responder> held;
  std::atomic<int> disconnects{0};
  server.router().add("POST", "/never", [&](Request&, Responder res) {
    res.on_disconnect([&] { disconnects++; });
    std::lock_guard lock(mu);
    held.push_back(res);
  });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("POST", "/never", {}, "{}"));
  ASSERT_TRUE(eventually([&] { std::lock_guard l(mu); return held.size() == 1; }, 2000));
  auto t0 = Clock::now();
  server.stop();
  EXPECT_LT(Clock::now() - t0, milliseconds(2500));
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  EXPECT_EQ(disconnects.load(), 1);
  EXPECT_TRUE(c.wait_closed(1000));
  EXPECT_FALSE(held[0].send(Response::text(200, "late")));  // harmless after stop
}

TEST(HttpLifecycle, HandlesOutlivingTheServerAreHarmless) {
  SseStream kept;
  {
    Server server(test_options());
    std::mutex mu;
    server.router().add("GET", "/s", [&](Request&, Responder res) {
      std::lock_guard lock(mu);
      kept = res.start_sse();
    });
    server.start();
    TestClient c(server.port());
    ASSERT_TRUE(c.send_request("GET", "/s"));
    ASSERT_TRUE(c.read_head().has_value());
    ASSERT_TRUE(eventually([&] { std::lock_guard l(mu); return kept.is_open(); }, 2000));
  }  // ~Server stops while the stream handle is still held
  EXPECT_FALSE(kept.is_open());
  EXPECT_FALSE(kept.send("", "x"));
  kept.close();
  kept = SseStream();  // the last reference goes away after the server (must not crash)
  EXPECT_FALSE(kept.is_open());
}

TEST(HttpLifecycle, SigtermStopsThroughWait) {
  Server server(test_options());
  server.router().add("GET", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  install_signal_stop(server);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    server.wait();
    done = true;
  });
  auto r = testing::fetch(server.port(), "GET", "/x");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(done.load());
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_TRUE(eventually([&] { return done.load(); }, 3000));
  waiter.join();
}

TEST(HttpLifecycle, StopIsIdempotentAndWorksBeforeStart) {
  Server unstarted(test_options());
  unstarted.stop();
  Server server(test_options());
  server.router().add("GET", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  uint16_t port = server.port();
  ASSERT_TRUE(testing::fetch(port, "GET", "/x").has_value());
  server.stop();
  server.stop();
  EXPECT_FALSE(testing::fetch(port, "GET", "/x").has_value());  // no longer listening
  EXPECT_EQ(server.connection_count(), 0u);
}

}  // namespace
}  // namespace bunsen::server::http
