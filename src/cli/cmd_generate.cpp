// `bunsen generate`: load a model (or the built-in demo), encode the prompt, stream the generated text,
// end with a stats line on stderr, or print one JSON object with --json.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/kv_quant_flag.h"
#include "core/status.h"
#include "engine/generator.h"
#include "hub/demo_model.h"
#include "kernels/device.h"
#include "model/registry.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace bunsen::cli {
namespace {

const std::vector<OptionSpec> kSpecs = {
    {"model", "DIR", "model directory (config.json + safetensors); default: the built-in demo model", "m"},
    {"prompt", "TEXT", "prompt text", "p"},
    {"prompt-tokens", "IDS", "prompt as comma-separated token ids (e.g. 1,2,3)"},
    {"max-tokens", "N", "maximum tokens to generate (default 256)", "n"},
    {"temperature", "T", "sampling temperature; 0 = greedy (default: generation_config.json, else 0)"},
    {"top-p", "P", "nucleus sampling threshold (default 1 = off)"},
    {"top-k", "K", "keep the K most likely tokens (default 0 = off)"},
    {"min-p", "P", "drop tokens below P x the top probability (default 0 = off)"},
    {"seed", "N", "random seed (default: random)"},
    {"raw", "", "use the prompt as raw text (default: wrapped as one user message by the model's chat template)"},
    {"json", "", "print one JSON object at the end instead of streaming"},
    {"threads", "N", "CPU threads (default: all cores)"},
    {"device", "DEV", kDeviceHelp},
    {"kv-quant", "off|4|8|fp8|config", kKvQuantHelp},
    {"help", "", "show this help", "h"},
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0 || v > INT32_MAX)
      throw Error("cli", "bunsen generate: --prompt-tokens must be comma-separated non-negative integers, got '" + item + "'");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// Like mlx-lm and HF: the prompt becomes one user message rendered by the model's chat template (tokenized
// without adding special tokens, as apply_chat_template does) unless --raw or the model has no template.
std::vector<int32_t> encode_prompt(const std::string& text, bool raw, const std::string& dir, const text::Tokenizer& tok) {
  if (raw || !text::ChatTemplate::available(dir)) return tok.encode(text, /*add_special=*/true);
  const text::ChatTemplate tpl = text::ChatTemplate::load(dir);
  const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
  return tok.encode(tpl.render(messages, nullptr, /*add_generation_prompt=*/true), /*add_special=*/false);
}

sampling::SamplingParams sampling_from(const Args& a, const model::ModelConfig& cfg) {
  sampling::SamplingParams p;
  const model::GenerationDefaults& g = cfg.generation;
  const bool sample_by_default = g.do_sample.value_or(false);
  p.temperature = static_cast<float>(a.number("temperature", sample_by_default ? g.temperature.value_or(1.0) : 0.0));
  p.top_p = static_cast<float>(a.number("top-p", sample_by_default ? g.top_p.value_or(1.0) : 1.0));
  p.top_k = static_cast<int>(a.integer("top-k", sample_by_default ? g.top_k.value_or(0) : 0));
  p.min_p = static_cast<float>(a.number("min-p", sample_by_default ? g.min_p.value_or(0.0) : 0.0));
  check(p.temperature >= 0, "cli", "bunsen generate: --temperature must be >= 0");
  check(p.top_p > 0 && p.top_p <= 1, "cli", "bunsen generate: --top-p must be in (0, 1]");
  check(p.top_k >= 0, "cli", "bunsen generate: --top-k must be >= 0");
  check(p.min_p >= 0 && p.min_p <= 1, "cli", "bunsen generate: --min-p must be in [0, 1]");
  if (a.has("seed")) p.seed = static_cast<uint64_t>(a.integer("seed", 0));
  return p;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  Args a("generate", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen generate [--model DIR] (--prompt TEXT | --prompt-tokens IDS) [options]",
                           "Generate text with a model on this machine.", kSpecs).c_str(), stdout);
    return 0;
  }
  const Device device = parse_device(a.str("device"), "generate");
  check(a.has("prompt") != a.has("prompt-tokens"), "cli", "bunsen generate: give exactly one of --prompt or --prompt-tokens");
  const std::string dir = a.has("model") ? *a.str("model") : hub::ensure_demo_model();
  kernels::set_current_device(device);
  model::LoadOptions lo;
  lo.device = device;
  auto model = model::load_model(dir, lo);
  const model::ModelConfig& cfg = model->config();
  auto tok = open_tokenizer(dir, cfg);
  std::vector<int32_t> prompt = a.has("prompt") ? encode_prompt(*a.str("prompt"), a.flag("raw"), dir, *tok)
                                                : parse_ids(*a.str("prompt-tokens"));
  check(!prompt.empty(), "cli", "bunsen generate: the prompt encodes to no tokens");
  engine::GenerateOptions go;
  go.sampling = sampling_from(a, cfg);
  go.max_tokens = a.integer("max-tokens", 256);
  check(go.max_tokens >= 1, "cli", "bunsen generate: --max-tokens must be >= 1");
  go.eos_ids = eos_ids(cfg, *tok);

  ThreadPool pool(static_cast<int>(a.integer("threads", 0)));
  engine::RunnerOptions ro;
  ro.max_context = static_cast<int64_t>(prompt.size()) + go.max_tokens;
  ro.max_tokens_per_step = std::min<int64_t>(512, static_cast<int64_t>(prompt.size()));
  ro.kv_quant = resolve_kv_quant(a.str("kv-quant"), dir, cfg.n_layers, device, "generate");
  engine::Runner runner(*model, ro, kernels::Context{&pool});

  const bool json = a.flag("json");
  text::StreamDecoder stream(*tok);
  auto on_token = [&](int32_t id) {
    if (!json) {
      std::string s = stream.push(id);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  engine::GenerateResult r = engine::generate(runner, prompt, go, on_token);
  const engine::GenerationStats& st = r.stats;
  if (json) {
    nlohmann::ordered_json j;
    j["model"] = dir;
    j["device"] = device.str();
    j["prompt_ids"] = prompt;
    j["generated_ids"] = r.tokens;
    j["text"] = tok->decode(r.tokens, /*skip_special=*/true);
    j["finish_reason"] = engine::finish_reason_name(r.finish);
    j["stats"] = {{"prompt_tokens", st.prompt_tokens},     {"generated_tokens", st.generated_tokens},
                  {"prefill_seconds", st.prefill_seconds}, {"prefill_tok_s", st.prefill_tok_s()},
                  {"decode_seconds", st.decode_seconds},   {"decode_tok_s", st.decode_tok_s()},
                  {"ms_per_token", st.ms_per_token()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::string rest = stream.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "[%s | prompt %lld tokens, prefill %.1f tok/s | generated %lld tokens, decode %.1f tok/s (%.2f ms/token) | finish: %s]\n",
                 device.str().c_str(), (long long)st.prompt_tokens, st.prefill_tok_s(), (long long)st.generated_tokens,
                 st.decode_tok_s(), st.ms_per_token(), engine::finish_reason_name(r.finish));
  }
  return 0;
}

}  // namespace bunsen::cli
