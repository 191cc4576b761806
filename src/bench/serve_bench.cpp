// Serving benchmark bookkeeping: chunk scanning, percentiles, aggregation and the text/JSON report.
// The network side (threads, requests) is serve_bench_run.cpp.
#include "bench/serve_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace bunsen::bench {
namespace {

constexpr size_t kMaxErrorsKept = 5;

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Position just after `"key"` followed by optional spaces and ':' and optional spaces; npos if absent.
size_t value_after(std::string_view s, std::string_view quoted_key, size_t from = 0) {
  for (size_t at = s.find(quoted_key, from); at != std::string_view::npos; at = s.find(quoted_key, at + 1)) {
    size_t p = at + quoted_key.size();
    while (p < s.size() && s[p] == ' ') ++p;
    if (p >= s.size() || s[p] != ':') continue;
    ++p;
    while (p < s.size() && s[p] == ' ') ++p;
    return p;
  }
  return std::string_view::npos;
}

int64_t int_after(std::string_view s, std::string_view quoted_key, size_t from) {
  const size_t p = value_after(s, quoted_key, from);
  if (p == std::string_view::npos || p >= s.size() || !std::isdigit(static_cast<unsigned char>(s[p]))) return -1;
  return std::strtoll(std::string(s.substr(p, 20)).c_str(), nullptr, 10);
}

nlohmann::json stats_json(const LatencyStats& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}, {"count", s.count}};
}

}  // namespace

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

LatencyStats summarize(std::vector<double> samples) {
  LatencyStats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(samples.size());
  s.p50 = percentile(samples, 50);
  s.p90 = percentile(samples, 90);
  s.p99 = percentile(samples, 99);
  s.max = samples.back();
  return s;
}

ChunkScan scan_completion_chunk(std::string_view payload) {
  ChunkScan c;
  const std::string_view p = trim_ws(payload);
  if (p == "[DONE]") {
    c.done = true;
    return c;
  }
  const size_t choices = p.find("\"choices\"");
  const size_t err = value_after(p, "\"error\"");
  if (err != std::string_view::npos && (choices == std::string_view::npos || err < choices) &&
      p.compare(err, 4, "null") != 0) {
    c.error = true;
    return c;
  }
  const size_t t = value_after(p, "\"text\"");
  if (t != std::string_view::npos && t < p.size() && p[t] == '"') {
    size_t e = t + 1;
    while (e < p.size() && p[e] != '"') e += p[e] == '\\' ? 2 : 1;
    c.text_len = static_cast<int64_t>(std::min(e, p.size()) - (t + 1));
  }
  const size_t u = value_after(p, "\"usage\"");
  if (u != std::string_view::npos && p.compare(u, 4, "null") != 0) {
    c.completion_tokens = int_after(p, "\"completion_tokens\"", u);
    c.prompt_tokens = int_after(p, "\"prompt_tokens\"", u);
  }
  return c;
}

ServeBenchResult aggregate(const std::vector<RequestTrace>& traces, double wall_s) {
  ServeBenchResult r;
  r.wall_s = wall_s;
  std::vector<double> ttft, itl, e2e;
  for (const RequestTrace& t : traces) {
    if (!t.ok) {
      ++r.failed;
      if (r.errors.size() < kMaxErrorsKept) r.errors.push_back(t.error);
      continue;
    }
    ++r.completed;
    r.output_tokens += t.completion_tokens;
    r.prompt_tokens += t.prompt_tokens;
    ttft.push_back(t.ttft_ms);
    e2e.push_back(t.e2e_ms);
    itl.insert(itl.end(), t.gaps_ms.begin(), t.gaps_ms.end());
  }
  r.requests = static_cast<int>(traces.size());
  if (wall_s > 0) {
    r.output_tok_s = static_cast<double>(r.output_tokens) / wall_s;
    r.total_tok_s = static_cast<double>(r.output_tokens + r.prompt_tokens) / wall_s;
    r.request_s = r.completed / wall_s;
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
  return r;
}

std::string ServeBenchResult::to_json() const {
  nlohmann::json j = {
      {"url", url},
      {"model", model},
      {"concurrency", concurrency},
      {"requests", requests},
      {"prompt_len", prompt_len},
      {"gen_len", gen_len},
      {"sampling", {{"temperature", temperature}, {"top_p", top_p}, {"top_k", top_k}, {"min_p", min_p}}},
      {"completed", completed},
      {"failed", failed},
      {"errors", errors},
      {"wall_s", wall_s},
      {"output_tokens", output_tokens},
      {"prompt_tokens", prompt_tokens},
      {"output_tok_s", output_tok_s},
      {"total_tok_s", total_tok_s},
      {"request_s", request_s},
      {"ttft_ms", stats_json(ttft_ms)},
      {"itl_ms", stats_json(itl_ms)},
      {"e2e_ms", stats_json(e2e_ms)}};
  return j.dump();
}

std::string ServeBenchResult::to_text() const {
  std::string s = strfmt("serving benchmark: %s  model %s\n", url.c_str(), model.c_str());
  s += strfmt("  concurrency %d, %d requests: %d completed, %d failed; prompt %lld tokens, gen %lld tokens\n",
              concurrency, requests, completed, failed, static_cast<long long>(prompt_len),
              static_cast<long long>(gen_len));
  s += temperature > 0
           ? strfmt(
                 "  sampling        temperature %g, top_p %g, top_k %lld, min_p %g (seed = request index)\n",
                 temperature, top_p, static_cast<long long>(top_k), min_p)
           : std::string("  sampling        greedy\n");
  s += strfmt("  wall time       %10.2f s\n", wall_s);
  s += strfmt("  output tokens   %10lld   (prompt tokens %lld)\n", static_cast<long long>(output_tokens),
              static_cast<long long>(prompt_tokens));
  s += strfmt("  output tok/s    %10.1f\n", output_tok_s);
  s += strfmt("  total tok/s     %10.1f\n", total_tok_s);
  s += strfmt("  requests/s      %10.3f\n", request_s);
  s += strfmt("  %-16s %9s %9s %9s %9s %9s\n", "latency (ms)", "mean", "p50", "p90", "p99", "max");
  for (const auto& [name, st] : {std::pair<const char*, const LatencyStats*>{"TTFT", &ttft_ms},
                                 {"inter-token", &itl_ms},
                                 {"end-to-end", &e2e_ms}})
    s += strfmt("  %-16s %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, st->mean, st->p50, st->p90, st->p99, st->max);
  if (!errors.empty()) {
    s += strfmt("  first %zu failure(s):\n", errors.size());
    for (const std::string& e : errors) s += "    " + e + "\n";
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace bunsen::bench
