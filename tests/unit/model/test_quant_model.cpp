// Quantized llama checkpoints end to end on the CPU: a tiny model quantized module by module with
// quantize_affine (mixed bits and group sizes, a float override, quantized embedding and lm_head, tied and
// untied), saved as safetensors + config.json and loaded with load_model, gives the logits of the same model
// built from the dequantized f32 weights (bit for bit at the scalar/AVX2 levels, where linear_q sums like
// linear; to f32 rounding at the best level); malformed tensor sets fail naming the module. (CUDA runs of
// quantized checkpoints: tests/cuda/test_cuda_quant_model.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "../../support/scratch_dir.h"
#include "core/buffer.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model_test_util.h"
#include "safetensors_test_util.h"

namespace bunsen::model {
namespace {

using test_support::ScratchDir;
using testutil::expect_error;

// d_model 64, d_ff 96 (so down_proj needs group 32), 2 layers, vocab 80.
std::string base_json(bool tied) {
  return std::string(R"({"model_type":"llama","vocab_size":80,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":)") +
         (tied ? "true" : "false");
}

constexpr const char* kQuantBlock = R"(,"quantization":{"group_size":32,"bits":4,"mode":"affine",
    "model.layers.0.mlp.down_proj":{"group_size":32,"bits":8},"model.layers.1.mlp.down_proj":{"bits":3},
    "model.layers.0.self_attn.q_proj":{"group_size":64,"bits":5},"model.layers.1.self_attn.k_proj":{"bits":6,"group_size":64},
    "model.layers.1.mlp.up_proj":{"bits":2,"group_size":64},"model.embed_tokens":{"bits":6,"group_size":64},
    "lm_head":{"bits":8,"group_size":64},"model.layers.1.self_attn.o_proj":false}})";

struct Checkpoint {
  std::map<std::string, OwnedTensor> file;  // what goes into model.safetensors
  WeightStore reference;                    // the same model with dequantized f32 weights
};

// Quantizes every 2-D weight whose module has a spec; scales/biases are stored in bf16 (as mlx-lm does for
// a bf16 model) and the reference dequantizes with those rounded values.
Checkpoint build(const ModelConfig& qcfg, const ModelConfig& fcfg) {
  Checkpoint ck;
  for (const auto& s : expected_tensors(fcfg)) {
    OwnedTensor t = synthetic_tensor(s.name, s.shape, DType::kF32, 11);
    const std::string prefix = s.name.substr(0, s.name.size() - std::string(".weight").size());
    const std::optional<QuantSpec> spec = s.shape.size() == 2 ? qcfg.quant_spec(prefix) : std::nullopt;
    if (!spec) {
      OwnedTensor copy = OwnedTensor::make(DType::kF32, s.shape);
      std::memcpy(copy.tensor.data, t.tensor.data, t.tensor.nbytes());
      ck.file.emplace(s.name, std::move(copy));
      ck.reference.add(s.name, std::move(t));
      continue;
    }
    const int64_t rows = s.shape[0], cols = s.shape[1], groups = cols / spec->group_size;
    OwnedTensor packed = OwnedTensor::make(DType::kU32, {rows, packed_cols(cols, spec->bits)});
    std::vector<float> sc(static_cast<size_t>(rows * groups)), bi(sc.size());
    quantize_affine(t.tensor.ptr<float>(), rows, cols, *spec, packed.tensor.ptr<uint32_t>(), sc.data(),
                    bi.data());
    OwnedTensor s16 = OwnedTensor::make(DType::kBF16, {rows, groups}),
                b16 = OwnedTensor::make(DType::kBF16, {rows, groups});
    for (size_t i = 0; i < sc.size(); ++i) {
      s16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(sc[i]);
      b16.tensor.ptr<uint16_t>()[i] = f32_to_bf16(bi[i]);
      sc[i] = bf16_to_f32(s16.tensor.ptr<uint16_t>()[i]);
      bi[i] = bf16_to_f32(b16.tensor.ptr<uint16_t>()[i]);
    }
    OwnedTensor deq = OwnedTensor::make(DType::kF32, {rows, cols});
    dequantize_affine(packed.tensor.ptr<uint32_t>(), sc.data(), bi.data(), rows, cols, *spec,
                      deq.tensor.ptr<float>());
    ck.reference.add(s.name, std::move(deq));
    ck.file.emplace(s.name, std::move(packed));
    ck.file.emplace(prefix + ".scales", std::move(s16));
    ck.file.emplace(prefix + ".biases", std::move(b16));
  }
  return ck;
}

void save(const ScratchDir& dir, const std::string& config, const std::map<std::string, OwnedTensor>& file) {
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& [name, t] : file) list.emplace_back(name, t.tensor);
  write_safetensors(dir.file("model.safetensors"), list);
  std::ofstream(dir.file("config.json")) << config;
}

std::vector<float> run_logits(Model& m, const std::vector<int32_t>& tokens) {
  return testutil::prefill_logits(m, tokens, 16);
}

struct IsaGuard {
  ~IsaGuard() { kernels::cpu::set_isa_for_testing(kernels::cpu::detected_isa()); }
};

void check_model(bool tied) {
  const std::string qjson = base_json(tied) + kQuantBlock, fjson = base_json(tied) + "}";
  const ModelConfig qcfg = parse_config(qjson, "q"), fcfg = parse_config(fjson, "f");
  Checkpoint ck = build(qcfg, fcfg);
  ScratchDir dir("bunsen_st");
  save(dir, qjson, ck.file);
  std::unique_ptr<Model> q = load_model(dir.path());
  std::unique_ptr<Model> f = create_model(fcfg, std::move(ck.reference));
  EXPECT_LT(q->weight_bytes_per_token(), f->weight_bytes_per_token() / 3);
  const std::vector<int32_t> tokens = {1, 17, 42, 79, 0, 5, 5, 63, 20, 11, 2, 33, 70, 8, 9, 40, 41, 3, 77};
  IsaGuard guard;
  using kernels::cpu::Isa;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!kernels::cpu::isa_supported(isa)) continue;
    kernels::cpu::set_isa_for_testing(isa);
    const std::vector<float> lq = run_logits(*q, tokens), lf = run_logits(*f, tokens);
    ASSERT_EQ(lq.size(), lf.size());
    float scale = 0.0f, worst = 0.0f;
    for (size_t i = 0; i < lq.size(); ++i) {
      ASSERT_TRUE(std::isfinite(lq[i]));
      scale = std::fmax(scale, std::fabs(lf[i]));
      worst = std::fmax(worst, std::fabs(lq[i] - lf[i]));
    }
    if (isa == Isa::kAvx512)
      EXPECT_LE(worst, 1e-5f * scale) << "tied=" << tied;
    else
      EXPECT_EQ(std::memcmp(lq.data(), lf.data(), lq.size() * 4), 0)
          << kernels::cpu::isa_name(isa) << " worst " << worst;
  }
}

TEST(QuantModel, MixedCheckpointLogitsEqualDequantizedModelUntied) {
  check_model(false);
}
TEST(QuantModel, MixedCheckpointLogitsEqualDequantizedModelTied) {
  check_model(true);
}

// Each mutation of a valid quantized checkpoint must fail at load with the module named.
TEST(QuantModel, MalformedTensorSetsNameTheModule) {
  const std::string qjson = base_json(false) + kQuantBlock;
  const ModelConfig qcfg = parse_config(qjson, "q"), fcfg = parse_config(base_json(false) + "}", "f");
  const std::string m = "model.layers.0.mlp.gate_proj";
  auto load_with = [&](const std::string& config,
                       const std::function<void(std::map<std::string, OwnedTensor>&)>& edit) {
    Checkpoint ck = build(qcfg, fcfg);
    edit(ck.file);
    ScratchDir dir("bunsen_st");
    save(dir, config, ck.file);
    load_model(dir.path());
  };
  expect_error([&] { load_with(qjson, [&](auto& f) { f.erase(m + ".scales"); }); },
               {m, "missing", ".scales"});
  expect_error([&] { load_with(qjson, [&](auto& f) { f.erase(m + ".biases"); }); },
               {m, "missing", ".biases"});
  expect_error(
      [&] { load_with(qjson, [&](auto& f) {
              f[m + ".weight"] = OwnedTensor::make(DType::kU32, {96, 9});
            }); },
      {m, "[96, 9]", "expected [96, 8]"});
  expect_error(
      [&] {
        load_with(qjson, [&](auto& f) { f[m + ".scales"] = OwnedTensor::make(DType::kBF16, {96, 3}); });
      },
      {m, "scales", "expected [96, 2]"});
  expect_error(
      [&] { load_with(qjson, [&](auto& f) {
              f[m + ".biases"] = OwnedTensor::make(DType::kF16, {96, 2});
            }); },
      {m, "different dtypes"});
  // The config says group 64 for a module whose input dimension is 96.
  std::string bad_group = qjson;
  bad_group.replace(bad_group.find(R"("model.layers.1.mlp.down_proj":{"bits":3})"),
                    std::string(R"("model.layers.1.mlp.down_proj":{"bits":3})").size(),
                    R"("model.layers.1.mlp.down_proj":{"bits":3,"group_size":64})");
  expect_error([&] { load_with(bad_group, [](auto&) {}); },
               {"model.layers.1.mlp.down_proj", "group_size 64 does not divide the input dimension 96"});
  // A quantized checkpoint whose config.json lost its quantization block.
  expect_error([&] { load_with(base_json(false) + "}", [](auto&) {}); },
               {"model.embed_tokens", "stored quantized"});
}

}  // namespace
}  // namespace bunsen::model
