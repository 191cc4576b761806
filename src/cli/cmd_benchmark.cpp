// `bunsen benchmark`: speed of a model or a synthetic shape against the measured roofline; text or JSON.
#include <cstdio>

#include "bench/benchmark.h"
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
    {"prompt-len", "N", "prompt tokens for the prefill measurement (default 512)", "p"},
    {"gen", "N", "tokens to decode after the prompt (default 128)", "n"},
    {"threads", "N", "CPU threads (default: all cores)"},
    {"no-probe", "", "skip the memory-bandwidth probe"},
    {"json", "", "print the result as JSON"},
    {"list-shapes", "", "list the --synthetic shapes"},
    {"device", "DEV", "cpu (default; cuda arrives with the CUDA backend)"},
    {"help", "", "show this help", "h"},
};

}  // namespace

int cmd_benchmark(int argc, char** argv) {
  Args a("benchmark", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen benchmark [--model DIR | --synthetic SHAPE] [options]",
                           "Measure prefill and decode throughput and the fraction of this machine's memory "
                           "bandwidth that decode reaches.", kSpecs).c_str(), stdout);
    return 0;
  }
  if (a.flag("list-shapes")) {
    for (const auto& n : bench::synthetic_shape_names()) std::printf("%s\n", n.c_str());
    return 0;
  }
  check_device(a.str("device", "cpu"), "benchmark");
  check(!(a.has("model") && a.has("synthetic")), "cli", "bunsen benchmark: give --model or --synthetic, not both");
  bench::BenchmarkOptions o;
  o.synthetic = a.str("synthetic", "");
  if (o.synthetic.empty()) o.model_dir = a.has("model") ? *a.str("model") : hub::ensure_demo_model();
  const std::string dt = a.str("dtype", "bf16");
  auto d = dtype_from_name(dt);
  check(d && is_float(*d), "cli", "bunsen benchmark: --dtype must be bf16, f16 or f32, got '" + dt + "'");
  o.dtype = *d;
  o.prompt_len = a.integer("prompt-len", 512);
  o.gen_len = a.integer("gen", 128);
  o.threads = static_cast<int>(a.integer("threads", 0));
  o.probe = !a.flag("no-probe");
  bench::BenchmarkResult r = bench::run_benchmark(o);
  std::printf("%s\n", a.flag("json") ? r.to_json().c_str() : r.to_text().c_str());
  return 0;
}

}  // namespace bunsen::cli
