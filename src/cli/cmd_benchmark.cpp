// `bunsen benchmark`: speed of a model or a synthetic shape against the measured roofline; with --serve URL,
// a serving benchmark of concurrent streaming clients against a running server. Text or JSON.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "bench/benchmark.h"
#include "bench/serve_bench.h"
#include "bench/synthetic_shapes.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "hub/demo_model.h"

namespace bunsen::cli {
namespace {

const std::vector<OptionSpec> kSpecs = {
    {"model", "DIR", "model directory; default: the built-in demo model", "m"},
    {"synthetic", "SHAPE", "random weights of a named real shape, built in memory (see --list-shapes)"},
    {"dtype", "T", "weight dtype for --synthetic: bf16 (default), f16, f32"},
    {"quant", "BITS[:GROUP]",
     "--synthetic weights MLX affine-quantized: bits 2,3,4,5,6,8, group 32|64|128 (default 64)"},
    {"prompt-len", "N", "prompt tokens for the prefill measurement (default 512; 1024 with --serve)", "p"},
    {"gen", "N", "tokens to decode after the prompt (default 128; 256 with --serve)", "n"},
    {"decode-batch", "B,B", "also time decode with B sequences per step (e.g. 16,64), as the server batches"},
    {"mixed-prefill", "P",
     "with --decode-batch: each timed step also prefills a P-token prompt chunk (a serving step)"},
    {"prefill-lens", "N,N",
     "further prompt lengths timed for prefill only (default: none on cpu, 512,2048 on cuda)"},
    {"temperature", "T",
     "sample at temperature T (default 0 = greedy): the timed decode with seed 0; with --serve every "
     "request, "
     "seeded with its index"},
    {"top-p", "P", "with --temperature: nucleus threshold (default 1 = off)"},
    {"top-k", "K", "with --temperature: top-k (default 0 = off)"},
    {"min-p", "P", "with --temperature: min-p (default 0 = off)"},
    {"threads", "N", "CPU threads (default: all cores)"},
    {"no-probe", "", "skip the memory-bandwidth and matmul-rate probes"},
    {"json", "", "print the result as JSON"},
    {"list-shapes", "", "list the --synthetic shapes"},
    {"device", "DEV", kDeviceHelp},
    {"serve", "URL",
     "serving benchmark against a running server's /v1/completions (e.g. http://127.0.0.1:8080)"},
    {"concurrency", "N", "--serve: concurrent streaming clients (default 16)", "c"},
    {"requests", "N", "--serve: requests in total (default 4 x concurrency)"},
    {"api-key", "KEY", "--serve: bearer token for the server"},
    {"seed", "N", "--serve: seed of the random prompt tokens (default 0)"},
    {"help", "", "show this help", "h"},
};

// --temperature, --top-p, --top-k, --min-p (defaults: greedy, filters off), checked.
void read_sampling(const Args& a, double& temperature, double& top_p, int64_t& top_k, double& min_p) {
  temperature = a.number("temperature", 0.0);
  top_p = a.number("top-p", 1.0);
  top_k = a.integer("top-k", 0);
  min_p = a.number("min-p", 0.0);
  check(temperature >= 0, "cli", "bunsen benchmark: --temperature must be >= 0");
  check(top_p > 0 && top_p <= 1, "cli", "bunsen benchmark: --top-p must be in (0, 1]");
  check(top_k >= 0 && top_k <= std::numeric_limits<int32_t>::max(), "cli",
        "bunsen benchmark: --top-k must be >= 0");
  check(min_p >= 0 && min_p <= 1, "cli", "bunsen benchmark: --min-p must be in [0, 1]");
  check(temperature > 0 || !(a.has("top-p") || a.has("top-k") || a.has("min-p")), "cli",
        "bunsen benchmark: --top-p, --top-k and --min-p need --temperature > 0");
}

// --serve: prompt 1024 and gen 256 by default (the serving shape).
int run_serve(const Args& a) {
  for (const char* f : {"model", "synthetic", "dtype", "quant", "prefill-lens", "decode-batch",
                        "mixed-prefill", "threads", "no-probe", "device"})
    check(!a.has(f), "cli", std::string("bunsen benchmark: --") + f + " does not apply to --serve");
  bench::ServeBenchOptions o;
  o.url = *a.str("serve");
  o.concurrency = static_cast<int>(a.integer("concurrency", 16));
  o.requests = static_cast<int>(a.integer("requests", 4 * static_cast<int64_t>(o.concurrency)));
  o.prompt_len = a.integer("prompt-len", 1024);
  o.gen_len = a.integer("gen", 256);
  o.api_key = a.str("api-key", "");
  o.seed = static_cast<uint64_t>(a.integer("seed", 0));
  read_sampling(a, o.temperature, o.top_p, o.top_k, o.min_p);
  check(o.concurrency >= 1 && o.concurrency <= 4096, "cli", "bunsen benchmark: --concurrency must be in [1, 4096]");
  check(o.requests >= 1, "cli", "bunsen benchmark: --requests must be at least 1");
  check(o.prompt_len >= 1 && o.gen_len >= 1, "cli", "bunsen benchmark: --prompt-len and --gen must be at least 1");
  o.progress = ::isatty(2) != 0;
  const bench::ServeBenchResult r = bench::run_serve_bench(o);
  std::printf("%s\n", a.flag("json") ? r.to_json().c_str() : r.to_text().c_str());
  return r.completed > 0 ? 0 : 1;
}

// "4" or "4:64" -> {bits, group} (validated by the model's quant rules).
model::QuantSpec parse_quant(const std::string& s) {
  model::QuantSpec q;
  const size_t colon = s.find(':');
  char* stop = nullptr;
  const std::string bits = s.substr(0, colon);
  q.bits = static_cast<int>(std::strtol(bits.c_str(), &stop, 10));
  bool ok = !bits.empty() && *stop == '\0';
  if (colon != std::string::npos) {
    const std::string group = s.substr(colon + 1);
    q.group_size = static_cast<int>(std::strtol(group.c_str(), &stop, 10));
    ok = ok && !group.empty() && *stop == '\0';
  }
  if (!ok || !model::is_supported(q))
    throw Error("cli", "bunsen benchmark: --quant must be BITS[:GROUP] with bits 2,3,4,5,6,8 and group 32, 64 or "
                       "128, got '" + s + "'");
  return q;
}

std::vector<int64_t> parse_lengths(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, end - at);
    char* stop = nullptr;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v <= 0 || v > (1 << 24))
      throw Error("cli", "bunsen benchmark: --prefill-lens must be comma-separated positive integers, got '" +
                             s + "'");
    out.push_back(v);
    at = end + 1;
  }
  return out;
}

}  // namespace

int cmd_benchmark(int argc, char** argv) {
  Args a("benchmark", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen benchmark [--model DIR | --synthetic SHAPE | --serve URL] [options]",
                           "Measure prefill and decode throughput and the fraction of this machine's memory "
                           "bandwidth that decode reaches.",
                           kSpecs)
                   .c_str(),
               stdout);
    return 0;
  }
  if (a.flag("list-shapes")) {
    for (const auto& n : bench::synthetic_shape_names()) std::printf("%s\n", n.c_str());
    return 0;
  }
  if (a.has("serve")) return run_serve(a);
  for (const char* f : {"concurrency", "requests", "api-key", "seed"})
    check(!a.has(f), "cli", std::string("bunsen benchmark: --") + f + " applies to --serve only");
  const Device device = parse_device(a.str("device"), "benchmark");
  check(!(a.has("model") && a.has("synthetic")), "cli",
        "bunsen benchmark: give --model or --synthetic, not both");
  bench::BenchmarkOptions o;
  o.device = device;
  o.synthetic = a.str("synthetic", "");
  if (o.synthetic.empty()) o.model_dir = a.has("model") ? *a.str("model") : hub::ensure_demo_model();
  const std::string dt = a.str("dtype", "bf16");
  auto d = dtype_from_name(dt);
  check(d && is_float(*d), "cli", "bunsen benchmark: --dtype must be bf16, f16 or f32, got '" + dt + "'");
  o.dtype = *d;
  if (a.has("quant")) {
    check(!o.synthetic.empty(), "cli",
          "bunsen benchmark: --quant applies to --synthetic (a checkpoint's config.json says how it is quantized)");
    o.quant = parse_quant(*a.str("quant"));
  }
  o.prompt_len = a.integer("prompt-len", 512);
  o.gen_len = a.integer("gen", 128);
  if (a.has("prefill-lens")) o.prefill_lens = parse_lengths(*a.str("prefill-lens"));
  if (a.has("decode-batch")) o.decode_batches = parse_lengths(*a.str("decode-batch"));
  o.mixed_prefill = a.integer("mixed-prefill", 0);
  check(o.mixed_prefill == 0 || !o.decode_batches.empty(), "cli", "bunsen benchmark: --mixed-prefill needs --decode-batch");
  o.threads = static_cast<int>(a.integer("threads", 0));
  o.probe = !a.flag("no-probe");
  double temperature = 0, top_p = 1, min_p = 0;
  int64_t top_k = 0;
  read_sampling(a, temperature, top_p, top_k, min_p);
  o.sampling.temperature = static_cast<float>(temperature);
  o.sampling.top_p = static_cast<float>(top_p);
  o.sampling.top_k = static_cast<int>(top_k);
  o.sampling.min_p = static_cast<float>(min_p);
  o.sampling.seed = 0;
  bench::BenchmarkResult r = bench::run_benchmark(o);
  std::printf("%s\n", a.flag("json") ? r.to_json().c_str() : r.to_text().c_str());
  return 0;
}

}  // namespace bunsen::cli
