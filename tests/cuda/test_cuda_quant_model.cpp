// A quantized llama checkpoint end to end on CUDA: a tiny model quantized module by module with
// quantize_affine (mixed bits 2-8 and group sizes, a float override, quantized embedding and lm_head, bf16
// scales as mlx-lm writes them), saved as safetensors + config.json and loaded with load_model on the CPU
// and on cuda:0. Prompt logits (prefill: the dequantize + cuBLASLt path) and teacher-forced decode logits
// (one token per step: the GEMV path, from CUDA graphs) must match the CPU's: cosine >= 0.999 per row and
// the same argmax wherever the CPU's top-1 wins by a clear margin.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "../support/scratch_dir.h"
#include "cuda_test_util.h"
#include "engine/generator.h"
#include "engine/runner.h"
#include "golden_cuda_util.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace bunsen::model {
namespace {

using kernels::test::CudaTest;

// d_model 256 (group 128 fits), d_ff 384, head_dim 64.
constexpr const char* kConfig = R"({"model_type":"llama","vocab_size":300,"hidden_size":256,
  "intermediate_size":384,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
  "tie_word_embeddings":false,"rms_norm_eps":1e-5,
  "quantization":{"group_size":64,"bits":4,"mode":"affine",
    "model.layers.0.self_attn.q_proj":{"group_size":128,"bits":8},
    "model.layers.0.mlp.down_proj":{"group_size":32,"bits":6},
    "model.layers.1.self_attn.k_proj":{"group_size":64,"bits":3},
    "model.layers.1.mlp.up_proj":{"group_size":64,"bits":5},
    "model.layers.1.mlp.gate_proj":{"group_size":32,"bits":2},
    "model.layers.1.self_attn.o_proj":false,
    "model.embed_tokens":{"group_size":64,"bits":6},
    "lm_head":{"group_size":128,"bits":8}}})";

constexpr double kMinCosine = 0.999;
constexpr double kClearMargin = 0.1;  // top-1 minus top-2, in units of the row's standard deviation

// Writes the quantized checkpoint of the synthetic weights into dir.
void write_checkpoint(const std::string& dir) {
  const ModelConfig cfg = parse_config(kConfig, "quant model test");
  std::vector<OwnedTensor> keep;
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& s : expected_tensors(cfg)) {
    OwnedTensor t = synthetic_tensor(s.name, s.shape, DType::kF32, 23);
    const std::string prefix = s.name.substr(0, s.name.size() - std::string(".weight").size());
    const std::optional<QuantSpec> spec = s.shape.size() == 2 ? cfg.quant_spec(prefix) : std::nullopt;
    if (!spec) {
      OwnedTensor b = OwnedTensor::make(DType::kBF16, s.shape);
      for (int64_t i = 0; i < t.tensor.numel(); ++i)
        b.tensor.ptr<uint16_t>()[i] = f32_to_bf16(t.tensor.ptr<float>()[i]);
      list.emplace_back(s.name, b.tensor);
      keep.push_back(std::move(b));
      continue;
    }
    const int64_t rows = s.shape[0], cols = s.shape[1], groups = cols / spec->group_size;
    OwnedTensor packed = OwnedTensor::make(DType::kU32, {rows, packed_cols(cols, spec->bits)});
    std::vector<float> sc(static_cast<size_t>(rows * groups)), bi(sc.size());
    quantize_affine(t.tensor.ptr<float>(), rows, cols, *spec, packed.tensor.ptr<uint32_t>(), sc.data(), bi.data());
    OwnedTensor s16 = OwnedTensor::make(DType::kBF16, {rows, groups}), b16 = OwnedTensor::make(DType::kBF16, {rows, groups});
    for (size_t i = 0; i < sc.size(); ++i) {
      s16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(sc[i]);
      b16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(bi[i]);
    }
    list.emplace_back(s.name, packed.tensor);
    list.emplace_back(prefix + ".scales", s16.tensor);
    list.emplace_back(prefix + ".biases", b16.tensor);
    keep.push_back(std::move(packed));
    keep.push_back(std::move(s16));
    keep.push_back(std::move(b16));
  }
  write_safetensors(dir + "/model.safetensors", list);
  std::ofstream(dir + "/config.json") << kConfig;
}

std::unique_ptr<Model> load(const std::string& dir, Device device) {
  LoadOptions lo;
  lo.device = device;
  lo.progress = LoadOptions::Progress::kOff;
  return load_model(dir, lo);
}

engine::RunnerOptions runner_options(int64_t tokens) {
  engine::RunnerOptions ro;
  ro.max_context = tokens + 8;
  ro.max_tokens_per_step = tokens;
  ro.max_logit_rows = tokens;
  ro.block_size = 4;
  return ro;
}

// Logits [tokens.size() - prompt, vocab] of single-token decode steps after a prefill of `prompt` tokens,
// teacher forced with `tokens`.
std::vector<float> decode_logits(engine::Runner& runner, const std::vector<int32_t>& tokens, int64_t prompt) {
  const int64_t vocab = runner.model().config().vocab_size, total = static_cast<int64_t>(tokens.size());
  kv::BlockTable table(runner.block_size());
  std::vector<kv::BlockId> blocks;
  check(runner.pool().allocate_n(table.blocks_needed(total), blocks), "test", "out of KV blocks");
  for (auto b : blocks) table.append(b);
  engine::SeqChunk prefill{&table, tokens.data(), prompt, 0, engine::SeqChunk::Logits::kLast};
  runner.step({&prefill, 1});
  std::vector<float> out;
  for (int64_t p = prompt; p < total; ++p) {
    engine::SeqChunk c{&table, &tokens[static_cast<size_t>(p)], 1, p, engine::SeqChunk::Logits::kLast};
    const Tensor logits = runner.step({&c, 1});
    out.insert(out.end(), logits.ptr<float>(), logits.ptr<float>() + vocab);
  }
  table.release_all(runner.pool());
  return out;
}

// (argmax, (top1 - top2) / std) of a row.
std::pair<int64_t, double> top1(const float* row, int64_t n) {
  double mean = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) mean += row[i];
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) sq += (row[i] - mean) * (row[i] - mean);
  int64_t best = 0;
  float second = -INFINITY;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) {
      second = row[best];
      best = i;
    } else if (row[i] > second) {
      second = row[i];
    }
  }
  const double sd = std::sqrt(sq / static_cast<double>(n));
  return {best, sd > 0 ? (static_cast<double>(row[best]) - second) / sd : 0.0};
}

// Returns how many rows had a clear CPU winner (each of them must agree).
int64_t compare(const std::string& what, const std::vector<float>& cpu, const std::vector<float>& gpu,
                int64_t vocab) {
  EXPECT_EQ(cpu.size(), gpu.size()) << what;
  const int64_t rows = static_cast<int64_t>(cpu.size()) / vocab;
  int64_t clear = 0;
  double worst = 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cpu.data() + r * vocab;
    const float* g = gpu.data() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) EXPECT_TRUE(std::isfinite(g[i])) << what << " row " << r;
    const double cs = golden::cosine(c, g, static_cast<size_t>(vocab));
    worst = std::min(worst, cs);
    EXPECT_GE(cs, kMinCosine) << what << " row " << r;
    const auto [want, margin] = top1(c, vocab);
    if (margin < kClearMargin) continue;
    ++clear;
    EXPECT_EQ(top1(g, vocab).first, want) << what << " row " << r << " (CPU margin " << margin << ")";
  }
  std::printf("[ cuda     ] quantized %-8s min cosine %.6f, %lld clear rows\n", what.c_str(), worst,
              (long long)clear);
  return clear;
}

TEST_F(CudaTest, QuantizedCheckpointLogitsMatchTheCpu) {
  test_support::ScratchDir dir("bunsen_qm");
  write_checkpoint(dir.path());
  auto cpu = load(dir.path(), Device::cpu());
  auto gpu = load(dir.path(), Device::cuda(0));
  ASSERT_TRUE(gpu->device().is_cuda());
  EXPECT_EQ(gpu->weight_bytes_per_token(), cpu->weight_bytes_per_token());
  const int64_t vocab = cpu->config().vocab_size;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  const int64_t prompt = 24;  // > kGemvMaxM: the prefill takes the GEMM path
  engine::Runner cpu_runner(*cpu, runner_options(static_cast<int64_t>(tokens.size())));
  engine::Runner gpu_runner(*gpu, runner_options(static_cast<int64_t>(tokens.size())));
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + prompt);
  int64_t clear = compare("prompt", engine::score(cpu_runner, head), engine::score(gpu_runner, head), vocab);
  clear += compare("decode", decode_logits(cpu_runner, tokens, prompt), decode_logits(gpu_runner, tokens, prompt),
                   vocab);
  EXPECT_GT(gpu_runner.stats().graph_launches, 0) << "decode steps should replay CUDA graphs";
  EXPECT_GT(clear, 5) << "too few rows with a clear winner: the argmax check compared almost nothing";
}

}  // namespace
}  // namespace bunsen::model
