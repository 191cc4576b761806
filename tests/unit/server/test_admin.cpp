// Unit tests of the admin pieces that need no server: the DNS-rebinding guard's Host/Origin rules and the
// Metrics/Histogram rendering (Prometheus text, JSON summary, bucket quantiles).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "server/admin/host_guard.h"
#include "server/api/metrics.h"

namespace bunsen::server {
namespace {

TEST(HostGuard, HostOfStripsPortAndBrackets) {
  EXPECT_EQ(admin::host_of("localhost:8080"), "localhost");
  EXPECT_EQ(admin::host_of("LOCALHOST"), "localhost");
  EXPECT_EQ(admin::host_of("[::1]:80"), "::1");
  EXPECT_EQ(admin::host_of("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(admin::host_of("localhost.:1"), "localhost");
  EXPECT_EQ(admin::host_of("[::1"), "");
}

TEST(HostGuard, LoopbackNames) {
  for (const char* h : {"localhost", "app.localhost", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(admin::is_loopback_name(h)) << h;
  for (const char* h : {"localhost.evil.com", "evil.com", "10.0.0.1", "0.0.0.0", "127.0.0.1.nip.io", "", ".localhost"})
    EXPECT_FALSE(admin::is_loopback_name(h)) << h;
}

TEST(HostGuard, HostAllowed) {
  EXPECT_TRUE(admin::host_allowed("localhost:8080", "127.0.0.1"));
  EXPECT_TRUE(admin::host_allowed("[::1]:8080", "127.0.0.1"));
  EXPECT_FALSE(admin::host_allowed("evil.example:8080", "127.0.0.1"));
  EXPECT_FALSE(admin::host_allowed("", "127.0.0.1"));
  // The bound host itself is fine; IP literals only when bound to every interface.
  EXPECT_TRUE(admin::host_allowed("192.168.1.5:8080", "192.168.1.5"));
  EXPECT_FALSE(admin::host_allowed("192.168.1.6:8080", "192.168.1.5"));
  EXPECT_TRUE(admin::host_allowed("192.168.1.6:8080", "0.0.0.0"));
  EXPECT_FALSE(admin::host_allowed("myhost.lan:8080", "0.0.0.0"));
}

TEST(HostGuard, OriginAllowed) {
  const std::vector<std::string> none;
  EXPECT_TRUE(admin::origin_allowed("http://localhost:5173", none));
  EXPECT_TRUE(admin::origin_allowed("https://127.0.0.1", none));
  EXPECT_TRUE(admin::origin_allowed("http://[::1]:3000", none));
  EXPECT_FALSE(admin::origin_allowed("http://evil.example", none));
  EXPECT_FALSE(admin::origin_allowed("null", none));
  EXPECT_FALSE(admin::origin_allowed("file://", none));
  EXPECT_FALSE(admin::origin_allowed("http://localhost@evil.example", none));
  const std::vector<std::string> listed = {"http://app.example"};
  EXPECT_TRUE(admin::origin_allowed("http://app.example", listed));
  EXPECT_FALSE(admin::origin_allowed("http://app.example:81", listed));
  EXPECT_TRUE(admin::origin_allowed("http://anything.example", {"*"}));
}

TEST(HostGuard, CheckRequest) {
  http::Request r;
  EXPECT_TRUE(admin::check_request(r, "127.0.0.1", {}).allowed) << "no Host/Origin: a non-browser client";
  r.headers.add("Host", "127.0.0.1:8080");
  EXPECT_TRUE(admin::check_request(r, "127.0.0.1", {}).allowed);
  r.headers.add("Origin", "http://evil.example");
  auto v = admin::check_request(r, "127.0.0.1", {});
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.reason.find("evil.example"), std::string::npos);
  http::Request h;
  h.headers.add("Host", "rebind.attacker.example");
  EXPECT_FALSE(admin::check_request(h, "127.0.0.1", {}).allowed);
}

TEST(Metrics, HistogramBucketsAreCumulativeAndQuantilesInterpolated) {
  Histogram h;
  for (int i = 0; i < 90; ++i) h.observe(0.003);  // bucket (0.0025, 0.005]
  for (int i = 0; i < 10; ++i) h.observe(2.0);    // bucket (1, 2.5]
  h.observe(100.0);                               // +Inf
  nlohmann::json s = h.summary();
  EXPECT_EQ(s["count"], 101);
  EXPECT_NEAR(s["sum"].get<double>(), 90 * 0.003 + 20.0 + 100.0, 1e-9);
  EXPECT_GT(s["p50"].get<double>(), 0.0025);
  EXPECT_LE(s["p50"].get<double>(), 0.005);
  EXPECT_GT(s["p99"].get<double>(), 1.0);
  std::string text = h.prometheus("x_seconds", "help");
  EXPECT_NE(text.find("# TYPE x_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.005\"} 90\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"2.5\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 101\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_count 101\n"), std::string::npos);
  // Cumulative: every bucket count is >= the previous one.
  std::regex bucket(R"(x_seconds_bucket\{le="[^"]+"\} (\d+))");
  long prev = -1;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), bucket); it != std::sregex_iterator(); ++it) {
    long n = std::stol((*it)[1]);
    EXPECT_GE(n, prev);
    prev = n;
  }
}

TEST(Metrics, EmptyHistogramSummaryIsZero) {
  Histogram h;
  nlohmann::json s = h.summary();
  EXPECT_EQ(s["count"], 0);
  EXPECT_EQ(s["p50"], 0.0);
}

TEST(Metrics, RequestCountsByRouteAndStatus) {
  Metrics m;
  m.record_request("/v1/chat/completions", 200);
  m.record_request("/v1/chat/completions", 200);
  m.record_request("/v1/chat/completions", 400);
  m.record_request("/odd\"route\\", 500);
  m.add_prompt_tokens(7);
  m.add_generated_tokens(5);
  m.add_cached_tokens(3);
  EXPECT_EQ(m.requests_total(), 4);
  EXPECT_EQ(m.prompt_tokens(), 7);
  EXPECT_EQ(m.generated_tokens(), 5);
  EXPECT_EQ(m.cached_tokens(), 3);
  std::string text = m.prometheus();
  EXPECT_NE(text.find("bunsen_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("bunsen_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("route=\"/odd\\\"route\\\\\""), std::string::npos) << "label values are escaped";
  EXPECT_NE(text.find("bunsen_prompt_tokens_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("bunsen_generation_tokens_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("bunsen_time_to_first_token_seconds_count 0\n"), std::string::npos);
  nlohmann::json j = m.json();
  EXPECT_EQ(j["requests"]["total"], 4);
  EXPECT_EQ(j["requests"]["by_route"]["/v1/chat/completions"]["200"], 2);
  EXPECT_EQ(j["tokens"]["generated"], 5);
  EXPECT_GE(j["uptime_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace bunsen::server
