// Qwen3-MoE checkpoints under every expert layout the loader resolves (model/moe.h): transformers 5.x stacked
// gate_up_proj/down_proj, Hub per-expert experts.E.{gate,up,down}_proj, MLX switch_mlp stacked (float, and
// 4-bit with an 8-bit router). Each is written as a real checkpoint, loaded with load_model and run on the
// CPU: the float layouts give the reference model's logits bit for bit, the quantized one the logits of the
// model built from its dequantized weights; weight_bytes_per_token counts only the top-k experts; a
// checkpoint without experts fails naming the block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model_test_util.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;

constexpr int64_t kE = 4, kK = 2, kD = 64, kI = 32, kLayers = 2;
const std::string kJson = R"({"model_type":"qwen3_moe","vocab_size":70,"hidden_size":64,"intermediate_size":96,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"num_experts":4,
  "num_experts_per_tok":2,"moe_intermediate_size":32,"norm_topk_prob":true,"decoder_sparse_step":1,
  "mlp_only_layers":[1],"rms_norm_eps":1e-6,"tie_word_embeddings":false)";
const std::string kQuant = R"(,"quantization":{"group_size":32,"bits":4,"mode":"affine",
  "model.layers.0.mlp.gate":{"group_size":64,"bits":8}})";

using TensorMap = std::map<std::string, OwnedTensor>;

OwnedTensor copy_of(const Tensor& t, std::initializer_list<int64_t> shape, int64_t byte_offset = 0) {
  OwnedTensor c = OwnedTensor::make(t.dtype, shape);
  std::memcpy(c.tensor.data, static_cast<const char*>(t.data) + byte_offset, c.tensor.nbytes());
  return c;
}

OwnedTensor dup(const Tensor& t) {
  OwnedTensor c = OwnedTensor::make(t.dtype, std::span<const int64_t>(t.shape, t.ndim));
  std::memcpy(c.tensor.data, t.data, t.nbytes());
  return c;
}

// The synthetic f32 model under HF 5.x names.
TensorMap reference_tensors(const ModelConfig& cfg) {
  TensorMap m;
  for (const auto& s : expected_tensors(cfg)) m.emplace(s.name, synthetic_tensor(s.name, s.shape, DType::kF32, 5));
  return m;
}

WeightStore store_of(const TensorMap& m) {
  WeightStore ws;
  for (const auto& [name, t] : m)
    ws.add(name, dup(t.tensor));
  return ws;
}

void save(const ScratchDir& dir, const std::string& config, const TensorMap& file) {
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& [name, t] : file) list.emplace_back(name, t.tensor);
  write_safetensors(dir.file("model.safetensors"), list);
  std::ofstream(dir.file("config.json")) << config;
}

// Rewrites layer 0's stacked experts into `layout`: "hub" (per expert) or "mlx" (switch_mlp).
TensorMap relayout(const TensorMap& ref, const std::string& layout) {
  TensorMap out;
  const std::string p = "model.layers.0.mlp";
  for (const auto& [name, t] : ref)
    if (name.rfind(p + ".experts.", 0) != 0) out.emplace(name, dup(t.tensor));
  const Tensor gu = ref.at(p + ".experts.gate_up_proj").tensor, dn = ref.at(p + ".experts.down_proj").tensor;
  const int64_t row = kD * 4, expert_gu = 2 * kI * row, expert_dn = kD * kI * 4;
  if (layout == "hub") {
    for (int64_t e = 0; e < kE; ++e) {
      const std::string q = p + ".experts." + std::to_string(e);
      out.emplace(q + ".gate_proj.weight", copy_of(gu, {kI, kD}, e * expert_gu));
      out.emplace(q + ".up_proj.weight", copy_of(gu, {kI, kD}, e * expert_gu + kI * row));
      out.emplace(q + ".down_proj.weight", copy_of(dn, {kD, kI}, e * expert_dn));
    }
    return out;
  }
  OwnedTensor g = OwnedTensor::make(DType::kF32, {kE, kI, kD}), u = OwnedTensor::make(DType::kF32, {kE, kI, kD});
  for (int64_t e = 0; e < kE; ++e) {
    std::memcpy(g.tensor.ptr<char>() + e * kI * row, gu.ptr<char>() + e * expert_gu, kI * row);
    std::memcpy(u.tensor.ptr<char>() + e * kI * row, gu.ptr<char>() + e * expert_gu + kI * row, kI * row);
  }
  out.emplace(p + ".switch_mlp.gate_proj.weight", std::move(g));
  out.emplace(p + ".switch_mlp.up_proj.weight", std::move(u));
  out.emplace(p + ".switch_mlp.down_proj.weight", copy_of(dn, {kE, kD, kI}));
  return out;
}

// Quantizes `rows` x `cols` matrices (stacked `count` of them) of `src` in place of name NAME: writes
// NAME.weight/.scales/.biases (bf16 scales) to `file` and the dequantized f32 values back into `deq`.
void quantize_into(TensorMap& file, const std::string& prefix, const Tensor& src, int64_t count, int64_t rows,
                   int64_t cols, QuantSpec spec, float* deq) {
  const int64_t words = packed_cols(cols, spec.bits), groups = cols / spec.group_size, n = count * rows;
  std::vector<int64_t> wshape = {n, words}, gshape = {n, groups};
  if (count > 1) wshape = {count, rows, words}, gshape = {count, rows, groups};
  OwnedTensor packed = OwnedTensor::make(DType::kU32, wshape);
  OwnedTensor s16 = OwnedTensor::make(DType::kBF16, gshape), b16 = OwnedTensor::make(DType::kBF16, gshape);
  std::vector<float> sc(static_cast<size_t>(n * groups)), bi(sc.size());
  quantize_affine(src.ptr<float>(), n, cols, spec, packed.tensor.ptr<uint32_t>(), sc.data(), bi.data());
  for (size_t i = 0; i < sc.size(); ++i) {
    s16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(sc[i]), b16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(bi[i]);
    sc[i] = bf16_to_f32(s16.tensor.ptr<uint16_t>()[i]), bi[i] = bf16_to_f32(b16.tensor.ptr<uint16_t>()[i]);
  }
  dequantize_affine(packed.tensor.ptr<uint32_t>(), sc.data(), bi.data(), n, cols, spec, deq);
  file.erase(prefix + ".weight");
  file.emplace(prefix + ".weight", std::move(packed));
  file.emplace(prefix + ".scales", std::move(s16));
  file.emplace(prefix + ".biases", std::move(b16));
}

std::vector<float> run_logits(Model& m, const std::vector<int32_t>& tokens) {
  return testutil::prefill_logits(m, tokens, 16);
}

const std::vector<int32_t> kTokens = {1, 17, 42, 69, 0, 5, 5, 63, 20, 11, 2, 33, 60, 8, 9, 40, 41};

TEST(MoeCheckpointLayouts, FloatLayoutsGiveTheReferenceLogitsBitForBit) {
  const ModelConfig cfg = parse_config(kJson + "}", "cfg");
  const TensorMap ref = reference_tensors(cfg);
  std::unique_ptr<Model> reference = create_model(cfg, store_of(ref));
  const std::vector<float> want = run_logits(*reference, kTokens);
  for (const std::string layout : {"hf", "hub", "mlx"}) {
    ScratchDir dir("bunsen_st");
    save(dir, kJson + "}", layout == "hf" ? reference_tensors(cfg) : relayout(ref, layout));
    std::unique_ptr<Model> m = load_model(dir.path());
    const std::vector<float> got = run_logits(*m, kTokens);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << layout;
    EXPECT_EQ(m->weight_bytes_per_token(), reference->weight_bytes_per_token()) << layout;
  }
}

TEST(MoeCheckpointLayouts, QuantizedSwitchMlpMatchesItsDequantizedWeights) {
  const ModelConfig fcfg = parse_config(kJson + "}", "f");
  TensorMap ref = reference_tensors(fcfg);
  TensorMap file = relayout(ref, "mlx");
  const std::string p = "model.layers.0.mlp";
  const QuantSpec q4{4, 32}, q8{8, 64};
  // Dequantized values go back into the reference (HF layout) so both models hold the same numbers.
  std::vector<float> g(kE * kI * kD), u(g.size()), dn(kE * kD * kI);
  quantize_into(file, p + ".switch_mlp.gate_proj", file.at(p + ".switch_mlp.gate_proj.weight").tensor, kE, kI, kD, q4,
                g.data());
  quantize_into(file, p + ".switch_mlp.up_proj", file.at(p + ".switch_mlp.up_proj.weight").tensor, kE, kI, kD, q4,
                u.data());
  quantize_into(file, p + ".switch_mlp.down_proj", file.at(p + ".switch_mlp.down_proj.weight").tensor, kE, kD, kI,
                q4, dn.data());
  quantize_into(file, p + ".gate", ref.at(p + ".gate.weight").tensor, 1, kE, kD, q8,
                ref.at(p + ".gate.weight").tensor.ptr<float>());
  float* gu = ref.at(p + ".experts.gate_up_proj").tensor.ptr<float>();
  for (int64_t e = 0; e < kE; ++e) {
    std::memcpy(gu + e * 2 * kI * kD, g.data() + e * kI * kD, kI * kD * 4);
    std::memcpy(gu + e * 2 * kI * kD + kI * kD, u.data() + e * kI * kD, kI * kD * 4);
  }
  std::memcpy(ref.at(p + ".experts.down_proj").tensor.data, dn.data(), dn.size() * 4);
  ScratchDir dir("bunsen_st");
  save(dir, kJson + kQuant + "}", file);
  std::unique_ptr<Model> qm = load_model(dir.path());
  std::unique_ptr<Model> fm = create_model(fcfg, store_of(ref));
  EXPECT_LT(qm->weight_bytes_per_token(), fm->weight_bytes_per_token());
  const std::vector<float> lq = run_logits(*qm, kTokens), lf = run_logits(*fm, kTokens);
  float scale = 0, worst = 0;
  for (size_t i = 0; i < lf.size(); ++i) scale = std::max(scale, std::fabs(lf[i]));
  for (size_t i = 0; i < lf.size(); ++i) worst = std::max(worst, std::fabs(lq[i] - lf[i]));
  EXPECT_LE(worst, 1e-4f * scale);
}

TEST(MoeCheckpointLayouts, BytesPerTokenCountOnlyTheTopKExperts) {
  const ModelConfig cfg = parse_config(kJson + "}", "cfg");
  std::unique_ptr<Model> m = create_model(cfg, store_of(reference_tensors(cfg)));
  size_t all = 0;
  for (const auto& s : expected_tensors(cfg)) {
    size_t n = 4;
    for (int64_t v : s.shape) n *= static_cast<size_t>(v);
    all += n;
  }
  const size_t embed_rows_skipped = (70 - 1) * kD * 4;               // one embedding row per token
  const size_t idle_experts = (kE - kK) * 3 * kI * kD * 4;           // layer 0 only (layer 1 is dense)
  EXPECT_EQ(m->weight_bytes_per_token(), all - embed_rows_skipped - idle_experts);
  static_assert(kLayers == 2);
}

TEST(MoeCheckpointLayouts, MissingExpertsNameTheBlock) {
  const ModelConfig cfg = parse_config(kJson + "}", "cfg");
  TensorMap ref = reference_tensors(cfg);
  ref.erase("model.layers.0.mlp.experts.gate_up_proj");
  ScratchDir dir("bunsen_st");
  save(dir, kJson + "}", ref);
  testutil::expect_error([&] { load_model(dir.path()); }, {"model.layers.0.mlp", "no expert weights"});
}

}  // namespace
}  // namespace bunsen::model
