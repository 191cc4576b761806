// `bunsen fit` arithmetic against numbers computed by hand for the Llama-3.1-8B shape (bf16 weights
// 8,030,261,248 params = 16,060,522,496 bytes; KV 2 × 32 × 8 × 128 × 2 = 128 KiB per token), the H200 and
// RTX 4090 datasheet rows, a model that does not fit, tied vs untied embeddings, and /proc/meminfo parsing.
#include <gtest/gtest.h>

#include "bench/fit.h"
#include "bench/fit_probe.h"
#include "core/status.h"
#include "kernels/memory_info.h"

namespace bunsen::bench {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Hand arithmetic, Llama-3.1-8B: V = 128256, d = 4096, L = 32, q = 4096, kv = 1024, f = 14336.
//   per layer = d·q + 2·d·kv + q·d + 3·d·f + 2·d = 218,112,000; params = 2·V·d + L·per layer + d.
constexpr uint64_t kLlamaParams = 8'030'261'248ull;
constexpr uint64_t kLlamaBf16Bytes = 16'060'522'496ull;
// Read per token: all weights but the untied embedding table (2·V·d bytes), plus one of its rows (2·d).
constexpr uint64_t kLlamaReadBytes = 16'060'522'496ull - 1'050'673'152ull + 8'192ull;
// Workspace, 2048 tokens, 1 logits row, bf16 activations, 512 MiB reserve:
//   2048·(4·d + 2·(2d + 2q + 2kv + 3f)) + 4·(d + V) + 512 MiB.
constexpr uint64_t kLlamaWorkspaceGpu = 33'554'432ull + 251'658'240ull + 529'408ull + 536'870'912ull;

FitModel llama8b() { return synthetic_fit_model("llama3.1-8b", DType::kBF16); }

FitTarget sku(const std::string& name) {
  for (const FitTarget& t : datasheet_gpus())
    if (t.name == name) return t;
  ADD_FAILURE() << "no SKU " << name;
  return {};
}

TEST(Fit, Llama8bWeightsAndKvPerToken) {
  const FitModel m = llama8b();
  EXPECT_EQ(m.params, kLlamaParams);
  EXPECT_EQ(m.weight_bytes, kLlamaBf16Bytes);
  EXPECT_NEAR(m.weight_bytes / 1e9, 16.06, 0.005);
  EXPECT_EQ(m.weight_read_bytes, kLlamaReadBytes);
  EXPECT_EQ(kv_bytes_per_token(m, DType::kBF16), 128u * 1024);
  EXPECT_EQ(kv_bytes_per_token(m, DType::kF32), 256u * 1024);
  EXPECT_EQ(m.max_position, 131072);
  EXPECT_EQ(synthetic_fit_model("llama3.1-8b", DType::kF32).weight_bytes, 2 * kLlamaBf16Bytes);
}

TEST(Fit, Llama8bWorkspace) {
  WorkspaceParams p;
  p.step_tokens = 2048;
  p.max_seqs = 1;
  p.act_dtype = DType::kBF16;
  p.reserve_bytes = kGpuReserveBytes;
  EXPECT_EQ(workspace_bytes(llama8b(), p), kLlamaWorkspaceGpu);
}

TEST(Fit, Llama8bOnH200) {
  const FitResult r = compute_fit(llama8b(), sku("H200"), FitRequest{});
  // budget = floor(141 GiB × 0.9) = 136,257,837,465; KV room = budget − weights − workspace.
  EXPECT_EQ(r.budget_bytes, 136'257'837'465ull);
  EXPECT_EQ(r.workspace_bytes, kLlamaWorkspaceGpu);
  EXPECT_EQ(r.kv_budget_bytes, 136'257'837'465ull - kLlamaBf16Bytes - kLlamaWorkspaceGpu);
  EXPECT_EQ(r.kv_dtype, DType::kBF16);
  EXPECT_TRUE(r.weights_fit);
  EXPECT_TRUE(r.fits);
  // 119,374,701,977 B / (16 × 128 KiB) = 56,922 blocks = 910,752 tokens, capped at 131,072.
  EXPECT_EQ(r.max_context, 131072);
  EXPECT_EQ(r.concurrent_seqs, 56922 / 256);  // 4096-token sequences: 256 blocks each
  // 4.8 TB/s × 0.85 / (15,009,857,536 + 4096 × 131,072) B = 262.43 tok/s
  EXPECT_NEAR(r.decode_tok_s, 4.8e12 * 0.85 / (15'009'857'536.0 + 4096.0 * 131072.0), 1e-9);
  EXPECT_NEAR(r.decode_tok_s, 262.43, 0.01);
}

TEST(Fit, Llama8bOnRtx4090AndTooBig) {
  FitRequest req;
  req.batch = 12;
  FitResult r = compute_fit(llama8b(), sku("RTX 4090"), req);
  // budget floor(24 GiB × 0.9) = 23,192,823,398; the workspace grows by 11 logits rows of 4·(d + V) bytes.
  const uint64_t ws = kLlamaWorkspaceGpu + 11 * 4 * (4096 + 128256);
  EXPECT_EQ(r.workspace_bytes, ws);
  const uint64_t kv_room = 23'192'823'398ull - kLlamaBf16Bytes - ws;
  const int64_t blocks = static_cast<int64_t>(kv_room / (16 * 131072));
  EXPECT_EQ(r.max_context, blocks * 16);
  EXPECT_EQ(r.concurrent_seqs, blocks / 256);
  EXPECT_EQ(r.concurrent_seqs, 11);  // 3,005 blocks / 256
  EXPECT_TRUE(r.fits);
  EXPECT_FALSE(r.batch_fits);  // 12 sequences of 4096 do not

  const FitModel f32 = synthetic_fit_model("llama3.1-8b", DType::kF32);  // 32 GB of weights
  r = compute_fit(f32, sku("RTX 4090"), FitRequest{});
  EXPECT_FALSE(r.weights_fit);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.max_context, 0);
  EXPECT_EQ(r.concurrent_seqs, 0);
  EXPECT_EQ(r.kv_budget_bytes, 0u);
}

TEST(Fit, CpuTargetUsesF32KvAndNoReserve) {
  FitTarget cpu;
  cpu.name = "cpu";
  cpu.gpu = false;
  cpu.total_bytes = cpu.free_bytes = 64 * kGiB;
  cpu.budget_fraction = kCpuBudgetFraction;
  cpu.bandwidth_gbps = 100;
  FitRequest req;
  req.ctx = 1000;  // 63 blocks of 16
  const FitResult r = compute_fit(llama8b(), cpu, req);
  EXPECT_EQ(r.kv_dtype, DType::kF32);
  EXPECT_EQ(r.kv_bytes_per_token, 256u * 1024);
  EXPECT_EQ(r.budget_bytes, 48 * kGiB);
  // 512 tokens of f32 activations: 512·(4·d + 4·(2d + 2q + 2kv + 3f)) + 4·(d + V), no reserve.
  const uint64_t ws = 512ull * (4 * 4096 + 4 * 61440) + 4 * (4096 + 128256);
  EXPECT_EQ(r.workspace_bytes, ws);
  const uint64_t blocks = (48 * kGiB - kLlamaBf16Bytes - ws) / (16 * 262144);
  EXPECT_EQ(r.concurrent_seqs, static_cast<int64_t>(blocks / 63));
  EXPECT_NEAR(r.decode_tok_s, 100e9 / (kLlamaReadBytes + 1000.0 * 262144), 1e-9);
}

TEST(Fit, TiedEmbeddingsAreReadWhole) {
  const FitModel tied = synthetic_fit_model("qwen3-0.6b", DType::kBF16);
  EXPECT_EQ(tied.weight_read_bytes, tied.weight_bytes);
  model::ModelConfig cfg;
  cfg.vocab_size = 10;
  const std::vector<std::pair<std::string, uint64_t>> untied = {
      {"model.embed_tokens.weight", 1000}, {"model.layers.0.mlp.up_proj.weight", 500}, {"lm_head.weight", 1000}};
  const FitModel m = fit_model_from_tensors(cfg, untied, "x");
  EXPECT_EQ(m.weight_bytes, 2500u);
  EXPECT_EQ(m.weight_read_bytes, 1600u);  // 2500 − 1000 + one of 10 rows
  EXPECT_EQ(m.weight_source, "safetensors");
  const FitModel t = fit_model_from_tensors(cfg, {untied[0], untied[1]}, "x");
  EXPECT_EQ(t.weight_read_bytes, 1500u);
}

TEST(Fit, UnknownFamilyCountsALlamaStack) {
  model::ModelConfig cfg = model::parse_config(
      R"({"model_type":"llama","vocab_size":100,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,
          "num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":64})",
      "test");
  const FitModel known = fit_model_from_config(cfg, DType::kF32, "a");
  cfg.model_type = "not-a-family";
  const FitModel generic = fit_model_from_config(cfg, DType::kF32, "b");
  // 2·100·8 + 2·(8·8 + 2·8·4 + 8·8 + 3·8·16 + 2·8) + 8 = 1600 + 2·(64 + 64 + 64 + 384 + 16) + 8 = 2792
  EXPECT_EQ(known.params, 2792u);
  EXPECT_EQ(generic.params, known.params);
  EXPECT_EQ(generic.weight_bytes, 4 * 2792u);
}

// Qwen3.5-4B (hybrid): 8 of 32 layers hold paged KV (2 × 8 × 4 × 256 × 2 B = 32 KiB per token in bf16); the
// 24 DeltaNet layers hold, per sequence, a conv state of (2·16·128 + 32·128) × 3 f32 = 98,304 B and a
// recurrent state of 32 × 128 × 128 f32 = 2,097,152 B: 24 × 2,195,456 = 52,690,944 B per sequence.
TEST(Fit, HybridCountsAttentionKvAndStateSlots) {
  const FitModel m = synthetic_fit_model("qwen3.5-4b", DType::kBF16);
  EXPECT_EQ(m.n_kv_layers, 8);
  EXPECT_EQ(m.state_bytes_per_seq, 52'690'944ull);
  EXPECT_EQ(kv_bytes_per_token(m, DType::kBF16), 32u * 1024);
  FitRequest req;
  req.ctx = 4096;
  const FitResult r = compute_fit(m, sku("H200"), req);
  EXPECT_EQ(r.state_bytes_per_seq, 52'690'944ull);
  EXPECT_EQ(r.concurrent_seqs, static_cast<int64_t>(r.kv_budget_bytes / (4096ull * 32768 + 52'690'944ull)));
  const int64_t blocks = static_cast<int64_t>((r.kv_budget_bytes - 52'690'944ull) / (16ull * 32768));
  EXPECT_EQ(r.max_context, std::min<int64_t>(blocks * 16, 262144));
}

// Gemma-3-1B: 26 layers, 1 kv head × 256, window 512, every 6th layer full (4 full, 22 sliding). Full
// layers: 2 × 4 × 256 × 2 = 4 KiB per token of context; sliding ones 2 × 22 × 256 × 2 = 22,528 bytes per
// token of min(ctx, window + step) (a step of 2048 tokens on GPUs).
TEST(Fit, SlidingLayersCountTheWindowNotTheContext) {
  const FitModel m = synthetic_fit_model("gemma3-1b", DType::kBF16);
  EXPECT_EQ(m.swa_window, 512);
  EXPECT_EQ(kv_bytes_per_token(m, DType::kBF16), 4096u);
  EXPECT_EQ(sliding_kv_bytes_per_token(m, DType::kBF16), 22528u);
  FitRequest req;
  req.ctx = 32768;
  const FitResult r = compute_fit(m, sku("H200"), req);
  const uint64_t swa_seq = (2560ull / 16) * 16 * 22528;  // window + step = 2560 tokens
  EXPECT_EQ(r.sliding_kv_bytes_per_seq, swa_seq);
  EXPECT_EQ(r.concurrent_seqs, static_cast<int64_t>(r.kv_budget_bytes / (32768ull * 4096 + swa_seq)));
  const int64_t blocks = static_cast<int64_t>((r.kv_budget_bytes - swa_seq) / (16ull * 4096));
  EXPECT_EQ(r.max_context, std::min<int64_t>(blocks * 16, m.max_position));
  req.ctx = 100;  // shorter than the window: sliding layers hold the whole context
  EXPECT_EQ(compute_fit(m, sku("H200"), req).sliding_kv_bytes_per_seq, 7ull * 16 * 22528);
  // Llama (no sliding layers) is unchanged: everything is full-length KV.
  EXPECT_EQ(llama8b().swa_row_elems, 0u);
}

TEST(Fit, BadRequestIsAnError) {
  FitRequest req;
  req.ctx = 0;
  EXPECT_THROW(compute_fit(llama8b(), sku("H200"), req), Error);
}

TEST(MemoryInfo, ParsesProcMeminfo) {
  const kernels::MemoryInfo m =
      kernels::parse_meminfo("MemTotal:       16384 kB\nMemFree:         1024 kB\nMemAvailable:    8192 kB\n");
  EXPECT_EQ(m.total_bytes, 16384u * 1024);
  EXPECT_EQ(m.free_bytes, 8192u * 1024);
  EXPECT_EQ(kernels::parse_meminfo("MemTotal: 4 kB\nMemFree: 2 kB\n").free_bytes, 2048u);
  EXPECT_EQ(kernels::parse_meminfo("SwapTotal: 4 kB\n").total_bytes, 0u);
  EXPECT_GT(kernels::memory_info(Device::cpu()).total_bytes, 0u);
}

}  // namespace
}  // namespace bunsen::bench
