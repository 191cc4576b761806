// The qwen3-30b-a3b synthetic shape parses as a qwen3_moe config, and --quant synthetic weights of a MoE
// model put the stacked experts in MLX's quantized switch_mlp layout, which the family loads (the experts'
// bytes per token shrink about 4x at 4 bits); the benchmark's roofline counts only the active experts.
#include <gtest/gtest.h>

#include "bench/synthetic_shapes.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::bench {
namespace {

const std::string kTiny = R"({"model_type":"qwen3_moe","vocab_size":64,"hidden_size":64,"intermediate_size":96,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"num_experts":8,
  "num_experts_per_tok":2,"moe_intermediate_size":64,"norm_topk_prob":true)";

TEST(SyntheticMoe, ShapeIsQwen3Moe) {
  const model::ModelConfig c = model::parse_config(synthetic_config_json("qwen3-30b-a3b"), "shape");
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.n_layers, 48);
  EXPECT_EQ(c.d_model, 2048);
  EXPECT_EQ(c.vocab_size, 151936);
}

TEST(SyntheticMoe, QuantizedExpertsLoadAsSwitchMlp) {
  const model::ModelConfig fc = model::parse_config(kTiny + "}", "f");
  const model::ModelConfig qc =
      model::parse_config(kTiny + R"(,"quantization":{"group_size":32,"bits":4,"mode":"affine"}})", "q");
  model::WeightStore qs = synthetic_quant_weights(qc, DType::kBF16, 7);
  EXPECT_TRUE(qs.has("model.layers.0.mlp.switch_mlp.gate_proj.scales"));
  EXPECT_FALSE(qs.has("model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_EQ(qs.get("model.layers.1.mlp.switch_mlp.down_proj.weight").ndim, 3);
  model::WeightStore fs;
  for (const auto& s : model::expected_tensors(fc)) fs.add(s.name, model::synthetic_tensor(s.name, s.shape, DType::kBF16, 7));
  auto q = model::create_model(qc, std::move(qs));
  auto f = model::create_model(fc, std::move(fs));
  EXPECT_LT(q->weight_bytes_per_token(), f->weight_bytes_per_token() / 2);
}

}  // namespace
}  // namespace bunsen::bench
