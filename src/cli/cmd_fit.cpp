// `bunsen fit`: does a model fit this machine's GPUs / RAM, how long a context and how many sequences,
// and what batch-1 decode speed its memory bandwidth allows; --skus adds common datasheet GPUs.
// Wiring only: the arithmetic is bench/fit.h, the probing and report bench/fit_probe.h.
#include <algorithm>
#include <cstdio>

#include "bench/fit_probe.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/status.h"
#include "hub/demo_model.h"

namespace bunsen::cli {
namespace {

constexpr int64_t kDefaultCtx = 4096;

const std::vector<OptionSpec> kSpecs = {
    {"model", "DIR", "model directory (or give it as the first argument); default: the built-in demo model", "m"},
    {"synthetic", "SHAPE", "a named real shape instead of a directory (see bunsen benchmark --list-shapes)"},
    {"dtype", "T", "weight dtype for --synthetic: bf16 (default), f16, f32"},
    {"ctx", "N", "context tokens per sequence (default: 4096, at most the model's maximum)"},
    {"batch", "N", "sequences served at once (default 1)"},
    {"skus", "", "add a table of common GPUs from their datasheets (H100, H200, A100, L40S, RTX 4090/5090)"},
    {"no-probe", "", "skip the memory-bandwidth probe (no tok/s for this machine)"},
    {"json", "", "print the result as JSON"},
    {"help", "", "show this help", "h"},
};

bench::FitModel pick_model(const Args& a) {
  const bool dir_given = a.has("model") || !a.positional().empty();
  check(!(dir_given && a.has("synthetic")), "cli", "bunsen fit: give a model directory or --synthetic, not both");
  check(!(a.has("model") && !a.positional().empty()), "cli", "bunsen fit: give the model directory once");
  if (a.positional().size() > 1) throw Error("cli", "bunsen fit: unexpected argument '" + a.positional()[1] + "'");
  if (a.has("synthetic")) {
    const std::string dt = a.str("dtype", "bf16");
    const auto d = dtype_from_name(dt);
    check(d && is_float(*d), "cli", "bunsen fit: --dtype must be bf16, f16 or f32, got '" + dt + "'");
    return bench::synthetic_fit_model(*a.str("synthetic"), *d);
  }
  check(!a.has("dtype"), "cli", "bunsen fit: --dtype applies to --synthetic only (a directory has its own dtype)");
  if (a.has("model")) return bench::load_fit_model(*a.str("model"));
  if (!a.positional().empty()) return bench::load_fit_model(a.positional()[0]);
  return bench::load_fit_model(hub::ensure_demo_model());
}

}  // namespace

int cmd_fit(int argc, char** argv) {
  Args a("fit", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen fit [<model dir> | --model DIR | --synthetic SHAPE] [options]",
                           "Whether a model fits this machine's GPUs and RAM: weights, KV cache per token, the "
                           "longest safe context, concurrent sequences and a bandwidth-bound decode tok/s.",
                           kSpecs)
                   .c_str(),
               stdout);
    return 0;
  }
  bench::FitReport rep;
  rep.model = pick_model(a);
  const int64_t def_ctx = rep.model.max_position > 0 ? std::min(kDefaultCtx, rep.model.max_position) : kDefaultCtx;
  rep.request.ctx = a.integer("ctx", def_ctx);
  rep.request.batch = a.integer("batch", 1);
  check(rep.request.ctx >= 1, "cli", "bunsen fit: --ctx must be at least 1");
  check(rep.request.batch >= 1, "cli", "bunsen fit: --batch must be at least 1");
  bench::ProbeOptions po;
  po.measure_bandwidth = !a.flag("no-probe");
  for (const bench::FitTarget& t : bench::probe_machine(po))
    rep.machine.push_back(bench::compute_fit(rep.model, t, rep.request));
  if (a.flag("skus"))
    for (const bench::FitTarget& t : bench::datasheet_gpus())
      rep.skus.push_back(bench::compute_fit(rep.model, t, rep.request));
  std::printf("%s\n", a.flag("json") ? rep.to_json().c_str() : rep.to_text().c_str());
  return 0;
}

}  // namespace bunsen::cli
