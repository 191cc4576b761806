// SSE and disconnect tests over real sockets: exact framing and order, heartbeats, keep-alive after a
// stream, writes from other threads, on_disconnect for a client that leaves (streaming or waiting for a
// full answer) or stops reading (small SO_RCVBUF), and 200 concurrent streams.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "http_test_client.h"
#include "server/http/server.h"

namespace bunsen::server::http {
namespace {

using testing::SseEvent;
using testing::TestClient;
using Clock = std::chrono::steady_clock;

ServerOptions test_options() {
  ServerOptions o;
  o.io_threads = 2;
  o.header_timeout = std::chrono::milliseconds(2000);
  o.idle_timeout = std::chrono::milliseconds(2000);
  o.shutdown_grace = std::chrono::milliseconds(500);
  return o;
}

// Polls `cond` until true or `ms` elapse.
template <typename F>
bool eventually(F cond, int ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// Keeps the handles a handler hands over, so the test thread can drive them.
struct Held {
  std::mutex mu;
  std::vector<SseStream> streams;
  std::vector<Responder> responders;
  std::atomic<int> disconnects{0};
  size_t size() {
    std::lock_guard lock(mu);
    return streams.size() + responders.size();
  }
};

void add_fixed_stream(Server& server) {
  server.router().add("GET", "/fixed", [](Request&, Responder res) {
    SseStream s = res.start_sse();
    EXPECT_TRUE(s.send("", "one"));
    EXPECT_TRUE(s.send("delta", "two\nlines"));
    EXPECT_TRUE(s.comment("ping"));
    EXPECT_TRUE(s.send("", "three"));
    s.close();
    EXPECT_FALSE(s.send("", "after close"));
  });
}

TEST(HttpStream, ExactFramingOfEventsAndComments) {
  Server server(test_options());
  add_fixed_stream(server);
  server.start();
  auto r = testing::fetch(server.port(), "GET", "/fixed");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers.get("Content-Type"), "text/event-stream");
  EXPECT_EQ(r->headers.get("Cache-Control"), "no-cache");
  EXPECT_EQ(r->headers.get("Transfer-Encoding"), "chunked");
  EXPECT_EQ(r->body, "data: one\n\nevent: delta\ndata: two\ndata: lines\n\n: ping\n\ndata: three\n\n");
}

TEST(HttpStream, EventsParseInOrderAndConnectionIsReusedAfterwards) {
  Server server(test_options());
  add_fixed_stream(server);
  server.router().add("GET", "/after", [](Request&) { return Response::text(200, "after"); });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/fixed"));
  auto head = c.read_head();
  ASSERT_TRUE(head.has_value());
  bool ended = false;
  std::vector<SseEvent> ev = c.read_sse(10, &ended);
  EXPECT_TRUE(ended);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].event, "");
  EXPECT_EQ(ev[0].data, "one");
  EXPECT_EQ(ev[1].event, "delta");
  EXPECT_EQ(ev[1].data, "two\nlines");
  EXPECT_EQ(ev[2].comment, "ping");
  EXPECT_EQ(ev[2].data, "");
  EXPECT_EQ(ev[3].data, "three");
  ASSERT_TRUE(c.send_request("GET", "/after"));
  auto after = c.read_response();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->body, "after");
}

TEST(HttpStream, WritesFromAnotherThreadArriveInOrder) {
  Server server(test_options());
  std::vector<std::thread> producers;
  std::mutex mu;
  server.router().add("GET", "/count", [&](Request&, Responder res) {
    SseStream s = res.start_sse();
    std::lock_guard lock(mu);
    producers.emplace_back([s]() mutable {
      for (int i = 0; i < 100; ++i) {
        if (i % 10 == 0) s.comment("heartbeat");
        s.send("n", std::to_string(i));
      }
      s.close();
    });
  });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/count"));
  ASSERT_TRUE(c.read_head().has_value());
  bool ended = false;
  std::vector<SseEvent> ev = c.read_sse(1000, &ended);
  EXPECT_TRUE(ended);
  ASSERT_EQ(ev.size(), 110u);
  int next = 0;
  int heartbeats = 0;
  for (const SseEvent& e : ev) {
    if (!e.comment.empty()) {
      EXPECT_EQ(e.comment, "heartbeat");
      ++heartbeats;
      continue;
    }
    EXPECT_EQ(e.event, "n");
    EXPECT_EQ(e.data, std::to_string(next++));
  }
  EXPECT_EQ(next, 100);
  EXPECT_EQ(heartbeats, 10);
  for (auto& t : producers) t.join();
}

void add_held_stream(Server& server, Held& held) {
  server.router().add("GET", "/held", [&held](Request&, Responder res) {
    SseStream s = res.start_sse();
    s.on_disconnect([&held] { held.disconnects++; });
    s.send("", "hello");
    std::lock_guard lock(held.mu);
    held.streams.push_back(s);
  });
}

TEST(HttpStream, ClientLeavingAnIdleStreamFiresOnDisconnect) {
  Server server(test_options());
  Held held;
  add_held_stream(server, held);
  server.start();
  {
    TestClient c(server.port());
    ASSERT_TRUE(c.send_request("GET", "/held"));
    ASSERT_TRUE(c.read_head().has_value());
    ASSERT_EQ(c.read_sse(1).size(), 1u);
    ASSERT_TRUE(eventually([&] { return held.size() == 1; }, 2000));
    EXPECT_TRUE(held.streams.at(0).is_open());
  }  // closes while the stream is open and silent (a long prefill)
  auto t0 = Clock::now();
  ASSERT_TRUE(eventually([&] { return held.disconnects.load() == 1; }, 2000));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2000));
  SseStream& s = held.streams.at(0);
  EXPECT_FALSE(s.is_open());
  EXPECT_FALSE(s.send("", "nobody listens"));
  bool late = false;  // the callback already ran: a second registration does not fire again
  s.on_disconnect([&] { late = true; });
  EXPECT_FALSE(late);
  EXPECT_EQ(held.disconnects.load(), 1);
}

TEST(HttpStream, ClientLeavingWhileAFullAnswerIsPendingFiresOnDisconnect) {
  Server server(test_options());
  Held held;
  server.router().add("POST", "/slow", [&held](Request&, Responder res) {
    res.on_disconnect([&held] { held.disconnects++; });
    std::lock_guard lock(held.mu);
    held.responders.push_back(res);
  });
  server.start();
  {
    TestClient c(server.port());
    ASSERT_TRUE(c.send_request("POST", "/slow", {}, "{}"));
    ASSERT_TRUE(eventually([&] { return held.size() == 1; }, 2000));
  }
  ASSERT_TRUE(eventually([&] { return held.disconnects.load() == 1; }, 2000));
  EXPECT_FALSE(held.responders.at(0).is_open());
  EXPECT_FALSE(held.responders.at(0).send(Response::text(200, "too late")));
}

TEST(HttpStream, RegisteringAfterTheClientLeftFiresAtOnce) {
  Server server(test_options());
  Held held;
  server.router().add("GET", "/quiet", [&held](Request&, Responder res) {
    std::lock_guard lock(held.mu);
    held.responders.push_back(res);
  });
  server.start();
  {
    TestClient c(server.port());
    ASSERT_TRUE(c.send_request("GET", "/quiet"));
    ASSERT_TRUE(eventually([&] { return held.size() == 1; }, 2000));
  }
  Responder res = held.responders.at(0);
  ASSERT_TRUE(eventually([&] { return !res.is_open(); }, 2000));
  bool fired = false;
  res.on_disconnect([&] { fired = true; });
  EXPECT_TRUE(fired);
}

TEST(HttpStream, ClientThatStopsReadingIsDropped) {
  ServerOptions o = test_options();
  o.max_write_queue_bytes = 64 * 1024;
  o.write_timeout = std::chrono::milliseconds(500);
  Server server(o);
  Held held;
  add_held_stream(server, held);
  server.start();
  TestClient c(server.port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(c.send_request("GET", "/held"));
  ASSERT_TRUE(eventually([&] { return held.size() == 1; }, 2000));
  SseStream s = held.streams.at(0);
  std::string payload(8 * 1024, 'p');
  bool refused = false;
  int sent = 0;
  auto deadline = Clock::now() + std::chrono::seconds(4);
  while (Clock::now() < deadline) {  // the client never reads
    if (!s.send("", payload)) {
      refused = true;
      break;
    }
    ++sent;
    if (sent % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(refused) << "sent " << sent << " events without back-pressure";
  EXPECT_TRUE(eventually([&] { return held.disconnects.load() == 1; }, 2000));
  EXPECT_FALSE(s.is_open());
}

TEST(HttpStream, WriteTimeoutDropsAClientThatStopsReading) {
  ServerOptions o = test_options();
  o.max_write_queue_bytes = 1u << 30;  // only the write timeout can notice
  o.write_timeout = std::chrono::milliseconds(300);
  Server server(o);
  Held held;
  add_held_stream(server, held);
  server.start();
  TestClient c(server.port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(c.send_request("GET", "/held"));
  ASSERT_TRUE(eventually([&] { return held.size() == 1; }, 2000));
  SseStream s = held.streams.at(0);
  std::string payload(64 * 1024, 'p');
  auto t0 = Clock::now();
  while (held.disconnects.load() == 0 && Clock::now() - t0 < std::chrono::seconds(4)) {
    s.send("", payload);  // a steady producer: the queue grows, the socket stays blocked
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(held.disconnects.load(), 1);
  EXPECT_FALSE(s.is_open());
  EXPECT_FALSE(s.send("", "x"));
}

TEST(HttpStream, Http10ClientGetsACloseDelimitedStream) {
  Server server(test_options());
  add_fixed_stream(server);
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_raw("GET /fixed HTTP/1.0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->headers.has("Transfer-Encoding"));
  EXPECT_EQ(r->headers.get("Connection"), "close");
  EXPECT_EQ(r->body, "data: one\n\nevent: delta\ndata: two\ndata: lines\n\n: ping\n\ndata: three\n\n");
}

TEST(HttpStream, TwoHundredConcurrentStreamsEachGetTheirEvents) {
  constexpr int kStreams = 200;
  constexpr int kEvents = 5;
  Server server(test_options());
  std::mutex mu;
  std::map<std::string, SseStream> streams;
  server.router().add("GET", "/s", [&](Request& r, Responder res) {
    SseStream s = res.start_sse();
    std::lock_guard lock(mu);
    streams[r.query["id"]] = s;
  });
  server.start();
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<TestClient>(server.port()));
    ASSERT_TRUE(clients.back()->send_request("GET", "/s?id=" + std::to_string(i)));
  }
  ASSERT_TRUE(eventually([&] { std::lock_guard l(mu); return streams.size() == kStreams; }, 4000));
  std::thread producer([&] {  // all streams open at once, written round-robin from one thread
    for (int e = 0; e < kEvents; ++e) {
      for (auto& [id, s] : streams) EXPECT_TRUE(s.send("tick", id + ":" + std::to_string(e)));
    }
    for (auto& [id, s] : streams) s.close();
  });
  int complete = 0;
  for (int i = 0; i < kStreams; ++i) {
    TestClient& c = *clients[i];
    ASSERT_TRUE(c.read_head().has_value());
    bool ended = false;
    std::vector<SseEvent> ev = c.read_sse(kEvents + 1, &ended);
    bool ok = ended && ev.size() == kEvents;
    for (int e = 0; ok && e < kEvents; ++e) {
      ok = ev[e].event == "tick" && ev[e].data == std::to_string(i) + ":" + std::to_string(e);
    }
    complete += ok;
  }
  producer.join();
  EXPECT_EQ(complete, kStreams);
}

}  // namespace
}  // namespace bunsen::server::http
