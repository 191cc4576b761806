// `bunsen convert`: a Hugging Face checkpoint to an MLX-layout one with mlx_lm.convert's flags (--hf-path or
// a positional SRC, --mlx-path DST, -q, --q-bits, --q-group-size), optionally affine-quantized.
// Wiring only: the conversion is model/convert.h. Invariants: flag errors are one line naming the flag
// (exit 2); DST existing is an error before anything is read; the progress bar goes to stderr only.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/status.h"
#include "model/convert.h"

namespace bunsen::cli {
namespace {

constexpr int kBarWidth = 30;

const std::vector<OptionSpec> kSpecs = {
    {"hf-path", "SRC", "Hugging Face model directory to convert (or give it as the first argument)"},
    {"model", "SRC", "same as --hf-path"},
    {"mlx-path", "DST", "output directory; must not exist (default: mlx_model)"},
    {"quantize", "", "quantize Linear and Embedding weights (MLX affine)", "q"},
    {"q-bits", "B", "bits per weight: 2, 3, 4, 5, 6 or 8 (default 4)"},
    {"q-group-size", "G", "values per scale/bias group: 32, 64 or 128 (default 64)"},
    {"shard-size", "GB", "largest safetensors shard in GiB (default 5, as mlx-lm)"},
    {"help", "", "show this help", "h"},
};

std::string pick_source(const Args& a) {
  const int given = a.has("hf-path") + a.has("model") + !a.positional().empty();
  check(given <= 1 && a.positional().size() <= 1, "cli", "bunsen convert: give the source model once");
  check(given == 1, "cli", "bunsen convert: missing the source model (--hf-path SRC)");
  if (a.has("hf-path")) return *a.str("hf-path");
  if (a.has("model")) return *a.str("model");
  return a.positional()[0];
}

model::ConvertOptions parse_options(const Args& a) {
  model::ConvertOptions o;
  o.src = pick_source(a);
  o.dst = a.str("mlx-path", "mlx_model");
  o.quantize = a.flag("quantize");
  o.spec.bits = static_cast<int>(a.integer("q-bits", 4));
  o.spec.group_size = static_cast<int>(a.integer("q-group-size", 64));
  const int b = o.spec.bits;
  check(b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8, "cli",
        strfmt("bunsen convert: --q-bits must be 2, 3, 4, 5, 6 or 8, got %d", b));
  const int g = o.spec.group_size;
  check(g == 32 || g == 64 || g == 128, "cli", strfmt("bunsen convert: --q-group-size must be 32, 64 or 128, got %d", g));
  check(o.quantize || (!a.has("q-bits") && !a.has("q-group-size")), "cli",
        "bunsen convert: --q-bits and --q-group-size need -q/--quantize");
  const double gb = a.number("shard-size", 5.0);
  check(gb > 0 && gb <= 1e6, "cli", "bunsen convert: --shard-size must be a positive number of GiB");
  o.max_shard_bytes = std::max<uint64_t>(1, static_cast<uint64_t>(gb * static_cast<double>(uint64_t{1} << 30)));
  std::error_code ec;
  check(!std::filesystem::exists(o.dst, ec), "cli",
        "bunsen convert: --mlx-path " + o.dst + " already exists; delete it or choose another path");
  return o;
}

// One bar redrawn in place on a terminal; one line per tensor otherwise (logs stay readable).
void show_progress(const model::ConvertProgress& p, bool tty) {
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  const int filled = static_cast<int>(frac * kBarWidth + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  std::fprintf(stderr, "%s[%s] %3d%% %zu/%zu %s%s%s", tty ? "\r\033[K" : "", bar.c_str(), static_cast<int>(frac * 100),
               p.index, p.count, p.name.c_str(), p.quantized ? " (quantized)" : "",
               tty && p.index < p.count ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  Args a("convert", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen convert [--hf-path] SRC [--mlx-path DST] [-q [--q-bits B] [--q-group-size G]]",
                           "Convert a Hugging Face safetensors checkpoint to the MLX layout (as mlx_lm.convert): "
                           "same tensor names, optional affine 2-8-bit quantization of Linear/Embedding "
                           "weights, sharded safetensors with an index, tokenizer files copied.",
                           kSpecs)
                   .c_str(),
               stdout);
    return 0;
  }
  model::ConvertOptions o = parse_options(a);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  o.progress = [tty](const model::ConvertProgress& p) { show_progress(p, tty); };
  const model::ConvertResult r = model::convert_checkpoint(o);
  std::fprintf(stderr, "converted %zu tensors (%zu quantized) into %zu shard%s, %.2f GB: %s\n", r.n_tensors,
               r.n_quantized, r.n_shards, r.n_shards == 1 ? "" : "s", static_cast<double>(r.total_bytes) / 1e9,
               o.dst.c_str());
  if (o.quantize)
    std::fprintf(stderr, "quantization: %d bits, group size %d (affine)\n", o.spec.bits, o.spec.group_size);
  return 0;
}

}  // namespace bunsen::cli
