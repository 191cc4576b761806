// The serving benchmark's pure pieces: response-head parsing, the chunked decoder and SSE parser under
// every split of their input, URL parsing, the per-chunk byte scan, and percentiles against hand values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/http_client.h"
#include "bench/http_wire.h"
#include "bench/serve_bench.h"
#include "core/status.h"

namespace bunsen::bench {
namespace {

std::string decode_chunked(const std::string& wire, size_t split, size_t* consumed = nullptr, bool* done = nullptr) {
  std::string out;
  ChunkedDecoder d([&](std::string_view p) { out.append(p); });
  size_t used = d.feed(std::string_view(wire).substr(0, split));
  if (!d.done()) used += d.feed(std::string_view(wire).substr(split));
  if (consumed) *consumed = used;
  if (done) *done = d.done();
  return out;
}

TEST(HttpWire, ResponseHead) {
  const HttpResponseHead h =
      parse_response_head("HTTP/1.1 404 Not Found\r\nContent-Length: 12\r\nX-Thing:  a b \r\ntransfer-encoding: gzip, chunked");
  EXPECT_EQ(h.status, 404);
  EXPECT_EQ(h.reason, "Not Found");
  EXPECT_EQ(h.content_length(), 12);
  EXPECT_EQ(h.headers.at("x-thing"), "a b");
  EXPECT_TRUE(h.chunked());
  EXPECT_EQ(parse_response_head("HTTP/1.0 200 OK\n").content_length(), -1);
  EXPECT_FALSE(parse_response_head("HTTP/1.0 200 OK\n").chunked());
  EXPECT_THROW(parse_response_head("ICY 200 OK\r\n"), Error);
  EXPECT_THROW(parse_response_head("HTTP/1.1 2x0 OK\r\n"), Error);
  EXPECT_THROW(parse_response_head("HTTP/1.1 200 OK\r\nno colon here"), Error);
}

TEST(HttpWire, ChunkedAnySplit) {
  const std::string wire = "5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nLEFTOVER";
  const std::string want = "hello 0123456789";
  for (size_t split = 0; split <= wire.size(); ++split) {
    size_t used = 0;
    bool done = false;
    EXPECT_EQ(decode_chunked(wire, split, &used, &done), want) << "split " << split;
    EXPECT_TRUE(done);
    EXPECT_EQ(used, wire.size() - 8) << "split " << split;  // "LEFTOVER" is not consumed
  }
}

TEST(HttpWire, ChunkedBytewiseAndErrors) {
  const std::string wire = "3\r\nabc\r\n0\r\n\r\n";
  std::string out;
  ChunkedDecoder d([&](std::string_view p) { out.append(p); });
  for (char c : wire) d.feed(std::string_view(&c, 1));
  EXPECT_TRUE(d.done());
  EXPECT_EQ(out, "abc");
  EXPECT_THROW(decode_chunked("zz\r\nab\r\n", 3), Error);        // not hex
  EXPECT_THROW(decode_chunked("2\r\nabXY0\r\n\r\n", 5), Error);  // data longer than its size
  bool done = true;
  decode_chunked("4\r\nab", 2, nullptr, &done);  // cut short: not done, no throw
  EXPECT_FALSE(done);
}

TEST(HttpWire, SseEventsAnySplit) {
  const std::string wire =
      ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata:  lines\n\nid: 3\n\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "two\n lines", "[DONE]"};
  for (size_t split = 0; split <= wire.size(); ++split) {
    std::vector<std::string> got;
    SseParser p([&](std::string_view d) { got.emplace_back(d); });
    p.feed(std::string_view(wire).substr(0, split));
    p.feed(std::string_view(wire).substr(split));
    EXPECT_EQ(got, want) << "split " << split;
  }
}

TEST(HttpWire, SseEventWithoutBlankLineIsNotDispatched) {
  std::vector<std::string> got;
  SseParser p([&](std::string_view d) { got.emplace_back(d); });
  p.feed("data: a\n\ndata: unfinished\n");
  EXPECT_EQ(got, std::vector<std::string>{"a"});
}

TEST(HttpWire, ParseUrl) {
  HttpTarget t = parse_http_url("http://127.0.0.1:8080");
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 8080);
  EXPECT_EQ(t.base_path, "");
  t = parse_http_url("http://example.com/api/");
  EXPECT_EQ(t.host, "example.com");
  EXPECT_EQ(t.port, 80);
  EXPECT_EQ(t.base_path, "/api");
  t = parse_http_url("localhost:9");
  EXPECT_EQ(t.host, "localhost");
  EXPECT_EQ(t.port, 9);
  t = parse_http_url("http://[::1]:81/x");
  EXPECT_EQ(t.host, "::1");
  EXPECT_EQ(t.port, 81);
  EXPECT_EQ(t.host_header(), "[::1]:81");
  EXPECT_THROW(parse_http_url("https://a:1"), Error);
  EXPECT_THROW(parse_http_url("http://a:0"), Error);
  EXPECT_THROW(parse_http_url("http://a:99999"), Error);
  EXPECT_THROW(parse_http_url("http://:80"), Error);
}

TEST(ServeBenchScan, CompletionChunks) {
  ChunkScan c = scan_completion_chunk(R"({"id":"c","choices":[{"index":0,"text":"he\"llo","finish_reason":null}],"usage":null})");
  EXPECT_FALSE(c.done);
  EXPECT_FALSE(c.error);
  EXPECT_EQ(c.text_len, 7);  // raw (escaped) length: h e \ " l l o
  EXPECT_EQ(c.completion_tokens, -1);
  c = scan_completion_chunk(R"({"choices": [{"text": "", "finish_reason": "length"}]})");
  EXPECT_EQ(c.text_len, 0);
  c = scan_completion_chunk(R"({"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}})");
  EXPECT_EQ(c.text_len, -1);
  EXPECT_EQ(c.prompt_tokens, 12);
  EXPECT_EQ(c.completion_tokens, 7);
  EXPECT_TRUE(scan_completion_chunk(" [DONE] ").done);
  EXPECT_TRUE(scan_completion_chunk(R"({"error":{"message":"boom","type":"server_error"}})").error);
  EXPECT_FALSE(scan_completion_chunk(R"({"choices":[{"text":"\"error\": x"}]})").error);
}

TEST(ServeBenchStats, PercentilesAgainstHandValues) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);  // rank 2.7
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  const LatencyStats s = summarize({10, 0, 30, 20});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 15);
  EXPECT_DOUBLE_EQ(s.p50, 15);
  EXPECT_DOUBLE_EQ(s.max, 30);
}

TEST(ServeBenchStats, AggregateCountsOnlyCompletedRequests) {
  RequestTrace ok;
  ok.ok = true;
  ok.ttft_ms = 5;
  ok.e2e_ms = 50;
  ok.completion_tokens = 10;
  ok.prompt_tokens = 100;
  ok.gaps_ms = {4, 6};
  RequestTrace bad;
  bad.error = "HTTP 503: busy";
  bad.completion_tokens = 99;
  const ServeBenchResult r = aggregate({ok, bad, ok}, 2.0);
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.errors, std::vector<std::string>{"HTTP 503: busy"});
  EXPECT_EQ(r.output_tokens, 20);
  EXPECT_DOUBLE_EQ(r.output_tok_s, 10);
  EXPECT_DOUBLE_EQ(r.total_tok_s, 110);
  EXPECT_DOUBLE_EQ(r.request_s, 1);
  EXPECT_EQ(r.itl_ms.count, 4u);
  EXPECT_DOUBLE_EQ(r.itl_ms.p50, 5);
}

}  // namespace
}  // namespace bunsen::bench
