// `bunsen fit` output: a text table per group of targets, or one JSON object (see fit_probe.h).
#include <nlohmann/json.hpp>

#include "bench/fit_probe.h"
#include "core/status.h"

namespace bunsen::bench {
namespace {

double gib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(uint64_t{1} << 30); }
double gb(double b) { return b / 1e9; }

std::string bytes_text(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return strfmt("%.2f GiB", gib(b));
  if (b >= (uint64_t{1} << 20)) return strfmt("%.1f MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return strfmt("%.1f KiB", static_cast<double>(b) / 1024);
  return strfmt("%llu B", static_cast<unsigned long long>(b));
}

std::string table(const std::vector<FitResult>& rows, const FitRequest& req) {
  std::string s = strfmt("  %-28s %10s %10s %11s %5s %9s %9s %10s\n", "target", "memory", "budget", "weights+ws",
                         "fits", "max ctx", strfmt("seqs@%lld", static_cast<long long>(req.ctx)).c_str(),
                         "tok/s b=1");
  for (const FitResult& r : rows) {
    const std::string tok = r.decode_tok_s > 0 ? strfmt("%.1f", r.decode_tok_s) : std::string("-");
    s += strfmt("  %-28s %10s %10s %11s %5s %9lld %9lld %10s\n", r.target.substr(0, 28).c_str(),
                bytes_text(r.total_bytes).c_str(), bytes_text(r.budget_bytes).c_str(),
                bytes_text(r.weight_bytes + r.workspace_bytes).c_str(), r.fits ? "yes" : "no",
                static_cast<long long>(r.max_context), static_cast<long long>(r.concurrent_seqs), tok.c_str());
  }
  return s;
}

nlohmann::json result_json(const FitResult& r) {
  return {{"target", r.target},
          {"gpu", r.gpu},
          {"kv_dtype", dtype_name(r.kv_dtype)},
          {"total_bytes", r.total_bytes},
          {"budget_bytes", r.budget_bytes},
          {"weight_bytes", r.weight_bytes},
          {"workspace_bytes", r.workspace_bytes},
          {"kv_bytes_per_token", r.kv_bytes_per_token},
          {"sliding_kv_bytes_per_seq", r.sliding_kv_bytes_per_seq},
          {"kv_budget_bytes", r.kv_budget_bytes},
          {"weights_fit", r.weights_fit},
          {"fits", r.fits},
          {"batch_fits", r.batch_fits},
          {"max_context", r.max_context},
          {"concurrent_seqs", r.concurrent_seqs},
          {"bandwidth_gbps", r.bandwidth_gbps},
          {"efficiency", r.efficiency},
          {"bytes_per_token", r.bytes_per_token},
          {"decode_tok_s", r.decode_tok_s}};
}

}  // namespace

std::string FitReport::to_text() const {
  const FitModel& m = model;
  std::string s = strfmt("model %s: %lld layers, d_model %lld, %lld heads / %lld kv heads × %lld, vocab %lld, "
                         "max context %lld\n",
                         m.name.c_str(), static_cast<long long>(m.n_layers), static_cast<long long>(m.d_model),
                         static_cast<long long>(m.n_heads), static_cast<long long>(m.n_kv_heads),
                         static_cast<long long>(m.head_dim), static_cast<long long>(m.vocab_size),
                         static_cast<long long>(m.max_position));
  s += strfmt("  weights %.2f GB (%s), %.2f GB read per decoded token\n", gb(static_cast<double>(m.weight_bytes)),
              m.weight_source.c_str(), gb(static_cast<double>(m.weight_read_bytes)));
  s += strfmt("  KV cache per token: %s bf16 (GPU), %s f32 (CPU)\n",
              bytes_text(kv_bytes_per_token(m, DType::kBF16)).c_str(),
              bytes_text(kv_bytes_per_token(m, DType::kF32)).c_str());
  s += strfmt("  request: context %lld tokens, batch %lld", static_cast<long long>(request.ctx),
              static_cast<long long>(request.batch));
  if (m.max_position > 0 && request.ctx > m.max_position)
    s += strfmt("  (warning: beyond the model's max_position_embeddings %lld)", static_cast<long long>(m.max_position));
  s += "\n\nthis machine (budget: 90 % of free GPU memory, 75 % of RAM; bandwidth measured):\n";
  s += machine.empty() ? "  (no targets)\n" : table(machine, request);
  for (const FitResult& r : machine)
    if (request.batch > 1)
      s += strfmt("  %s: batch %lld × %lld tokens %s\n", r.target.c_str(), static_cast<long long>(request.batch),
                  static_cast<long long>(request.ctx), r.batch_fits ? "fits" : "does not fit");
  if (!skus.empty()) {
    s += strfmt("\ndatasheet GPUs (budget: 90 %% of memory; bandwidth × %.2f efficiency):\n", kDatasheetEfficiency);
    s += table(skus, request);
  }
  s += "\ntok/s b=1 = bandwidth / (weights read per token + KV of the context); workspace includes a "
       "step of up to 2048 (GPU) / 512 (CPU) tokens";
  return s;
}

std::string FitReport::to_json() const {
  nlohmann::json j;
  j["model"] = {{"name", model.name},
                {"weight_source", model.weight_source},
                {"n_layers", model.n_layers},
                {"n_heads", model.n_heads},
                {"n_kv_heads", model.n_kv_heads},
                {"head_dim", model.head_dim},
                {"d_model", model.d_model},
                {"d_ff", model.d_ff},
                {"vocab_size", model.vocab_size},
                {"max_position_embeddings", model.max_position},
                {"params", model.params},
                {"weight_bytes", model.weight_bytes},
                {"weight_read_bytes", model.weight_read_bytes},
                {"kv_bytes_per_token_bf16", kv_bytes_per_token(model, DType::kBF16)},
                {"kv_bytes_per_token_f32", kv_bytes_per_token(model, DType::kF32)}};
  j["request"] = {{"ctx", request.ctx}, {"batch", request.batch}, {"block_size", request.block_size}};
  j["machine"] = nlohmann::json::array();
  for (const FitResult& r : machine) j["machine"].push_back(result_json(r));
  j["skus"] = nlohmann::json::array();
  for (const FitResult& r : skus) j["skus"].push_back(result_json(r));
  j["datasheet_efficiency"] = kDatasheetEfficiency;
  return j.dump();
}

}  // namespace bunsen::bench
