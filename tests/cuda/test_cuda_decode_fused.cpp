// The persistent batch-1 decode step (kernels::decode_layers_fused, cuda/decode_mega.cu) against the per-op
// CUDA step: every llama-like golden fixture it takes (RoPE variants, NoPE layers, residual / embedding /
// logit multipliers, fused q/k/v and gate/up checkpoints) decodes teacher forced, eagerly and from
// CUDA graphs, to logits within bf16 tolerance of the per-op path (cosine >= 0.9995, same argmax where the
// per-op top-1 is clear) and to the golden greedy tokens; fixtures outside its invariants (sliding window,
// biases, q/k norms) decline and decode as before. Two wider random checkpoints (head_dim 64 and 128, a 600-
// token prompt over many cache blocks and key slices) check the ring's part-rows, the split attention and the
// merge at sizes where every block has work, in bf16 and in MLX 4-bit.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../golden/golden_file.h"
#include "../support/scratch_dir.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "kernels/cuda/quant_ops.h"
#include "kernels/decode_fused.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

constexpr double kFusedMinCosine = 0.9995;

// Leaves the process-wide switch as the environment set it, however the test ends (a failure or an exception
// must not let later tests in this process take the fused step).
struct ResetFusedDecode {
  ~ResetFusedDecode() { kernels::set_fused_decode_for_testing(-1); }
};

struct RowCheck {
  int64_t rows = 0, clear = 0;
  double min_cos = 1.0;
};

// Compares [rows, vocab] logits of the fused step with the per-op step's.
RowCheck compare(const std::string& what, const std::vector<float>& ref, const std::vector<float>& got,
                 int64_t vocab) {
  RowCheck c;
  EXPECT_EQ(ref.size(), got.size()) << what;
  if (ref.size() != got.size()) return c;
  c.rows = static_cast<int64_t>(ref.size()) / vocab;
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* a = ref.data() + r * vocab;
    const float* b = got.data() + r * vocab;
    const double cos = cosine(a, b, static_cast<size_t>(vocab));
    c.min_cos = std::min(c.min_cos, cos);
    EXPECT_GE(cos, kFusedMinCosine) << what << " row " << r;
    if (margin(a, vocab) > kClearMargin) {
      ++c.clear;
      EXPECT_EQ(argmax(a, vocab), argmax(b, vocab)) << what << " row " << r;
    }
  }
  return c;
}

TEST_F(CudaTest, FusedDecodeStepMatchesThePerOpStepOnTheLlamaFixtures) {
  const ResetFusedDecode reset;
  const std::vector<std::string> all = fixture_names();
  int ran = 0;
  int64_t agree = 0, total = 0;
  for (const std::string name : {"llama3", "llama_yarn", "phi3", "granite", "smollm3", "llama_linear_tied",
                                 "llama_minicpm5", "mistral", "qwen2", "qwen3"}) {
    if (std::find(all.begin(), all.end(), name) == all.end()) continue;
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    auto m = load(build_checkpoint(f, DType::kBF16, "cuda_decode_fused"), Device::cuda(0));
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size()), G = static_cast<int64_t>(greedy.size());
    const int64_t vocab = m->config().vocab_size;
    // Outside the fused step's invariants: sliding window (mistral), biases (qwen2, llama_linear_tied), q/k
    // norms (qwen3).
    const std::string n = name;
    const bool declines = n == "mistral" || n == "qwen2" || n == "llama_linear_tied" || n == "qwen3";
    kernels::set_fused_decode_for_testing(0);
    std::vector<float> ref;
    {
      engine::Runner r(*m, runner_options(T, G + 8));
      ref = decode_logits(r, ids, greedy);
    }
    for (bool graphs : {false, true}) {
      kernels::set_fused_decode_for_testing(1);
      const int64_t before = kernels::fused_decode_launches();
      engine::RunnerOptions ro = runner_options(T, G + 8);
      ro.cuda_graphs = graphs;
      std::vector<float> got;
      {
        engine::Runner r(*m, ro);
        got = decode_logits(r, ids, greedy);
      }
      kernels::set_fused_decode_for_testing(-1);
      const int64_t launches = kernels::fused_decode_launches() - before;
      if (declines) {
        EXPECT_EQ(launches, 0) << "the fused step should decline this fixture";
        EXPECT_EQ(ref, got) << "a declined step must decode exactly as before";
        continue;
      }
      EXPECT_GT(launches, 0) << (graphs ? "graphs" : "eager") << ": the fused step did not run";
      if (!graphs) {
        EXPECT_EQ(launches, G - 1) << "one launch per decode step (the first row is the prefill's)";
      }
      const RowCheck c = compare(name + (graphs ? " graphs" : " eager"), ref, got, vocab);
      std::printf("[ fused    ] %-20s %-6s rows %lld, clear %lld, min cosine %.6f\n", name.c_str(),
                  graphs ? "graphs" : "eager", (long long)c.rows, (long long)c.clear, c.min_cos);
      for (int64_t r = 0; r < G; ++r) {
        agree += argmax(got.data() + r * vocab, vocab) == greedy[static_cast<size_t>(r)];
        ++total;
      }
    }
    if (!declines) ++ran;
  }
  EXPECT_GE(ran, 6) << "too few fixtures took the fused step";
  ASSERT_GT(total, 0);
  EXPECT_GE(static_cast<double>(agree), kMinAgreement * static_cast<double>(total))
      << agree << " of " << total << " teacher-forced steps pick the golden greedy token";
}

// A llama checkpoint of `config` with synthetic weights: bf16, or with a "quantization" block every 2-D
// tensor quantized by quantize_affine (bf16 scales and biases, as mlx-lm writes them).
void write_checkpoint(const std::string& dir, const std::string& config) {
  const model::ModelConfig cfg = model::parse_config(config, "decode fused test");
  std::vector<OwnedTensor> keep;
  std::vector<std::pair<std::string, Tensor>> list;
  auto bf16_of = [](const float* v, std::initializer_list<int64_t> shape) {
    OwnedTensor b = OwnedTensor::make(DType::kBF16, shape);
    for (int64_t i = 0; i < b.tensor.numel(); ++i) b.tensor.ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
    return b;
  };
  for (const auto& s : model::expected_tensors(cfg)) {
    const std::string prefix = s.name.substr(0, s.name.size() - std::string(".weight").size());
    const std::optional<model::QuantSpec> spec = s.shape.size() == 2 ? cfg.quant_spec(prefix) : std::nullopt;
    if (!spec) {
      keep.push_back(model::synthetic_tensor(s.name, s.shape, DType::kBF16, 31));
      list.emplace_back(s.name, keep.back().tensor);
      continue;
    }
    const OwnedTensor t = model::synthetic_tensor(s.name, s.shape, DType::kF32, 31);
    const int64_t rows = s.shape[0], cols = s.shape[1], groups = cols / spec->group_size;
    OwnedTensor packed = OwnedTensor::make(DType::kU32, {rows, model::packed_cols(cols, spec->bits)});
    std::vector<float> sc(static_cast<size_t>(rows * groups)), bi(sc.size());
    model::quantize_affine(t.tensor.ptr<float>(), rows, cols, *spec, packed.tensor.ptr<uint32_t>(), sc.data(),
                           bi.data());
    keep.push_back(std::move(packed));
    list.emplace_back(s.name, keep.back().tensor);
    keep.push_back(bf16_of(sc.data(), {rows, groups}));
    list.emplace_back(prefix + ".scales", keep.back().tensor);
    keep.push_back(bf16_of(bi.data(), {rows, groups}));
    list.emplace_back(prefix + ".biases", keep.back().tensor);
  }
  model::write_safetensors(dir + "/model.safetensors", list);
  std::ofstream(dir + "/config.json") << config;
}

// Two wider llama configs (open: add a quantization block and "}"): head_dim 128, d 2,048, untied; head_dim
// 64, d 1,024, tied.
const std::string kConfigA =
    R"({"model_type":"llama","vocab_size":1024,"hidden_size":2048,"intermediate_size":5632,
        "num_hidden_layers":2,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,
        "tie_word_embeddings":false,"rms_norm_eps":1e-5,"rope_theta":500000.0)";
const std::string kConfigB =
    R"({"model_type":"llama","vocab_size":768,"hidden_size":1024,"intermediate_size":3072,
        "num_hidden_layers":3,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":64,
        "tie_word_embeddings":true,"rms_norm_eps":1e-5)";
const std::string kQ4 = R"(,"quantization":{"group_size":64,"bits":4,"mode":"affine"})";
const std::string kQ8 = R"(,"quantization":{"group_size":64,"bits":8,"mode":"affine"})";

// head_dim 128 and 64 shapes, bf16 and MLX 4- and 8-bit (group 64): d_ff and every input width % 512 == 0,
// d_ff 5632 = 11 bf16 parts / 2.75 4-bit parts / 5.5 8-bit parts (a short last part). With at most 8
// segments (the bf16 default; BUNSEN_DECODE_FUSED_SEGS=8, 4, 2 limit it, 1 is none and the quantized default;
// gpu-session's forms run 1, 2 and 4) the widths that allow it take segmented stages: a's 2,048 (bf16 4
// segments, 8-bit 2), b's 1,024 (bf16 2) and 3,072 (bf16 8 of 384 columns, 4-bit 2, 8-bit 4), c's 16,384
// (bf16 8 x 4 parts, 4-bit 8 / 4 x 2 parts / 2 x 4 parts, 8-bit 8 x 2 parts); 5,632 stays unsegmented.
TEST_F(CudaTest, FusedDecodeStepMatchesThePerOpStepAtWiderShapes) {
  const ResetFusedDecode reset;
  const std::string c =
      R"({"model_type":"llama","vocab_size":512,"hidden_size":1024,"intermediate_size":16384,
        "num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,
        "tie_word_embeddings":false,"rms_norm_eps":1e-5)";
  const std::string &a = kConfigA, &b = kConfigB, &q4 = kQ4, &q8 = kQ8;
  for (const std::string& config : {a + "}", b + "}", c + "}", a + q4 + "}", b + q4 + "}", c + q4 + "}",
                                    a + q8 + "}", b + q8 + "}", c + q8 + "}"}) {
    test_support::ScratchDir dir("bunsen_st");
    write_checkpoint(dir.path(), config);
    auto m = load(dir.path(), Device::cuda(0));
    const int64_t vocab = m->config().vocab_size;
    const std::string what = strfmt("head_dim %lld%s", (long long)m->config().head_dim,
                                    config.find("\"bits\":4") != std::string::npos   ? " 4-bit"
                                    : config.find("\"bits\":8") != std::string::npos ? " 8-bit"
                                                                                     : "");
    SCOPED_TRACE(what);
    std::vector<int32_t> ids, tail;
    for (int i = 0; i < 600; ++i) ids.push_back(static_cast<int32_t>((i * 131 + 7) % vocab));
    for (int i = 0; i < 24; ++i) tail.push_back(static_cast<int32_t>((i * 53 + 3) % vocab));
    const auto T = static_cast<int64_t>(ids.size()), G = static_cast<int64_t>(tail.size());
    std::vector<float> out[2];
    const int64_t before = kernels::fused_decode_launches();
    for (int fused : {0, 1}) {
      kernels::set_fused_decode_for_testing(fused);
      engine::RunnerOptions ro = runner_options(T, G + 8);
      ro.block_size = 16;
      engine::Runner r(*m, ro);
      out[fused] = decode_logits(r, ids, tail);
    }
    kernels::set_fused_decode_for_testing(-1);
    EXPECT_GT(kernels::fused_decode_launches(), before) << "the fused step did not run";
    const RowCheck c = compare(what, out[0], out[1], vocab);
    std::printf("[ fused    ] %s: rows %lld, clear %lld, min cosine %.6f\n", what.c_str(), (long long)c.rows,
                (long long)c.clear, c.min_cos);
    EXPECT_GT(c.clear, 4) << "too few rows with a clear winner";
  }
}

// The quantized GEMVs' norm prologue at model level (linear_q_multi's q/k/v and linear_q_swiglu's gate/up
// take it at 4 bits where d % 512 == 0, at 8 bits where d % 256 == 0): 4- and 8-bit checkpoints (d 2,048 and
// 1,024, tied and untied heads) decode the same logits bit for bit with the norms in the projections and
// with add_rms_norm in place, eagerly and from CUDA graphs.
TEST_F(CudaTest, QuantNormPrologueDecodesBitForBitLikeAddRmsNorm) {
  for (const std::string& config :
       {kConfigA + kQ4 + "}", kConfigB + kQ4 + "}", kConfigA + kQ8 + "}", kConfigB + kQ8 + "}"}) {
    test_support::ScratchDir dir("bunsen_st");
    write_checkpoint(dir.path(), config);
    auto m = load(dir.path(), Device::cuda(0));
    const int64_t vocab = m->config().vocab_size;
    SCOPED_TRACE(strfmt("d %lld, %d-bit", (long long)m->config().d_model,
                        config.find("\"bits\":4") != std::string::npos ? 4 : 8));
    std::vector<int32_t> ids, tail;
    for (int i = 0; i < 300; ++i) ids.push_back(static_cast<int32_t>((i * 131 + 7) % vocab));
    for (int i = 0; i < 16; ++i) tail.push_back(static_cast<int32_t>((i * 53 + 3) % vocab));
    kernels::cuda::set_qmma_norm_for_testing(1);  // the prologue is off by default
    expect_switch_decodes_bit_for_bit(*m, ids, tail, kernels::set_fused_norm_for_testing);
    kernels::cuda::set_qmma_norm_for_testing(-1);
  }
}

}  // namespace
}  // namespace bunsen::golden
