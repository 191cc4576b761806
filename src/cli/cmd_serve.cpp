// `bunsen serve`: load a model (or the built-in demo), build the engine (continuous batching over a paged
// KV pool sized from --batch/--ctx), the ModelService and the HTTP server with every route area, print a
// startup card on stderr and `listening on http://HOST:PORT` on stdout, then serve until SIGINT/SIGTERM
// (HTTP stops first, then the engine). Wiring only: the serving logic lives in server/ and engine/.
// Invariant: every startup failure is one line on stderr and a non-zero exit (a busy port included).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/synthetic_shapes.h"
#include "kernels/memory_info.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/kv_quant_flag.h"
#include "cli/serve_model.h"
#include "core/log.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/device.h"
#include "model/fingerprint.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "server/app.h"
#include "text/chat_template.h"

namespace bunsen::cli {
namespace http = server::http;
namespace {

const std::vector<OptionSpec> kSpecs = {
    {"model", "PATH|QUERY", "model directory (config.json + safetensors) or a name in the local HF cache; "
                            "default: the built-in demo model", "m"},
    {"query", "QUERY", "model name to look up in the local Hugging Face cache (lowest precedence)"},
    {"device", "DEV", kDeviceHelp},
    {"synthetic", "SHAPE", "serve random bf16 weights of a named real shape (benchmarks; byte tokenizer, no "
                           "chat template; see bunsen benchmark --list-shapes)"},
    {"host", "ADDR", "address to bind (default 127.0.0.1; 0.0.0.0 exposes the server: set --api-key)"},
    {"port", "N", "port (default 8080; 0 = any free port)"},
    {"max-tokens", "N", "default max tokens of a response (default 4096, capped by the context)"},
    {"temperature", "T", "default sampling temperature (default: generation_config.json, else 0.7)"},
    {"temp", "T", "same as --temperature"},
    {"top-p", "P", "default nucleus threshold (default: generation_config.json, else 1)"},
    {"top-k", "K", "default top-k (default: generation_config.json, else 0 = off)"},
    {"min-p", "P", "default min-p (default: generation_config.json, else 0 = off)"},
    {"thinking", "true|false", "default for the chat template's enable_thinking (default: the template's)"},
    {"api-key", "KEY", "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (except /health)"},
    {"allowed-origins", "A,B", "origins allowed by CORS (exact, comma-separated; '*' = any)"},
    {"log-level", "LEVEL", "error, warn, info or debug (default warn)"},
    {"max-body", "BYTES", "largest request body, e.g. 1048576 or 32MB (default 32MB)"},
    {"batch", "N", "sequences decoded together (default 8 on CPU, 64 on CUDA)"},
    {"decode-concurrency", "N", "same as --batch"},
    {"max-num-batched-tokens", "N", "tokens per engine step / prefill chunk (default 512 on CPU, 2048 on CUDA)"},
    {"ctx", "N", "max context per sequence (default min(model max positions, 32768))"},
    {"memory-budget", "GB", "memory for weights + KV pool + workspace (default: 90% of free GPU memory on "
                            "CUDA; on the CPU 75% of RAM, with the KV pool capped at 4 GiB beyond one context)"},
    {"allow-request-templates", "", "accept a chat template supplied in a request"},
    {"prompt-cache", "GB", "prefix cache: reuse the KV blocks of earlier prompts (default 2; 0 disables it). "
                           "Blocks live in the KV pool; on CUDA, blocks evicted from it are kept in GB gigabytes "
                           "of pinned host RAM and restored from there on a hit"},
    {"no-prefix-cache", "", "disable the prefix cache (same as --prompt-cache 0)"},
    {"ssd-cache", "DIR", "SSD tier of the prefix cache: snapshot finished prompts to DIR and restore them, also "
                         "after a restart (off unless set)"},
    {"ssd-cache-max", "GB", "byte cap of the SSD tier, oldest snapshots evicted first (default 32)"},
    {"ssd-cache-verify", "", "verify every payload checksum when restoring from the SSD tier (headers and "
                             "token ids always are)"},
    {"threads", "N", "CPU threads (default: all cores)"},
    {"kv-quant", "off|4|8|fp8|config", kKvQuantHelp},
    {"header-timeout", "SECONDS", "time a client has to send a request head (default 10)"},
    {"read-timeout", "SECONDS", "time a client has to send a request body (default 60)"},
    {"max-connections", "N", "open connections before new ones get 503 (default 4096)"},
    {"help", "", "show this help", "h"},
};
// Not in --help: test-only switches.
const std::vector<OptionSpec> kHidden = {
    {"replay", "FILE", "serve replayed outputs: JSON {\"texts\": [...]} (tests)"},
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// "1048576", "32MB", "512k", "1GiB" -> bytes (k/M/G are powers of 1024 either way, as HTTP servers do).
size_t parse_size(const std::string& text) {
  const std::string err = "bunsen serve: --max-body expects bytes like 1048576 or 32MB, got '" + text + "'";
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  check(i > 0 && i <= 15, "cli", err);
  double value = std::stod(text.substr(0, i));
  std::string unit;
  for (char c : text.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit == "kib" || unit == "kb" || unit == "k") value *= 1024.0;
  else if (unit == "mib" || unit == "mb" || unit == "m") value *= 1024.0 * 1024.0;
  else if (unit == "gib" || unit == "gb" || unit == "g") value *= 1024.0 * 1024.0 * 1024.0;
  else check(unit.empty() || unit == "b", "cli", err);
  check(value >= 1, "cli", "bunsen serve: --max-body must be at least 1 byte");
  return static_cast<size_t>(value);
}

std::optional<bool> parse_bool_flag(const Args& a, const std::string& name) {
  auto v = a.str(name);
  if (!v) return std::nullopt;
  if (*v == "true" || *v == "1" || *v == "yes" || *v == "on") return true;
  if (*v == "false" || *v == "0" || *v == "no" || *v == "off") return false;
  throw Error("cli", "bunsen serve: --" + name + " expects true or false, got '" + *v + "'");
}

log::Level parse_log_level(const std::string& s) {
  if (s == "error") return log::Level::kError;
  if (s == "warn" || s == "warning") return log::Level::kWarn;
  if (s == "info") return log::Level::kInfo;
  if (s == "debug") return log::Level::kDebug;
  throw Error("cli", "bunsen serve: --log-level must be error, warn, info or debug, got '" + s + "'");
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  return strfmt(u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
}

// Parser family of the model's tool-call/reasoning markup, from config.json's model_type.
std::string parser_family_for(const std::string& model_type) {
  auto starts = [&](const char* p) { return model_type.rfind(p, 0) == 0; };
  if (starts("qwen")) return "qwen3";
  if (starts("llama")) return "llama3";
  if (starts("mistral")) return "mistral";
  if (starts("gemma")) return "gemma4";
  if (starts("minicpm")) return "minicpm";
  return "none";
}

server::ServiceDefaults service_defaults(const Args& a, const model::ModelConfig& cfg) {
  server::ServiceDefaults d;
  const model::GenerationDefaults& g = cfg.generation;
  d.max_tokens = a.integer("max-tokens", d.max_tokens);
  check(d.max_tokens >= 1, "cli", "bunsen serve: --max-tokens must be >= 1");
  std::optional<double> temp = a.number("temperature");
  if (!temp) temp = a.number("temp");
  d.temperature = static_cast<float>(temp.value_or(g.temperature.value_or(d.temperature)));
  d.top_p = static_cast<float>(a.number("top-p", g.top_p.value_or(d.top_p)));
  d.top_k = static_cast<int>(a.integer("top-k", g.top_k.value_or(d.top_k)));
  d.min_p = static_cast<float>(a.number("min-p", g.min_p.value_or(d.min_p)));
  check(std::isfinite(d.temperature) && d.temperature >= 0, "cli", "bunsen serve: --temperature must be >= 0");
  check(d.top_p > 0 && d.top_p <= 1, "cli", "bunsen serve: --top-p must be in (0, 1]");
  check(d.top_k >= 0, "cli", "bunsen serve: --top-k must be >= 0");
  check(d.min_p >= 0 && d.min_p <= 1, "cli", "bunsen serve: --min-p must be in [0, 1]");
  d.thinking = parse_bool_flag(a, "thinking");
  d.allow_request_templates = a.flag("allow-request-templates");
  return d;
}

// Engine and KV sizing from the flags, the model and the device.
struct Sizing {
  int64_t batch = 8, step_tokens = 512, ctx = 32768;
  int32_t n_blocks = 0, block_size = 16;
  int64_t kv_bytes = 0;   // both spaces
  // Sliding-window layers' own block space (models that mix them with full layers): 0 blocks = none.
  int32_t n_sliding_blocks = 0;
  DType kv_dtype = DType::kF32;
  std::vector<kv::KvQuantSpec> kv_quant;  // per layer (--kv-quant); empty = none
  std::string kv_label = "f32";           // kv_dtype or the quantization scheme, for the card and /admin
  bool prefix_cache = true;  // --prompt-cache > 0 and no --no-prefix-cache
  uint64_t ram_cache_bytes = 0;  // RAM tier (CUDA): --prompt-cache GB
  std::string ssd_dir;        // --ssd-cache ("" = off)
  uint64_t ssd_max_bytes = 32ull << 30;
  bool ssd_verify = false;
};

constexpr int64_t kDefaultMaxCtx = 32768;
constexpr int64_t kTypicalSeqTokens = 4096;       // what the pool plans per concurrent sequence
constexpr int64_t kCpuKvBudget = int64_t{4} << 30;  // CPU: KV pool bytes beyond one full sequence

// The KV pool gets what the memory budget leaves after the weights and the step workspace: CUDA by
// default 90 % of the device memory free once the weights are loaded; --memory-budget GB counts weights +
// KV + workspace together. A budget that cannot hold one full --ctx sequence shrinks the default context
// (or fails when --ctx was given).
Sizing plan_sizing(const Args& a, const model::ModelConfig& cfg, const std::vector<model::KvLayerSpec>& kv,
                   Device device, int64_t weight_bytes, int64_t workspace_bytes,
                   const std::vector<kv::KvQuantSpec>& kv_quant) {
  Sizing s;
  const bool cuda = device.is_cuda();
  s.batch = a.has("batch") ? a.integer("batch", 8) : a.integer("decode-concurrency", cuda ? 64 : 8);
  check(s.batch >= 1 && s.batch <= 4096, "cli", "bunsen serve: --batch must be in [1, 4096]");
  s.step_tokens = std::max(a.integer("max-num-batched-tokens", cuda ? 2048 : 512), s.batch);
  check(s.step_tokens <= 1 << 20, "cli", "bunsen serve: --max-num-batched-tokens is too large");
  const int64_t model_max = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : kDefaultMaxCtx;
  s.ctx = a.integer("ctx", std::min(model_max, kDefaultMaxCtx));
  check(s.ctx >= 16, "cli", "bunsen serve: --ctx must be >= 16");
  s.kv_dtype = cuda ? DType::kBF16 : DType::kF32;
  const double cache_gb = a.number("prompt-cache", 2.0);
  check(cache_gb >= 0 && cache_gb <= 1e6, "cli", "bunsen serve: --prompt-cache must be a size in GB >= 0");
  s.prefix_cache = cache_gb > 0 && !a.flag("no-prefix-cache");
  s.ram_cache_bytes = s.prefix_cache && cuda ? static_cast<uint64_t>(cache_gb * 1e9) : 0;
  s.ssd_dir = a.str("ssd-cache", "");
  const double ssd_gb = a.number("ssd-cache-max", 32.0);
  check(ssd_gb > 0 && ssd_gb <= 1e6, "cli", "bunsen serve: --ssd-cache-max must be a size in GB > 0");
  s.ssd_max_bytes = static_cast<uint64_t>(ssd_gb * 1073741824.0);
  s.ssd_verify = a.flag("ssd-cache-verify");
  s.kv_quant = kv_quant;
  s.kv_label = kv_quant_label(kv_quant, s.kv_dtype, static_cast<int64_t>(kv.size()));
  // A model mixing sliding-window and full layers: the sliding ones get their own pool sized for the window
  // (engine::sliding_pool_blocks), taken off the budget first; the full layers get the rest by context.
  const int32_t window = engine::sliding_space_window(kv);
  const engine::KvSpace space = window > 0 ? engine::KvSpace::kFull : engine::KvSpace::kAll;
  const std::vector<kv::KvLayerShape> shapes = engine::owned_kv_shapes(kv, space);  // KV-shared layers own none
  // K and V of every layer (codes + scale/bias for quantized layers)
  int64_t per_token = static_cast<int64_t>(
      kv::KvStorage::bytes_per_block(shapes, 1, s.kv_dtype, engine::owned_kv_quant(kv, kv_quant, space)));
  int64_t swa_bytes = 0;
  if (window > 0) {
    const auto swa_per_token = static_cast<int64_t>(
        kv::KvStorage::bytes_per_block(engine::owned_kv_shapes(kv, engine::KvSpace::kSliding), 1, s.kv_dtype,
                                       engine::owned_kv_quant(kv, kv_quant, engine::KvSpace::kSliding)));
    const int64_t n = engine::sliding_pool_blocks(window, s.block_size, s.batch, s.step_tokens);
    const int64_t full_blocks = (s.batch * std::min(s.ctx, kTypicalSeqTokens) + s.block_size - 1) / s.block_size;
    if (n < full_blocks) {  // a saving: the window is shorter than what the pool plans per sequence
      s.n_sliding_blocks = static_cast<int32_t>(n);
      swa_bytes = n * s.block_size * swa_per_token;
    } else {  // one space: sliding layers keep full-length KV like the others
      per_token += swa_per_token;
    }
  }
  int64_t tokens = std::max(s.ctx, s.batch * std::min(s.ctx, kTypicalSeqTokens));
  if (per_token > 0) {
    int64_t kv_budget = 0;
    if (a.has("memory-budget")) {
      const double gb = a.number("memory-budget", 0.0);
      check(std::isfinite(gb) && gb > 0, "cli", "bunsen serve: --memory-budget must be a positive number of GB");
      kv_budget = static_cast<int64_t>(gb * 1e9) - weight_bytes - workspace_bytes - swa_bytes;
      check(kv_budget >= per_token * 16, "cli",
            strfmt("bunsen serve: --memory-budget %.2f GB leaves no room for the KV cache: weights take %.2f GB "
                   "and the workspace %.2f GB",
                   gb, weight_bytes / 1e9, workspace_bytes / 1e9));
      tokens = kv_budget / per_token;
    } else if (cuda) {
      const kernels::MemoryInfo mi = kernels::memory_info(device);
      kv_budget = static_cast<int64_t>(0.9 * static_cast<double>(mi.free_bytes)) - workspace_bytes - swa_bytes;
      tokens = std::max<int64_t>(0, kv_budget / per_token);
    } else {
      tokens = std::max(s.ctx, std::min(tokens, std::max<int64_t>(kCpuKvBudget - swa_bytes, 0) / per_token));
    }
    if (tokens < s.ctx) {
      check(!a.has("ctx"), "cli",
            strfmt("bunsen serve: the KV pool holds %lld tokens, less than --ctx %lld; lower --ctx or raise "
                   "--memory-budget",
                   (long long)tokens, (long long)s.ctx));
      s.ctx = std::max<int64_t>(16, tokens / s.block_size * s.block_size);
      log::warn("serve", strfmt("the KV pool holds %lld tokens: context limited to %lld", (long long)tokens,
                                (long long)s.ctx));
    }
  }
  s.n_blocks = static_cast<int32_t>(std::min<int64_t>((tokens + s.block_size - 1) / s.block_size, INT32_MAX / 2));
  s.kv_bytes = static_cast<int64_t>(s.n_blocks) * s.block_size * per_token + swa_bytes;
  return s;
}

// Step workspace + logits buffers + (hybrid models) linear-attention state slots and their checkpoints +
// (CUDA) scratch/cuBLASLt/graph headroom, for the memory budget.
int64_t workspace_estimate(const model::Model* m, const Args& a, Device device) {
  if (m == nullptr) return 0;
  const bool cuda = device.is_cuda();
  const int64_t batch = a.has("batch") ? a.integer("batch", 8) : a.integer("decode-concurrency", cuda ? 64 : 8);
  const int64_t step = std::max(a.integer("max-num-batched-tokens", cuda ? 2048 : 512), batch);
  const int64_t logits = 2 * batch * m->config().vocab_size * static_cast<int64_t>(sizeof(float));
  int64_t state_per_seq = 0;
  for (const model::KvLayerSpec& l : m->kv_layout()) state_per_seq += static_cast<int64_t>(l.state_bytes());
  const int64_t state = (batch + engine::RunnerOptions{}.state_checkpoints) * state_per_seq;
  return static_cast<int64_t>(m->workspace_bytes(step, batch)) + logits + state + (cuda ? (int64_t{1} << 30) : 0);
}

std::vector<std::vector<int32_t>> replay_scripts(const std::string& path, const text::Tokenizer& tok) {
  std::ifstream in(path);
  check(in.good(), "cli", "bunsen serve: --replay " + path + ": cannot read the file");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  check(j.is_object() && j.contains("texts") && j["texts"].is_array() && !j["texts"].empty(), "cli",
        "bunsen serve: --replay " + path + ": expected JSON {\"texts\": [\"...\", ...]}");
  std::vector<std::vector<int32_t>> scripts;
  for (const auto& t : j["texts"]) {
    check(t.is_string(), "cli", "bunsen serve: --replay: every entry of texts must be a string");
    scripts.push_back(tok.encode(t.get<std::string>(), /*add_special=*/false));
  }
  return scripts;
}

// Many concurrent clients each hold a socket: lift the soft descriptor limit to the hard one.
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct CardInfo {
  const ServeModel* model;
  std::string device, url, backend;
  int64_t weights_bytes;
  const Sizing* sizing;
};

void print_card(const CardInfo& c) {
  const Sizing& s = *c.sizing;
  const std::string kv = s.kv_bytes == 0 ? std::string("none (no model forward)")
                                         : strfmt("%s (%s): %d blocks x %d tokens", human_bytes(static_cast<double>(s.kv_bytes)).c_str(),
                                                  s.kv_label.c_str(), s.n_blocks, s.block_size) +
                                              (s.n_sliding_blocks > 0 ? strfmt(" + %d sliding-window blocks", s.n_sliding_blocks)
                                                                      : std::string()) +
                                              (s.prefix_cache ? ", prefix cache on" : ", prefix cache off");
  std::fprintf(stderr,
               "bunsen %s serve\n"
               "  model    %s%s\n"
               "  dir      %s\n"
               "  device   %s\n"
               "  weights  %s\n"
               "  kv pool  %s\n"
               "  batch    %lld sequences, %lld tokens/step, context %lld tokens\n"
               "  backend  %s\n"
               "  url      %s\n",
               BUNSEN_VERSION, c.model->id.c_str(), c.model->demo ? " (built-in demo: random weights)" : "",
               c.model->dir.c_str(), c.device.c_str(), human_bytes(static_cast<double>(c.weights_bytes)).c_str(),
               kv.c_str(), (long long)s.batch, (long long)s.step_tokens, (long long)s.ctx, c.backend.c_str(),
               c.url.c_str());
  std::fflush(stderr);
}

std::vector<int32_t> xtc_exempt_ids(const std::vector<int32_t>& eos, const text::Tokenizer& tok) {
  std::vector<int32_t> out = eos;
  for (int32_t id : tok.encode("\n", false)) out.push_back(id);
  return out;
}

// Bind address, limits and security flags. Validated before the model loads so flag errors are quick.
http::ServerOptions http_options(const Args& a) {
  http::ServerOptions o;
  o.host = a.str("host", "127.0.0.1");
  int64_t port = a.integer("port", 8080);
  check(port >= 0 && port <= 65535, "cli", "bunsen serve: --port must be in [0, 65535]");
  o.port = static_cast<uint16_t>(port);
  o.io_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 8, 2, 8);
  if (a.has("max-body")) o.max_body_bytes = parse_size(*a.str("max-body"));
  auto seconds = [&](const char* name, std::chrono::milliseconds def) {
    double v = a.number(name, static_cast<double>(def.count()) / 1000.0);
    check(std::isfinite(v) && v > 0 && v <= 86400, "cli", std::string("bunsen serve: --") + name + " must be in (0, 86400]");
    return std::chrono::milliseconds(static_cast<int64_t>(v * 1000.0));
  };
  o.header_timeout = seconds("header-timeout", o.header_timeout);
  o.read_timeout = seconds("read-timeout", o.read_timeout);
  int64_t max_conn = a.integer("max-connections", static_cast<int64_t>(o.max_connections));
  check(max_conn >= 1, "cli", "bunsen serve: --max-connections must be >= 1");
  o.max_connections = static_cast<size_t>(max_conn);
  o.api_key = a.str("api-key", "");
  if (a.has("api-key")) check(!o.api_key.empty(), "cli", "bunsen serve: --api-key is empty");
  o.allowed_origins = split_list(a.str("allowed-origins", ""));
  return o;
}

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

// The engine over a Runner sized by `sz` (the Runner goes to `runner`, which must outlive the engine).
std::unique_ptr<engine::Backend> make_engine(model::Model& model, const Sizing& sz, const std::vector<int32_t>& eos,
                                             const text::Tokenizer& tok, const engine::ModelIdentity& identity,
                                             ThreadPool& pool, std::unique_ptr<engine::Runner>& runner) {
  engine::RunnerOptions ro;
  ro.max_tokens_per_step = sz.step_tokens;
  ro.max_seqs = sz.batch;
  ro.max_logit_rows = sz.batch;
  ro.max_context = sz.ctx;
  ro.block_size = sz.block_size;
  ro.n_blocks = sz.n_blocks;
  ro.kv_dtype = sz.kv_dtype;
  ro.kv_quant = sz.kv_quant;
  ro.sliding_kv = sz.n_sliding_blocks > 0;
  ro.n_sliding_blocks = sz.n_sliding_blocks;
  runner = std::make_unique<engine::Runner>(model, ro, kernels::Context{&pool});
  engine::EngineOptions eo;
  eo.max_batch = sz.batch;
  eo.max_num_batched_tokens = sz.step_tokens;
  eo.default_eos = eos;
  eo.xtc_exempt = xtc_exempt_ids(eos, tok);
  eo.prefix_cache = sz.prefix_cache;
  // The prefix-cache namespace: architecture, KV dtype/scheme, block size, weights, tokenizer, adapters.
  eo.cache_namespace = engine::cache_namespace_of(model.config(), runner->storage().dtype(), runner->block_size(),
                                                  sz.kv_quant, identity);
  eo.ram_cache_bytes = sz.ram_cache_bytes;
  eo.ssd_cache_dir = sz.ssd_dir;
  eo.ssd_cache_max_bytes = sz.ssd_max_bytes;
  eo.ssd_cache_verify = sz.ssd_verify;
  return std::make_unique<engine::Engine>(*runner, eo);
}

// Weights + tokenizer fingerprints of the served model (synthetic models: their shape name; no adapters yet).
engine::ModelIdentity model_identity(const ServeModel& sm, const std::optional<std::string>& synthetic) {
  engine::ModelIdentity id;
  if (synthetic) {
    id.weights = model::fnv1a64("synthetic:" + *synthetic);
    id.tokenizer = model::fnv1a64("byte-tokenizer");
  } else {
    id.weights = model::checkpoint_fingerprint(sm.dir);
    id.tokenizer = model::tokenizer_fingerprint(sm.dir);
  }
  return id;
}

server::AdminInfo admin_info(const Sizing& sz, bool replay, int64_t weights_bytes) {
  server::AdminInfo info;
  info.version = BUNSEN_VERSION;
  info.backend = replay ? "replay" : "engine";
  info.max_context = sz.ctx;
  info.max_batch = sz.batch;
  info.max_num_batched_tokens = sz.step_tokens;
  info.kv_pool_bytes = sz.kv_bytes;
  info.kv_dtype = sz.kv_label;
  info.weights_bytes = weights_bytes;
  return info;
}

// Binds (one-line error when the port is taken), prints the card and the listening line.
void start_listening(http::Server& srv, const CardInfo& card_base, const std::string& host) {
  try {
    srv.start();
  } catch (const Error& e) {
    std::string msg = e.what();
    msg = msg.substr(msg.find(": ") + 2);
    throw Error("http", msg + " (is another server using that port? pick one with --port)");
  }
  CardInfo card = card_base;
  card.url = "http://" + url_host(host) + ":" + std::to_string(srv.port());
  print_card(card);
  if (srv.options().api_key.empty() && (host == "0.0.0.0" || host == "::"))
    std::fprintf(stderr, "bunsen serve: warning: listening on every interface without --api-key\n");
  std::printf("listening on %s\n", card.url.c_str());
  std::fflush(stdout);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::vector<OptionSpec> specs = kSpecs;
  specs.insert(specs.end(), kHidden.begin(), kHidden.end());
  Args a("serve", specs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen serve [MODEL] [--model PATH|QUERY] [options]",
                           "Serve a model over the OpenAI and Anthropic HTTP APIs.", kSpecs).c_str(), stdout);
    return 0;
  }
  check(a.positional().size() <= 1, "cli", "bunsen serve: at most one positional MODEL");
  if (a.has("log-level")) log::set_level(parse_log_level(*a.str("log-level")));
  const Device device = parse_device(a.str("device"), "serve");
  const http::ServerOptions http_opts = http_options(a);
  std::optional<std::string> positional;
  if (!a.positional().empty()) positional = a.positional()[0];
  const std::optional<std::string> synthetic = a.str("synthetic");
  check(!(synthetic && (a.has("model") || positional || a.has("query") || a.has("replay"))), "cli",
        "bunsen serve: --synthetic replaces --model/MODEL/--query/--replay; give only one");
  const ServeModel sm = synthetic ? ServeModel{"", "synthetic:" + *synthetic, false}
                                  : resolve_serve_model(a.str("model"), positional, a.str("query"));
  raise_fd_limit();
  kernels::set_current_device(device);

  // Declaration order is teardown order reversed: server, service, backend, runner, pool, model.
  const bool replay = a.has("replay");
  std::unique_ptr<model::Model> model;
  model::ModelConfig cfg = replay ? model::load_config(sm.dir) : model::ModelConfig{};
  if (synthetic) {
    model = bench::make_synthetic_model(*synthetic, DType::kBF16, device);
    cfg = model->config();
  } else if (!replay) {
    model::LoadOptions lo;
    lo.device = device;
    model = model::load_model(sm.dir, lo);
    cfg = model->config();
  }
  const server::ServiceDefaults defaults = service_defaults(a, cfg);
  auto tok = open_tokenizer(sm.dir, cfg);
  std::optional<text::ChatTemplate> tpl;
  if (!sm.dir.empty() && text::ChatTemplate::available(sm.dir)) tpl = text::ChatTemplate::load(sm.dir);
  const int64_t weight_bytes = model ? static_cast<int64_t>(model->weight_bytes_per_token()) : 0;
  const std::vector<kv::KvQuantSpec> kv_quant =
      model ? resolve_kv_quant(a.str("kv-quant"), sm.dir, cfg.n_layers, device, "serve") : std::vector<kv::KvQuantSpec>{};
  const Sizing sz = plan_sizing(a, cfg, model ? model->kv_layout() : std::vector<model::KvLayerSpec>{}, device,
                                weight_bytes, workspace_estimate(model.get(), a, device), kv_quant);
  ThreadPool pool(static_cast<int>(a.integer("threads", 0)));
  std::unique_ptr<engine::Runner> runner;
  std::unique_ptr<engine::Backend> backend =
      replay ? std::make_unique<engine::ReplayBackend>(replay_scripts(*a.str("replay"), *tok), cfg.vocab_size, sz.ctx)
             : make_engine(*model, sz, eos_ids(cfg, *tok), *tok, model_identity(sm, synthetic), pool, runner);

  server::ModelServiceConfig mc;
  mc.model_id = sm.id;
  mc.model_dir = sm.dir;
  mc.parser_family = parser_family_for(cfg.model_type);
  mc.device = device.str();
  mc.created = server::unix_now();
  mc.defaults = defaults;
  server::ModelService service(mc, *tok, std::move(tpl), *backend);

  const int64_t weights_bytes = synthetic ? static_cast<int64_t>(model->weight_bytes_per_token())
                                          : weights_file_bytes(sm.dir);
  server::AppOptions app{http_opts, admin_info(sz, replay, weights_bytes)};
  std::unique_ptr<http::Server> srv = server::make_server(std::move(app), service);
  http::install_signal_stop(*srv);
  std::string dev = device.str();
  if (device.is_cuda() && !kernels::cuda_device_name(device.index).empty())
    dev += " (" + kernels::cuda_device_name(device.index) + ")";
  start_listening(*srv, {&sm, dev, "", replay ? "replay (test backend)" : "engine", weights_bytes, &sz}, http_opts.host);

  srv->wait();  // SIGINT/SIGTERM: stops accepting, finishes or ends answers, joins the IO threads
  backend->shutdown();
  std::fprintf(stderr, "bunsen serve: stopped\n");
  return 0;
}

}  // namespace bunsen::cli
