// `bunsen benchmark`: prefill and decode throughput of one model (a snapshot directory or a named
// synthetic shape) on the CPU or a CUDA device, with the roofline denominators measured by the tool itself:
// read bandwidth (bandwidth.h on the CPU, a device read kernel on CUDA) for decode, the matmul rate
// (matmul_probe.h) for prefill. Not a unit test: results are reported, never asserted.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/quant.h"
#include "sampling/sampler.h"

namespace bunsen::bench {

struct BenchmarkOptions {
  std::string model_dir;  // or:
  std::string synthetic;  // named shape (synthetic_shapes.h)
  DType dtype = DType::kBF16;  // synthetic weights' dtype
  // Synthetic weights MLX affine-quantized (every Linear, embedding and lm_head), as --quant BITS[:GROUP].
  std::optional<model::QuantSpec> quant;
  Device device{};
  int64_t prompt_len = 512;  // context before the decode measurement (and one prefill figure)
  int64_t gen_len = 128;
  // Further prompt lengths whose prefill alone is timed; empty: none on the CPU, {512, 2048} on CUDA.
  std::vector<int64_t> prefill_lens;
  int threads = 0;  // 0 = all cores
  bool probe = true;  // the bandwidth and matmul-rate probes (--no-probe skips both)
  // Batched decode: for each B, B sequences of prompt_len tokens decode gen_len steps together (one
  // token each per step, greedy argmax on the device, CUDA graphs), as the serving engine runs them.
  std::vector<int64_t> decode_batches;
  // With decode_batches: every timed step also carries a prompt chunk of this many tokens (one more sequence,
  // re-prefilled from position 0 each step), as a serving step mixes decode rows and a prefill chunk.
  int64_t mixed_prefill = 0;
  // The timed batch-1 decode's sampler (default greedy; the prefill figures always take greedy tokens).
  sampling::SamplingParams sampling{.temperature = 0.0f};
};

struct DecodeBatchResult {
  int64_t batch = 0;
  double tok_s = 0;        // batch × steps / seconds
  double ms_per_step = 0;
  int64_t prefill_tokens = 0;  // the prompt chunk each step carried too (mixed_prefill)
};

struct PrefillResult {
  int64_t prompt_len = 0;
  double tok_s = 0;
  double ttft_ms = 0;
};

// A mixture-of-experts model's experts per layer (n_experts 0: dense). The roofline counts top_k of them.
struct MoeShape {
  int64_t n_experts = 0, top_k = 0, d_expert = 0;
};

struct BenchmarkResult {
  std::string model;
  std::string dtype;
  std::string device;
  std::string backend;
  int threads = 0;
  int64_t params = 0;       // matmul weights a decode token multiplies (the head included)
  int64_t head_params = 0;  // the head's (vocab x d_model): a prefill multiplies it once, for the last token
  int64_t prompt_len = 0;
  int64_t gen_len = 0;
  double prefill_tok_s = 0;  // at prompt_len
  double ttft_ms = 0;
  std::vector<PrefillResult> prefill;  // every measured prompt length, ascending
  std::string decode_sampler = "greedy";  // or "temperature T, top_k K, top_p P, min_p M"
  double decode_tok_s = 0;
  // "fused" when the decode ran the one-launch step (kernels::decode_layers_fused, BUNSEN_DECODE_FUSED=1),
  // else "per-op"
  std::string decode_step = "per-op";
  std::vector<DecodeBatchResult> decode_batch;
  double ms_per_token = 0;
  double weight_bytes_per_token = 0;  // MoE: the router and the top_k experts of each MoE layer only
  MoeShape moe;
  double decode_gbps = 0;      // weight bytes per token × decode tok/s
  double probe_read_gbps = 0;  // measured by the probe on the benchmarked device
  double decode_bw_fraction = 0;
  double prefill_gflops = 0;       // prefill_gflops_of(the prompt_len entry)
  double probe_matmul_gflops = 0;  // bf16 matmul rate measured by the probe on the benchmarked device
  int64_t probe_matmul_m = 0, probe_matmul_n = 0, probe_matmul_k = 0;  // the probe's GEMM
  double prefill_matmul_fraction = 0;  // prefill_gflops / probe_matmul_gflops (0 without the probe)
  // The matmul rate of one prefill: 2 × (layer params × prompt_len + head params) FLOPs over its time.
  // Attention's FLOPs are not counted.
  double prefill_gflops_of(const PrefillResult& p) const;
  std::string to_json() const;
  std::string to_text() const;
};

BenchmarkResult run_benchmark(const BenchmarkOptions& opts);

}  // namespace bunsen::bench
