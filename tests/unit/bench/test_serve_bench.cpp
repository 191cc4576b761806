// run_serve_bench against an in-process fake completions server: request bodies as specified (model id
// from /v1/models, prompt ids in range, stream options), counts and token totals, ordered positive
// percentiles, bounded concurrency, failures counted with their messages, prompts reproducible by seed,
// bearer auth, and tokens from usage when a chunk carries several.
#include <gtest/gtest.h>

#include <set>

#include "bench/serve_bench.h"
#include "core/status.h"
#include "fake_completions_server.h"

namespace bunsen::bench {
namespace {

using test::FakeCompletionsServer;
using test::FakeServerConfig;

ServeBenchOptions options(const FakeCompletionsServer& s, int conc, int reqs) {
  ServeBenchOptions o;
  o.url = s.url();
  o.concurrency = conc;
  o.requests = reqs;
  o.prompt_len = 64;
  o.gen_len = 20;
  o.seed = 1;
  return o;
}

void expect_ordered(const LatencyStats& s, const char* what) {
  EXPECT_GT(s.p50, 0) << what;
  EXPECT_LE(s.p50, s.p90) << what;
  EXPECT_LE(s.p90, s.p99) << what;
  EXPECT_LE(s.p99, s.max) << what;
}

TEST(ServeBench, CountsTokensAndOrderedPercentiles) {
  FakeCompletionsServer server(FakeServerConfig{});
  const ServeBenchResult r = run_serve_bench(options(server, 4, 12));
  EXPECT_EQ(r.requests, 12);
  EXPECT_EQ(r.completed, 12);
  EXPECT_EQ(r.failed, 0);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.model, "fake-model");
  EXPECT_EQ(r.output_tokens, 12 * 20);
  EXPECT_EQ(r.prompt_tokens, 12 * 64);
  EXPECT_GT(r.wall_s, 0);
  EXPECT_NEAR(r.output_tok_s, 240 / r.wall_s, 1e-6);
  EXPECT_NEAR(r.total_tok_s, (240 + 768) / r.wall_s, 1e-6);
  EXPECT_EQ(r.ttft_ms.count, 12u);
  EXPECT_EQ(r.itl_ms.count, 12u * 19);  // gaps between 20 chunks
  expect_ordered(r.ttft_ms, "ttft");
  expect_ordered(r.itl_ms, "itl");
  expect_ordered(r.e2e_ms, "e2e");
  EXPECT_GE(r.e2e_ms.p50, r.ttft_ms.p50);
  EXPECT_GE(r.itl_ms.p50, 0.2);  // the server sleeps 0.3 ms between chunks
  EXPECT_LE(server.max_in_flight.load(), 4);
  EXPECT_GE(server.max_in_flight.load(), 2);

  std::lock_guard<std::mutex> lk(server.mu);
  ASSERT_EQ(server.bodies.size(), 12u);
  for (const nlohmann::json& b : server.bodies) {
    EXPECT_EQ(b.at("model"), "fake-model");
    EXPECT_EQ(b.at("max_tokens"), 20);
    EXPECT_EQ(b.at("stream"), true);
    EXPECT_EQ(b.at("ignore_eos"), true);
    EXPECT_EQ(b.at("temperature"), 0);
    EXPECT_FALSE(b.contains("seed"));  // greedy: no sampling fields
    EXPECT_FALSE(b.contains("top_p"));
    EXPECT_EQ(b.at("stream_options").at("include_usage"), true);
    ASSERT_EQ(b.at("prompt").size(), 64u);
    for (const auto& id : b.at("prompt")) {
      EXPECT_GE(id.get<int64_t>(), 1000);
      EXPECT_LT(id.get<int64_t>(), 5000);  // the server's vocab_size
    }
  }
  const std::string json = r.to_json();
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j.at("completed"), 12);
  EXPECT_EQ(j.at("ttft_ms").at("count"), 12);
  EXPECT_NE(r.to_text().find("inter-token"), std::string::npos);
}

TEST(ServeBench, FailuresAreCountedWithTheirMessages) {
  FakeServerConfig cfg;
  cfg.fail_every = 4;     // completions 3, 7, 11 -> 503
  cfg.drop_every = 5;     // 4, 9 -> connection cut mid-stream
  cfg.no_done_every = 7;  // 6 -> no [DONE]
  FakeCompletionsServer server(cfg);
  const ServeBenchResult r = run_serve_bench(options(server, 3, 12));
  EXPECT_EQ(r.failed, 6);
  EXPECT_EQ(r.completed, 6);
  EXPECT_EQ(r.output_tokens, 6 * 20);
  ASSERT_EQ(r.errors.size(), 5u);  // the first few are kept
  int http503 = 0, cut = 0, no_done = 0;
  for (const std::string& e : r.errors) {
    http503 += e.find("HTTP 503") != std::string::npos && e.find("server busy") != std::string::npos;
    cut += e.find("closed mid-body") != std::string::npos;
    no_done += e.find("[DONE]") != std::string::npos;
  }
  EXPECT_GE(http503, 1);
  EXPECT_GE(cut + no_done, 1);
  EXPECT_EQ(http503 + cut + no_done, 5);
  expect_ordered(r.ttft_ms, "ttft");
}

// Sampled runs: every body carries the temperature, the filters that are on and seed = the request index.
TEST(ServeBench, SampledRequestsCarryTheirSettingsAndSeeds) {
  FakeCompletionsServer server(FakeServerConfig{});
  ServeBenchOptions o = options(server, 2, 5);
  o.temperature = 0.7;
  o.top_p = 0.95;
  o.min_p = 0.05;
  const ServeBenchResult r = run_serve_bench(o);
  EXPECT_EQ(r.completed, 5);
  std::lock_guard<std::mutex> lk(server.mu);
  ASSERT_EQ(server.bodies.size(), 5u);
  std::set<int64_t> seeds;
  for (const nlohmann::json& b : server.bodies) {
    EXPECT_DOUBLE_EQ(b.at("temperature").get<double>(), 0.7);
    EXPECT_DOUBLE_EQ(b.at("top_p").get<double>(), 0.95);
    EXPECT_DOUBLE_EQ(b.at("min_p").get<double>(), 0.05);
    EXPECT_FALSE(b.contains("top_k"));  // off
    seeds.insert(b.at("seed").get<int64_t>());
  }
  EXPECT_EQ(seeds, (std::set<int64_t>{0, 1, 2, 3, 4}));
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  EXPECT_DOUBLE_EQ(j.at("sampling").at("top_p").get<double>(), 0.95);
  EXPECT_NE(r.to_text().find("temperature 0.7"), std::string::npos) << r.to_text();
}

TEST(ServeBench, SeedDecidesThePrompts) {
  auto prompts = [](uint64_t seed) {
    FakeCompletionsServer server(FakeServerConfig{});
    ServeBenchOptions o = options(server, 2, 4);
    o.gen_len = 2;
    o.seed = seed;
    run_serve_bench(o);
    std::lock_guard<std::mutex> lk(server.mu);
    std::set<std::string> out;
    for (const auto& b : server.bodies) out.insert(b.at("prompt").dump());
    return out;
  };
  const auto a = prompts(7), b = prompts(7), c = prompts(8);
  EXPECT_EQ(a.size(), 4u);  // different requests, different prompts
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(ServeBench, BearerKeyAndModelsFailure) {
  FakeServerConfig cfg;
  cfg.api_key = "sekret";
  FakeCompletionsServer server(cfg);
  ServeBenchOptions o = options(server, 2, 2);
  try {
    run_serve_bench(o);
    ADD_FAILURE() << "expected an error for the unauthorized /v1/models";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 401"), std::string::npos) << e.what();
  }
  o.api_key = "sekret";
  const ServeBenchResult r = run_serve_bench(o);
  EXPECT_EQ(r.completed, 2);
  std::lock_guard<std::mutex> lk(server.mu);
  EXPECT_EQ(server.auth_seen.back(), "Bearer sekret");
}

TEST(ServeBench, TokensFromUsageWhenChunksCarrySeveral) {
  FakeServerConfig cfg;
  cfg.tokens_per_chunk = 4;  // 20 tokens in 5 chunks
  FakeCompletionsServer server(cfg);
  const ServeBenchResult r = run_serve_bench(options(server, 2, 4));
  EXPECT_EQ(r.completed, 4);
  EXPECT_EQ(r.output_tokens, 4 * 20);
  EXPECT_EQ(r.itl_ms.count, 4u * 4);  // one per chunk gap, scaled to per-token
  expect_ordered(r.itl_ms, "itl");
}

TEST(ServeBench, UnreachableServerIsAnError) {
  ServeBenchOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(test::closed_port());
  EXPECT_THROW(run_serve_bench(o), Error);
}

}  // namespace
}  // namespace bunsen::bench
