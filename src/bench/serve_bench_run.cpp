// The network side of the serving benchmark: model discovery, one thread per client, one streamed
// request at a time per client, a progress line on stderr. Per chunk only a byte scan runs
// (scan_completion_chunk), so the clients measure the server rather than themselves.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/http_client.h"
#include "bench/serve_bench.h"
#include "core/status.h"

namespace bunsen::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kFirstPromptId = 1000;   // skips the low ids where special/byte tokens usually live
constexpr int64_t kPromptIdCap = 30000;    // ordinary tokens in every vocabulary we serve
constexpr size_t kMaxErrorBody = 300;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct ModelInfo {
  std::string id;
  int64_t vocab_size = 0;     // 0 = unknown
  int64_t max_model_len = 0;  // 0 = unknown
};

int64_t int_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

ModelInfo discover_model(const HttpTarget& target, const ServeBenchOptions& o,
                         const std::vector<std::pair<std::string, std::string>>& auth) {
  HttpRequest req;
  req.path = "/v1/models";
  req.headers = auth;
  const HttpResponse r = http_fetch(target, req, {10, 60});
  if (r.head.status != 200)
    throw Error("bench", strfmt("GET %s/v1/models: HTTP %d: %s", o.url.c_str(), r.head.status,
                                r.body.substr(0, kMaxErrorBody).c_str()));
  ModelInfo m;
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  const bool listed = j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
                      j["data"][0].is_object();
  if (!listed && o.model.empty())
    throw Error("bench", "GET " + o.url + "/v1/models listed no model (give --model)");
  if (listed) {
    const nlohmann::json& d = j["data"][0];
    if (d.contains("id") && d["id"].is_string()) m.id = d["id"].get<std::string>();
    m.vocab_size = int_field(d, "vocab_size");
    if (!m.vocab_size && d.contains("meta") && d["meta"].is_object()) m.vocab_size = int_field(d["meta"], "n_vocab");
    m.max_model_len = int_field(d, "max_model_len");
    if (!m.max_model_len) m.max_model_len = int_field(d, "context_length");
  }
  if (!o.model.empty()) m.id = o.model;
  return m;
}

struct Shared {
  HttpTarget target;
  const ServeBenchOptions* opts = nullptr;
  std::string model;
  int64_t id_lo = 0, id_hi = 0;  // prompt ids are uniform in [id_lo, id_hi)
  std::vector<std::pair<std::string, std::string>> headers;
  std::atomic<int> next{0};
  std::atomic<int> finished{0}, failed{0};
  std::atomic<int64_t> tokens{0};
};

std::string request_body(const Shared& sh, int k) {
  std::mt19937_64 rng(sh.opts->seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(k));
  std::uniform_int_distribution<int64_t> dist(sh.id_lo, sh.id_hi - 1);
  std::vector<int64_t> prompt(static_cast<size_t>(sh.opts->prompt_len));
  for (int64_t& t : prompt) t = dist(rng);
  const ServeBenchOptions& o = *sh.opts;
  nlohmann::json body = {{"model", sh.model},
                         {"prompt", prompt},
                         {"max_tokens", o.gen_len},
                         {"stream", true},
                         {"ignore_eos", true},
                         {"temperature", o.temperature},
                         {"stream_options", {{"include_usage", true}}}};
  if (o.temperature > 0) {
    body["seed"] = k;
    if (o.top_p < 1) body["top_p"] = o.top_p;
    if (o.top_k > 0) body["top_k"] = o.top_k;
    if (o.min_p > 0) body["min_p"] = o.min_p;
  }
  return body.dump();
}

// Spreads chunk gaps over tokens when the usage says chunks carried more than one token each.
void finish_trace(RequestTrace& t, int64_t prompt_len) {
  if (t.completion_tokens < 0) t.completion_tokens = t.text_chunks;
  if (t.prompt_tokens < 0) t.prompt_tokens = prompt_len;
  if (t.text_chunks > 1 && t.completion_tokens > t.text_chunks) {
    const double per = static_cast<double>(t.completion_tokens - 1) / static_cast<double>(t.text_chunks - 1);
    for (double& g : t.gaps_ms) g /= per;
  }
}

RequestTrace run_request(Shared& sh, int k) {
  RequestTrace t;
  t.completion_tokens = t.prompt_tokens = -1;
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = request_body(sh, k);
  req.headers = sh.headers;
  int status = 0;
  bool done = false;
  std::string err_body;
  Clock::time_point first, last;
  SseParser sse([&](std::string_view data) {
    const ChunkScan c = scan_completion_chunk(data);
    if (c.done) done = true;
    if (c.error && t.error.empty()) t.error = "stream error event: " + std::string(data.substr(0, kMaxErrorBody));
    if (c.completion_tokens >= 0) t.completion_tokens = c.completion_tokens;
    if (c.prompt_tokens >= 0) t.prompt_tokens = c.prompt_tokens;
    if (c.text_len <= 0) return;
    const Clock::time_point now = Clock::now();
    if (t.text_chunks++ == 0) first = now;
    else t.gaps_ms.push_back(ms_between(last, now));
    last = now;
    sh.tokens.fetch_add(1, std::memory_order_relaxed);
  });
  const Clock::time_point t0 = Clock::now();
  try {
    http_call(
        sh.target, req, [&](const HttpResponseHead& h) { status = h.status; },
        [&](std::string_view piece) {
          if (status != 200) {
            if (err_body.size() < kMaxErrorBody) err_body.append(piece.substr(0, kMaxErrorBody - err_body.size()));
            return;
          }
          sse.feed(piece);
        },
        {10, sh.opts->read_timeout_s});
  } catch (const std::exception& e) {  // bench::Error for the network, anything else from the decoders
    t.error = e.what();
  }
  const Clock::time_point end = Clock::now();
  if (t.error.empty() && status != 200) t.error = strfmt("HTTP %d: %s", status, err_body.c_str());
  if (t.error.empty() && !done) t.error = "stream ended without data: [DONE]";
  if (t.error.empty() && t.text_chunks == 0) t.error = "stream carried no text";
  t.ok = t.error.empty();
  if (t.ok) {
    t.ttft_ms = ms_between(t0, first);
    t.e2e_ms = ms_between(t0, end);
    finish_trace(t, sh.opts->prompt_len);
  }
  return t;
}

void print_progress(const Shared& sh, int total, Clock::time_point start, bool final) {
  constexpr int kWidth = 30;
  const int f = sh.finished.load();
  const int filled = total ? f * kWidth / total : kWidth;
  const double s = std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
  std::fprintf(stderr, "\r  [%s%s] %d/%d requests  %.0f out tok/s  %d failed%s", std::string(filled, '=').c_str(),
               std::string(kWidth - filled, ' ').c_str(), f, total, sh.tokens.load() / s, sh.failed.load(),
               final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace

ServeBenchResult run_serve_bench(const ServeBenchOptions& opts) {
  check(opts.concurrency >= 1, "bench", "--concurrency must be at least 1");
  check(opts.prompt_len >= 1 && opts.gen_len >= 1, "bench", "--prompt-len and --gen must be at least 1");
  Shared sh;
  sh.opts = &opts;
  sh.target = parse_http_url(opts.url);
  if (!opts.api_key.empty()) sh.headers.emplace_back("Authorization", "Bearer " + opts.api_key);
  const ModelInfo info = discover_model(sh.target, opts, sh.headers);
  sh.headers.emplace_back("Content-Type", "application/json");
  sh.headers.emplace_back("Accept", "text/event-stream");
  sh.model = info.id;
  const int64_t cap = info.vocab_size > 0 ? std::min(info.vocab_size, kPromptIdCap) : kPromptIdCap;
  sh.id_lo = cap > kFirstPromptId + 1 ? kFirstPromptId : 0;
  sh.id_hi = cap;
  if (info.max_model_len > 0 && opts.prompt_len + opts.gen_len > info.max_model_len)
    std::fprintf(stderr, "bunsen benchmark: warning: prompt %lld + gen %lld exceeds the server's max_model_len %lld\n",
                 static_cast<long long>(opts.prompt_len), static_cast<long long>(opts.gen_len),
                 static_cast<long long>(info.max_model_len));
  const int total = opts.requests > 0 ? opts.requests : 4 * opts.concurrency;
  std::vector<RequestTrace> traces(static_cast<size_t>(total));
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < std::min(opts.concurrency, total); ++c)
    clients.emplace_back([&] {
      for (int k = sh.next.fetch_add(1); k < total; k = sh.next.fetch_add(1)) {
        traces[static_cast<size_t>(k)] = run_request(sh, k);
        if (!traces[static_cast<size_t>(k)].ok) sh.failed.fetch_add(1);
        sh.finished.fetch_add(1);
      }
    });
  if (opts.progress) {
    while (sh.finished.load() < total) {
      print_progress(sh, total, start, false);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  for (std::thread& th : clients) th.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (opts.progress) print_progress(sh, total, start, true);
  ServeBenchResult r = aggregate(traces, wall_s);
  r.url = opts.url;
  r.model = sh.model;
  r.concurrency = opts.concurrency;
  r.prompt_len = opts.prompt_len;
  r.gen_len = opts.gen_len;
  r.temperature = opts.temperature;
  r.top_p = opts.top_p;
  r.top_k = opts.top_k;
  r.min_p = opts.min_p;
  return r;
}

}  // namespace bunsen::bench
