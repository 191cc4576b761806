// Metrics and Histogram (see metrics.h): plain counters under one mutex each, rendered on demand. Quantiles
// in summary() are estimated by linear interpolation inside the bucket that holds them (Prometheus's
// histogram_quantile rule), so they are approximate by design.
#include "server/api/metrics.h"

#include <cmath>
#include <cstdlib>

#include "core/status.h"

namespace bunsen::server {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  for (int precision = 6; precision < 17; ++precision) {  // the shortest text that reads back exactly
    std::string s = strfmt("%.*g", precision, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return strfmt("%.17g", v);
}

// Prometheus label values escape backslash, double quote and newline.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string header(const std::string& name, const std::string& help, const char* type) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  std::lock_guard lock(mu_);
  size_t i = 0;
  while (i < kBuckets.size() && seconds > kBuckets[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

std::string Histogram::prometheus(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mu_);
  std::string out = header(name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative += counts_[i];
    double le = i < kBuckets.size() ? kBuckets[i] : INFINITY;
    out += name + "_bucket{le=\"" + num(le) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

nlohmann::json Histogram::summary() const {
  std::lock_guard lock(mu_);
  auto quantile = [&](double q) -> double {
    if (count_ == 0) return 0.0;
    double rank = q * static_cast<double>(count_);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      uint64_t before = cumulative;
      cumulative += counts_[i];
      if (static_cast<double>(cumulative) < rank || counts_[i] == 0) continue;
      if (i == kBuckets.size()) return kBuckets.back();  // +Inf bucket: the highest finite bound
      double lo = i == 0 ? 0.0 : kBuckets[i - 1], hi = kBuckets[i];
      return lo + (hi - lo) * (rank - static_cast<double>(before)) / static_cast<double>(counts_[i]);
    }
    return kBuckets.back();
  };
  return {{"count", count_}, {"sum", sum_}, {"p50", quantile(0.5)}, {"p99", quantile(0.99)}};
}

Metrics::Metrics() : start_(std::chrono::steady_clock::now()) {}

void Metrics::record_request(const std::string& route, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += n;
}

void Metrics::add_generated_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  generated_tokens_ += n;
}

void Metrics::add_cached_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  cached_tokens_ += n;
}

double Metrics::uptime_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

int64_t Metrics::requests_total() const {
  std::lock_guard lock(mu_);
  int64_t total = 0;
  for (const auto& [key, n] : requests_) total += n;
  return total;
}

int64_t Metrics::prompt_tokens() const {
  std::lock_guard lock(mu_);
  return prompt_tokens_;
}

int64_t Metrics::generated_tokens() const {
  std::lock_guard lock(mu_);
  return generated_tokens_;
}

int64_t Metrics::cached_tokens() const {
  std::lock_guard lock(mu_);
  return cached_tokens_;
}

std::string Metrics::prometheus() const {
  std::string out;
  {
    std::lock_guard lock(mu_);
    out += header("bunsen_requests_total", "HTTP requests answered, by route and status.", "counter");
    for (const auto& [key, n] : requests_) {
      out += "bunsen_requests_total{route=\"" + label_value(key.first) + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    }
    out += header("bunsen_prompt_tokens_total", "Prompt tokens of generation requests.", "counter");
    out += "bunsen_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
    out += header("bunsen_generation_tokens_total", "Tokens generated.", "counter");
    out += "bunsen_generation_tokens_total " + std::to_string(generated_tokens_) + "\n";
    out += header("bunsen_cached_prompt_tokens_total", "Prompt tokens served from the prefix cache.", "counter");
    out += "bunsen_cached_prompt_tokens_total " + std::to_string(cached_tokens_) + "\n";
  }
  out += header("bunsen_uptime_seconds", "Seconds since the server started.", "gauge");
  out += "bunsen_uptime_seconds " + num(uptime_seconds()) + "\n";
  out += ttft_.prometheus("bunsen_time_to_first_token_seconds", "Time from request to its first token.");
  out += itl_.prometheus("bunsen_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  out += e2e_.prometheus("bunsen_request_duration_seconds", "Time from request to its last event.");
  return out;
}

nlohmann::json Metrics::json() const {
  nlohmann::json by_route = nlohmann::json::object();
  int64_t total = 0;
  nlohmann::json tokens;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, n] : requests_) {
      by_route[key.first][std::to_string(key.second)] = n;
      total += n;
    }
    tokens = {{"prompt", prompt_tokens_}, {"generated", generated_tokens_}, {"cached", cached_tokens_}};
  }
  return {{"uptime_s", uptime_seconds()},
          {"requests", {{"total", total}, {"by_route", by_route}}},
          {"tokens", tokens},
          {"ttft", ttft_.summary()},
          {"itl", itl_.summary()},
          {"e2e", e2e_.summary()}};
}

}  // namespace bunsen::server
