// run_benchmark(): warm-up, prefill-only runs at each extra prompt length, then one prompt of prompt_len
// tokens and gen_len greedy decode steps (EOS ignored), all timed by the generator's own stats (a CUDA
// step ends with its logits on the host, so the times include the device work).
#include "bench/benchmark.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bandwidth.h"
#include "bench/matmul_probe.h"
#include "bench/synthetic_shapes.h"
#include "core/env.h"
#include "core/status.h"
#include "engine/generator.h"
#include "kernels/decode_fused.h"
#include "kernels/device.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::bench {
namespace {

std::vector<int32_t> bench_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(
        model::splitmix64(0xbe0c4ull + static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return ids;
}

// MoE configs (qwen3_moe, gemma4 26B-A4B, qwen3_next): experts per layer and those a token uses, from the
// raw config keys those families read; {0, 0} for dense models.
MoeShape moe_shape(const model::ModelConfig& c) {
  if (c.hparams_json.empty()) return {};
  const auto j = nlohmann::json::parse(c.hparams_json);
  auto num = [&](const char* k) { return j.contains(k) && j.at(k).is_number_integer() ? j.at(k).get<int64_t>() : 0; };
  MoeShape m{num("num_experts") ? num("num_experts") : num("num_local_experts"),
             num("num_experts_per_tok") ? num("num_experts_per_tok") : num("top_k_experts"),
             num("moe_intermediate_size")};
  return m.n_experts > 0 && m.top_k > 0 ? m : MoeShape{};
}

// Matmul weights a token multiplies (MoE: the router and the top-k experts in place of the dense MLP).
int64_t matmul_params(const model::ModelConfig& c) {
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  const MoeShape moe = moe_shape(c);
  const int64_t mlp = moe.n_experts > 0 ? c.d_model * (moe.n_experts + 3 * moe.top_k * moe.d_expert)
                                        : 3 * c.d_model * c.d_ff;
  const int64_t per_layer = c.d_model * (q + 2 * kv) + q * c.d_model + mlp;
  return per_layer * c.n_layers + c.vocab_size * c.d_model;
}

// Prompt lengths whose prefill is reported, ascending and unique (prompt_len always among them).
std::vector<int64_t> prefill_lengths(const BenchmarkOptions& o) {
  std::vector<int64_t> lens = o.prefill_lens;
  if (lens.empty() && o.device.is_cuda()) lens = {512, 2048};
  lens.push_back(o.prompt_len);
  for (int64_t l : lens) check(l > 0, "bench", "prefill lengths must be > 0");
  std::sort(lens.begin(), lens.end());
  lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
  return lens;
}

std::unique_ptr<model::Model> open_model(const BenchmarkOptions& o, BenchmarkResult& r) {
  if (!o.synthetic.empty()) {
    r.model = "synthetic:" + o.synthetic;
    r.dtype = o.quant ? strfmt("q%d/g%d", o.quant->bits, o.quant->group_size) : dtype_name(o.dtype);
    return make_synthetic_model(o.synthetic, o.dtype, o.device, o.quant);
  }
  model::LoadOptions lo;
  lo.device = o.device;
  auto m = model::load_model(o.model_dir, lo);
  r.model = o.model_dir;
  r.dtype = dtype_name(m->config().torch_dtype);
  return m;
}

}  // namespace

// B sequences prefilled one by one, then decoded together for gen_len steps (8 untimed warm-up steps
// capture the CUDA graph of the bucket first).
DecodeBatchResult decode_batch(model::Model& m, const BenchmarkOptions& o, int64_t batch, ThreadPool& pool) {
  check(batch >= 1 && batch <= 4096, "benchmark", "--decode-batch sizes must be in [1, 4096]");
  const int64_t mixed = o.mixed_prefill;
  check(mixed >= 0 && mixed <= 16384, "benchmark", "--mixed-prefill must be in [0, 16384]");
  const int64_t vocab = m.config().vocab_size, steps = std::max<int64_t>(o.gen_len, 1), warm = 8;
  engine::RunnerOptions ro;
  ro.max_seqs = batch + (mixed > 0 ? 1 : 0);
  ro.max_logit_rows = ro.max_seqs;
  ro.max_context = std::max(o.prompt_len + steps + warm + 1, mixed);
  ro.max_tokens_per_step = std::max<int64_t>(std::min<int64_t>(o.prompt_len, 2048), batch + mixed);
  engine::Runner runner(m, ro, kernels::Context{&pool});
  std::vector<kv::BlockTable> tables(static_cast<size_t>(ro.max_seqs), kv::BlockTable(runner.block_size()));
  const auto prompt = bench_prompt(std::max(o.prompt_len, mixed), vocab);
  for (int64_t s = 0; s < ro.max_seqs; ++s) {
    kv::BlockTable& t = tables[static_cast<size_t>(s)];
    std::vector<kv::BlockId> ids;
    check(runner.pool().allocate_n(t.blocks_needed(ro.max_context), ids), "benchmark", "out of KV blocks");
    for (auto id : ids) t.append(id);
    if (s == batch) break;  // the mixed-in prompt sequence: prefilled inside every step
    for (int64_t start = 0; start < o.prompt_len; start += ro.max_tokens_per_step) {
      const int64_t n = std::min(ro.max_tokens_per_step, o.prompt_len - start);
      engine::SeqChunk c{&t, prompt.data() + start, n, start, engine::SeqChunk::Logits::kLast};
      runner.step({&c, 1});
    }
  }
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  std::vector<engine::SeqChunk> chunks(static_cast<size_t>(ro.max_seqs));
  const bool pipeline = mixed == 0 && env_flag("BUNSEN_DECODE_PIPELINE", o.device.is_cuda());
  std::optional<engine::Runner::PendingTokens> pending;
  auto take = [&](const engine::Runner::PendingTokens& p) {
    std::span<const int32_t> next = runner.wait_tokens(p);
    for (int64_t s = 0; s < batch; ++s) tokens[s] = std::max(next[s], 0);
  };
  auto step = [&](int64_t i) {
    for (int64_t s = 0; s < batch; ++s) {
      chunks[s] = {&tables[s], &tokens[s], 1, o.prompt_len + i, engine::SeqChunk::Logits::kLast};
    }
    if (mixed > 0) chunks[batch] = {&tables[batch], prompt.data(), mixed, 0, engine::SeqChunk::Logits::kLast};
    if (!pipeline) return take(runner.enqueue_tokens(chunks));
    // Pipelined as generate(): step i is queued, its tokens fed on the device from step i - 1, before the
    // host waits for step i - 1.
    const engine::Runner::PendingTokens queued = runner.enqueue_tokens(chunks, /*feed=*/pending.has_value());
    if (pending) take(*pending);
    pending = queued;
  };
  for (int64_t s = 0; s < batch; ++s) tokens[s] = prompt[static_cast<size_t>(s) % prompt.size()];
  for (int64_t i = 0; i < warm; ++i) step(i);
  // BUNSEN_PROFILE_RANGE=1: only the timed steps are in the profiler's range (ncu --profile-from-start off).
  const bool profile = env_flag("BUNSEN_PROFILE_RANGE", false) && o.device.is_cuda();
  if (profile) kernels::profiler_range(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step(warm + i);
  if (pending) take(*pending);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (profile) kernels::profiler_range(false);
  for (auto& t : tables) t.release_all(runner.pool());
  return {batch, static_cast<double>(batch * steps) / secs, 1000.0 * secs / static_cast<double>(steps), mixed};
}

BenchmarkResult run_benchmark(const BenchmarkOptions& o) {
  check(o.prompt_len > 0 && o.gen_len > 0, "bench", "--prompt-len and --gen must be > 0");
  const bool cuda = o.device.is_cuda();
  kernels::set_current_device(o.device);
  ThreadPool pool(o.threads);
  BenchmarkResult r;
  std::unique_ptr<model::Model> m = open_model(o, r);
  const model::ModelConfig& cfg = m->config();
  r.device = o.device.str();
  r.threads = pool.size();
  r.backend = cuda ? kernels::cuda_device_name(o.device.index) : kernels::cpu_backend_name();
  r.prompt_len = o.prompt_len;
  r.gen_len = o.gen_len;
  r.params = matmul_params(cfg);
  r.head_params = cfg.vocab_size * cfg.d_model;
  r.moe = moe_shape(cfg);
  r.weight_bytes_per_token = static_cast<double>(m->weight_bytes_per_token());
  // The probe runs before and after the timed work and the larger reading is the denominator: on a shared
  // host the available bandwidth drifts, and a roofline fraction must never credit a dip in the probe.
  auto probe = [&] {
    if (!o.probe) return;
    const double gbps = cuda ? kernels::device_read_bandwidth_gbps(o.device) : measure_read_bandwidth(pool).read_gbps;
    r.probe_read_gbps = std::max(r.probe_read_gbps, gbps);
  };
  probe();
  if (o.probe) {  // before the model's buffers exist: the probe's operands are ~384 MB on CUDA
    const MatmulRateResult mm = measure_matmul_rate(o.device, pool);
    r.probe_matmul_gflops = mm.gflops;
    r.probe_matmul_m = mm.shape.m;
    r.probe_matmul_n = mm.shape.n;
    r.probe_matmul_k = mm.shape.k;
  }

  const std::vector<int64_t> lens = prefill_lengths(o);
  const int64_t longest = lens.back();
  engine::RunnerOptions ro;
  ro.max_context =
      std::max(longest + 1, o.prompt_len + o.gen_len);  // + 1: a prefill-only run samples one token
  ro.max_tokens_per_step = std::min<int64_t>(longest, cuda ? 2048 : 512);
  engine::Runner runner(*m, ro, kernels::Context{&pool});
  engine::GenerateOptions go;
  go.sampling.temperature = 0;
  go.max_tokens = 4;  // warm-up: pages weights in, starts threads
  const int64_t fused_before = kernels::fused_decode_launches();  // the warm-up captures the decode graph
  auto prompt = bench_prompt(longest, cfg.vocab_size);
  engine::generate(runner, std::span<const int32_t>(prompt.data(), std::min<size_t>(prompt.size(), 16)), go);
  go.max_tokens = 1;
  for (int pass = cuda ? 0 : 1; pass < 2; ++pass) {  // on CUDA a first pass meets every GEMM shape once
    r.prefill.clear();
    for (int64_t len : lens) {
      if (len == o.prompt_len && pass == 1) continue;  // measured with the decode run below
      auto g =
          engine::generate(runner, std::span<const int32_t>(prompt.data(), static_cast<size_t>(len)), go);
      r.prefill.push_back({len, g.stats.prefill_tok_s(), 1000.0 * g.stats.prefill_seconds});
    }
  }
  go.max_tokens = o.gen_len;
  go.sampling = o.sampling;
  if (!o.sampling.greedy())
    r.decode_sampler = strfmt("temperature %g, top_k %d, top_p %g, min_p %g", o.sampling.temperature,
                              o.sampling.top_k, o.sampling.top_p, o.sampling.min_p);
  engine::GenerateResult g = engine::generate(
      runner, std::span<const int32_t>(prompt.data(), static_cast<size_t>(o.prompt_len)), go);
  r.prefill_tok_s = g.stats.prefill_tok_s();
  r.ttft_ms = 1000.0 * g.stats.prefill_seconds;
  r.prefill.push_back({o.prompt_len, r.prefill_tok_s, r.ttft_ms});
  std::sort(r.prefill.begin(), r.prefill.end(),
            [](const PrefillResult& a, const PrefillResult& b) { return a.prompt_len < b.prompt_len; });
  r.decode_tok_s = g.stats.decode_tok_s();
  r.decode_step = kernels::fused_decode_launches() > fused_before ? "fused" : "per-op";
  r.ms_per_token = g.stats.ms_per_token();
  for (int64_t b : o.decode_batches) r.decode_batch.push_back(decode_batch(*m, o, b, pool));
  probe();
  r.decode_gbps = r.weight_bytes_per_token * r.decode_tok_s / 1e9;
  r.decode_bw_fraction = r.probe_read_gbps > 0 ? r.decode_gbps / r.probe_read_gbps : 0;
  r.prefill_gflops = r.prefill_gflops_of({o.prompt_len, r.prefill_tok_s, r.ttft_ms});
  r.prefill_matmul_fraction = r.probe_matmul_gflops > 0 ? r.prefill_gflops / r.probe_matmul_gflops : 0;
  return r;
}

double BenchmarkResult::prefill_gflops_of(const PrefillResult& p) const {
  if (p.prompt_len <= 0) return 0;
  const double per_token = static_cast<double>(params - head_params) +
                           static_cast<double>(head_params) / static_cast<double>(p.prompt_len);
  return 2.0 * per_token * p.tok_s / 1e9;
}

std::string BenchmarkResult::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["dtype"] = dtype;
  j["device"] = device;
  j["backend"] = backend;
  j["threads"] = threads;
  j["matmul_params"] = params;
  j["prompt_len"] = prompt_len;
  j["gen_len"] = gen_len;
  j["prefill_tok_s"] = prefill_tok_s;
  j["ttft_ms"] = ttft_ms;
  nlohmann::ordered_json pp = nlohmann::ordered_json::array();
  for (const PrefillResult& p : prefill) {
    const double gflops = prefill_gflops_of(p);
    nlohmann::ordered_json e = {
        {"prompt_len", p.prompt_len}, {"tok_s", p.tok_s}, {"ttft_ms", p.ttft_ms}, {"gflops", gflops}};
    if (probe_matmul_gflops > 0) e["matmul_fraction"] = gflops / probe_matmul_gflops;
    pp.push_back(e);
  }
  j["prefill"] = pp;
  nlohmann::ordered_json db = nlohmann::ordered_json::array();
  for (const DecodeBatchResult& d : decode_batch)
    db.push_back({{"batch", d.batch}, {"prefill_tokens", d.prefill_tokens}, {"tok_s", d.tok_s}, {"ms_per_step", d.ms_per_step}});
  if (!decode_batch.empty()) j["decode_batch"] = db;
  j["prefill_gflops"] = prefill_gflops;
  j["probe_matmul_gflops"] = probe_matmul_gflops;
  if (probe_matmul_gflops > 0) j["probe_matmul_shape"] = {probe_matmul_m, probe_matmul_n, probe_matmul_k};
  j["prefill_matmul_fraction"] = prefill_matmul_fraction;
  j["decode_sampler"] = decode_sampler;
  j["decode_tok_s"] = decode_tok_s;
  j["decode_step"] = decode_step;
  j["ms_per_token"] = ms_per_token;
  j["weight_bytes_per_token"] = weight_bytes_per_token;
  j["decode_gbps"] = decode_gbps;
  j["probe_read_gbps"] = probe_read_gbps;
  j["decode_bandwidth_fraction"] = decode_bw_fraction;
  if (moe.n_experts > 0) j["roofline_experts"] = {{"active", moe.top_k}, {"total", moe.n_experts}};
  return j.dump(2);
}

std::string BenchmarkResult::to_text() const {
  std::string s = strfmt("model      %s (%s, %s %s, %d threads)\n", model.c_str(), dtype.c_str(),
                         device.c_str(), backend.c_str(), threads);
  for (const PrefillResult& p : prefill) {
    const double gflops = prefill_gflops_of(p);
    s += strfmt("prefill    pp%lld: %.1f tok/s, TTFT %.1f ms, %.1f GFLOP/s", (long long)p.prompt_len, p.tok_s,
                p.ttft_ms, gflops);
    s += probe_matmul_gflops > 0
             ? strfmt(" = %.0f%% of the matmul rate\n", 100.0 * gflops / probe_matmul_gflops)
             : std::string("\n");
  }
  if (probe_matmul_gflops > 0)
    s += strfmt("matmul     %.1f GFLOP/s measured by the probe (bf16 weights, %lld x %lld x %lld)\n",
                probe_matmul_gflops, (long long)probe_matmul_m, (long long)probe_matmul_n,
                (long long)probe_matmul_k);
  return s + strfmt(
                 "decode     tg%lld after %lld (%s, %s step): %.2f tok/s, %.2f ms/token\n"
                 "roofline   %.1f MB/token%s -> %.2f GB/s = %.0f%% of the %.2f GB/s read bandwidth measured "
                 "by the "
                 "probe\n",
                 (long long)gen_len, (long long)prompt_len, decode_sampler.c_str(), decode_step.c_str(),
                 decode_tok_s, ms_per_token, weight_bytes_per_token / 1e6,
                 moe.n_experts > 0 ? strfmt(" (active experts only: %lld of %lld per MoE layer)",
                                            (long long)moe.top_k, (long long)moe.n_experts)
                                         .c_str()
                                   : "",
                 decode_gbps, 100.0 * decode_bw_fraction, probe_read_gbps);
}

}  // namespace bunsen::bench
