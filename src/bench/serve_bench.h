// `bunsen benchmark --serve URL`: N concurrent streaming clients (one thread each, blocking sockets)
// send random-token prompts to an OpenAI-compatible POST /v1/completions and measure throughput, TTFT,
// inter-token and end-to-end latency. Not a load generator with arrival rates (every client sends its
// next request as soon as the previous one ends) and not a correctness test of the server's text.
// Invariants: request k's prompt depends only on (seed, k); a request counts as completed only when
// its stream returned HTTP 200 and ended with `data: [DONE]`; all latencies are wall-clock, in ms.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::bench {

struct ServeBenchOptions {
  std::string url;  // http://host:port (a path prefix is allowed)
  int concurrency = 16;
  int requests = 0;         // 0: 4 × concurrency
  int64_t prompt_len = 1024;
  int64_t gen_len = 256;
  std::string api_key;      // sent as "Authorization: Bearer K" when set
  uint64_t seed = 0;
  std::string model;        // "": the first id of GET /v1/models
  bool progress = false;    // a progress bar on stderr
  double read_timeout_s = 600;
  // Sampling of every request: temperature 0 = greedy (the other fields are then not sent); else request
  // k also carries seed k (reproducible runs) and top_p / top_k / min_p where not off.
  double temperature = 0, top_p = 1, min_p = 0;
  int64_t top_k = 0;
};

// Summary of one latency sample set, in ms (all 0 when empty).
struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  size_t count = 0;
};
// p in [0, 100], linear interpolation between closest ranks of the sorted samples (numpy's default).
double percentile(const std::vector<double>& sorted, double p);
LatencyStats summarize(std::vector<double> samples);

// What one streamed completion looked like (filled by the client, also used by tests).
struct RequestTrace {
  bool ok = false;
  std::string error;            // why it failed
  double ttft_ms = 0;           // request sent -> first chunk with text
  double e2e_ms = 0;            // request sent -> [DONE]
  int64_t text_chunks = 0;      // chunks carrying a non-empty "text"
  int64_t completion_tokens = 0;  // from the usage chunk, else text_chunks
  int64_t prompt_tokens = 0;      // from the usage chunk, else the prompt length sent
  std::vector<double> gaps_ms;  // between consecutive text chunks
};

// Per-chunk byte scan of one completions stream `data:` payload (no JSON DOM on the hot path).
struct ChunkScan {
  bool done = false;        // "[DONE]"
  bool error = false;       // an {"error": ...} event
  int64_t text_len = -1;    // raw length of the first "text" string value, -1 when there is none
  int64_t completion_tokens = -1, prompt_tokens = -1;  // from "usage", -1 when absent
};
ChunkScan scan_completion_chunk(std::string_view payload);

struct ServeBenchResult {
  std::string url, model;
  int concurrency = 0, requests = 0;
  int64_t prompt_len = 0, gen_len = 0;
  double temperature = 0, top_p = 1, min_p = 0;  // the options' sampling (to_json / to_text report it)
  int64_t top_k = 0;
  int completed = 0, failed = 0;
  std::vector<std::string> errors;  // the first few failure messages
  double wall_s = 0;
  int64_t output_tokens = 0, prompt_tokens = 0;
  double output_tok_s = 0, total_tok_s = 0, request_s = 0;
  LatencyStats ttft_ms, itl_ms, e2e_ms;
  std::string to_json() const;
  std::string to_text() const;
};

// Folds finished traces into the report (wall_s given by the caller).
ServeBenchResult aggregate(const std::vector<RequestTrace>& traces, double wall_s);

// Runs the benchmark. Throws Error("bench", ...) when GET /v1/models fails (nothing else is sent then);
// failures of individual completions are counted, not thrown.
ServeBenchResult run_serve_bench(const ServeBenchOptions& opts);

}  // namespace bunsen::bench
