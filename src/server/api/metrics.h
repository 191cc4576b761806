// Metrics: the server's counters and latency histograms, shared by the dialects (request counts by route
// and status, prompt/generated tokens) and the generation pipeline (TTFT, inter-token latency), rendered
// as Prometheus text for /metrics and as JSON for /stats. Not the engine's own state (running/waiting/KV
// come from engine::Backend::stats()). Invariants: every method is thread-safe; histograms are cumulative
// with fixed buckets in seconds.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace bunsen::server {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  void observe(double seconds);
  // Prometheus lines for `name` (name_bucket{le=...}, name_sum, name_count).
  std::string prometheus(const std::string& name, const std::string& help) const;
  nlohmann::json summary() const;  // {count, sum, p50, p99} (quantiles estimated from the buckets)

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBuckets.size() + 1> counts_{};  // last: +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void record_request(const std::string& route, int status);  // once per answered request
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  void add_cached_tokens(int64_t n);
  Histogram& ttft() { return ttft_; }
  Histogram& inter_token() { return itl_; }
  Histogram& e2e() { return e2e_; }

  double uptime_seconds() const;
  int64_t requests_total() const;
  int64_t prompt_tokens() const;
  int64_t generated_tokens() const;
  int64_t cached_tokens() const;
  // Prometheus text: bunsen_requests_total{route,status}, bunsen_prompt_tokens_total,
  // bunsen_generation_tokens_total, bunsen_time_to_first_token_seconds, bunsen_inter_token_latency_seconds,
  // bunsen_request_duration_seconds (the engine/KV gauges are appended by the admin route).
  std::string prometheus() const;
  nlohmann::json json() const;  // {uptime_s, requests:{total, by_route:{...}}, tokens:{...}, ttft, itl}

 private:
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point start_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, cached_tokens_ = 0;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace bunsen::server
