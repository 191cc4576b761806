// config.json parsing: typed fields per family, defaults, rope spellings, and one-line errors.
#include <gtest/gtest.h>

#include "core/status.h"
#include "model/config.h"
#include "model/registry.h"

namespace bunsen::model {
namespace {

std::string base(const std::string& extra = "", const std::string& type = "llama") {
  return R"({"model_type":")" + type + R"(","vocab_size":1000,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2)" + extra + "}";
}

std::string error_of(const std::string& json) {
  try {
    parse_config(json, "x/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, LlamaDefaults) {
  ModelConfig c = parse_config(base(), "c");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.sliding_window, std::vector<int>(4, 0));
  EXPECT_FLOAT_EQ(c.attention_scale(), 0.25f);
}

TEST(Config, RopeParametersAndLegacyScaling) {
  ModelConfig a = parse_config(base(R"(,"rope_scaling":{"type":"linear","factor":2.0},"rope_theta":500.0)"), "c");
  EXPECT_EQ(a.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(a.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(a.rope.theta, 500.0);
  ModelConfig b = parse_config(base(R"(,"rope_parameters":{"rope_type":"yarn","factor":4.0,"rope_theta":7.0,
    "original_max_position_embeddings":16})"), "c");
  EXPECT_EQ(b.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(b.rope.theta, 7.0);
  EXPECT_EQ(b.rope.original_max_position_embeddings, 16);
  EXPECT_NE(error_of(base(R"(,"rope_scaling":{"rope_type":"su","factor":2.0})")).find("unsupported rope type 'su'"),
            std::string::npos);
}

TEST(Config, FamilySwitches) {
  EXPECT_TRUE(parse_config(base("", "qwen2"), "c").attention_bias);
  EXPECT_FALSE(parse_config(base("", "qwen2"), "c").o_proj_bias);
  EXPECT_TRUE(parse_config(base("", "qwen3"), "c").qk_norm);
  EXPECT_TRUE(parse_config(base("", "phi3"), "c").fused_qkv);
  ModelConfig m = parse_config(base(R"(,"sliding_window":8)", "mistral"), "c");
  EXPECT_EQ(m.sliding_window, std::vector<int>(4, 8));
  ModelConfig s = parse_config(base(R"(,"no_rope_layer_interval":2)", "smollm3"), "c");
  EXPECT_EQ(s.use_rope, (std::vector<bool>{true, false, true, false}));
  ModelConfig g = parse_config(base(R"(,"attention_multiplier":0.5,"logits_scaling":8.0)", "granite"), "c");
  EXPECT_FLOAT_EQ(g.attention_scale(), 0.5f);
  EXPECT_DOUBLE_EQ(g.logits_scaling, 8.0);
  ModelConfig q = parse_config(base(R"(,"layer_types":["full_attention","sliding_attention","full_attention",
    "sliding_attention"],"sliding_window":4)", "qwen3"), "c");
  EXPECT_EQ(q.sliding_window, (std::vector<int>{0, 4, 0, 4}));
}

TEST(Config, TextConfigIsUnwrapped) {
  ModelConfig c = parse_config(R"({"model_type":"llama","tie_word_embeddings":true,"text_config":)" + base() + "}", "c");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Config, ErrorsNameTheProblem) {
  EXPECT_NE(error_of("{not json").find("x/config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"vocab_size":3})").find("missing 'model_type'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","vocab_size":1000})").find("missing required key 'hidden_size'"),
            std::string::npos);
  EXPECT_NE(error_of(base(R"(,"head_dim":"big")")).find("'head_dim' must be a non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":3})").find("multiple of num_key_value_heads"),
            std::string::npos);
  EXPECT_TRUE(error_of(base()).empty());
}

TEST(Config, UnknownModelTypeListsSupported) {
  ModelConfig c = parse_config(base("", "mamba"), "c");
  try {
    expected_tensors(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unsupported model_type 'mamba'"), std::string::npos) << m;
    for (const char* t : {"llama", "mistral", "qwen2", "qwen3", "smollm3", "granite", "phi3"})
      EXPECT_NE(m.find(t), std::string::npos) << m;
  }
}

TEST(Config, GenerationConfigOverridesEos) {
  ModelConfig c = parse_config(base(R"(,"eos_token_id":2)"), "c");
  apply_generation_config(c, R"({"eos_token_id":[7,8],"temperature":0.6,"do_sample":true,"top_k":20})", "g");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_DOUBLE_EQ(*c.generation.temperature, 0.6);
  EXPECT_EQ(*c.generation.top_k, 20);
}

}  // namespace
}  // namespace bunsen::model
