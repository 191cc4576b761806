// bunsen entry point: dispatches the verb; every bunsen::Error becomes one line on stderr and exit code 1
// (2 for usage errors).
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "core/status.h"

namespace {

struct Verb {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Verb kVerbs[] = {
    {"serve", bunsen::cli::cmd_serve, "serve a model over the OpenAI and Anthropic HTTP APIs"},
    {"generate", bunsen::cli::cmd_generate, "generate text from a prompt (streams to stdout)"},
    {"benchmark", bunsen::cli::cmd_benchmark, "measure prefill/decode speed against this machine's roofline"},
    {"fit", bunsen::cli::cmd_fit, "does a model fit this machine's GPUs/RAM: max context, sequences, tok/s"},
    {"template", bunsen::cli::cmd_template, "render a model's chat template for a conversation (like HF)"},
    {"tokenize", bunsen::cli::cmd_tokenize, "text -> token ids with a model's tokenizer"},
    {"detokenize", bunsen::cli::cmd_detokenize, "token ids -> text with a model's tokenizer"},
    {"convert", bunsen::cli::cmd_convert, "convert a Hugging Face checkpoint to MLX layout, optionally quantized"},
};

void print_usage() {
  std::printf("bunsen %s: a native local LLM engine\n\nusage: bunsen <command> [options]\n\ncommands:\n", BUNSEN_VERSION);
  for (const auto& v : kVerbs) std::printf("  %-12s %s\n", v.name, v.summary);
  std::printf("\nRun 'bunsen <command> --help' for the options of a command.\n"
              "Without --model, commands use the built-in demo model (random weights, real Qwen3 tokenizer).\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("bunsen %s\n", BUNSEN_VERSION);
    return 0;
  }
  for (const auto& v : kVerbs) {
    if (std::strcmp(argv[1], v.name) != 0) continue;
    try {
      return v.run(argc, argv);
    } catch (const bunsen::Error& e) {
      std::fprintf(stderr, "bunsen %s: error: %s\n", v.name, e.what());
      return e.component() == "cli" ? 2 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bunsen %s: error: %s\n", v.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "bunsen: unknown command '%s' (run 'bunsen --help')\n", argv[1]);
  return 2;
}
