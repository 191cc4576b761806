// Shape table (hyper-parameters as published in the checkpoints' config.json) and the in-memory builder.
#include "bench/synthetic_shapes.h"

#include "core/status.h"
#include "model/registry.h"
#include "model/synthetic.h"

namespace bunsen::bench {
namespace {

struct Shape {
  const char* name;
  const char* config;
};

constexpr Shape kShapes[] = {
    {"qwen2.5-0.5b",
     R"({"model_type":"qwen2","vocab_size":151936,"hidden_size":896,"intermediate_size":4864,
        "num_hidden_layers":24,"num_attention_heads":14,"num_key_value_heads":2,"rms_norm_eps":1e-6,
        "rope_theta":1000000.0,"max_position_embeddings":32768,"tie_word_embeddings":true})"},
    {"qwen2.5-1.5b",
     R"({"model_type":"qwen2","vocab_size":151936,"hidden_size":1536,"intermediate_size":8960,
        "num_hidden_layers":28,"num_attention_heads":12,"num_key_value_heads":2,"rms_norm_eps":1e-6,
        "rope_theta":1000000.0,"max_position_embeddings":32768,"tie_word_embeddings":true})"},
    {"llama3.2-1b",
     R"({"model_type":"llama","vocab_size":128256,"hidden_size":2048,"intermediate_size":8192,
        "num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"rms_norm_eps":1e-5,
        "rope_theta":500000.0,"max_position_embeddings":131072,"tie_word_embeddings":true,
        "rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                        "original_max_position_embeddings":8192}})"},
    {"llama3.1-8b",
     R"({"model_type":"llama","vocab_size":128256,"hidden_size":4096,"intermediate_size":14336,
        "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"rms_norm_eps":1e-5,
        "rope_theta":500000.0,"max_position_embeddings":131072,"tie_word_embeddings":false,
        "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                        "original_max_position_embeddings":8192}})"},
    {"qwen3-0.6b",
     R"({"model_type":"qwen3","vocab_size":151936,"hidden_size":1024,"intermediate_size":3072,
        "num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,
        "rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":40960,"tie_word_embeddings":true})"},
    {"qwen3-1.7b",
     R"({"model_type":"qwen3","vocab_size":151936,"hidden_size":2048,"intermediate_size":6144,
        "num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,
        "rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":40960,"tie_word_embeddings":true})"},
    {"qwen3-8b",
     R"({"model_type":"qwen3","vocab_size":151936,"hidden_size":4096,"intermediate_size":12288,
        "num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
        "rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":40960,"tie_word_embeddings":false})"},
    // Gemma 2 / 3 (issue 9): google/gemma-2-2b, google/gemma-3-1b-it and the text_config of
    // google/gemma-3-4b-it (its omitted keys written out with Gemma3TextConfig's defaults).
    {"gemma2-2b",
     R"({"model_type":"gemma2","vocab_size":256000,"hidden_size":2304,"intermediate_size":9216,
        "num_hidden_layers":26,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,
        "query_pre_attn_scalar":256,"sliding_window":4096,"attn_logit_softcapping":50.0,
        "final_logit_softcapping":30.0,"rms_norm_eps":1e-6,"rope_theta":10000.0,"max_position_embeddings":8192,
        "hidden_activation":"gelu_pytorch_tanh","tie_word_embeddings":true})"},
    {"gemma3-1b",
     R"({"model_type":"gemma3_text","vocab_size":262144,"hidden_size":1152,"intermediate_size":6912,
        "num_hidden_layers":26,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":256,
        "query_pre_attn_scalar":256,"sliding_window":512,"sliding_window_pattern":6,"rms_norm_eps":1e-6,
        "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"max_position_embeddings":32768,
        "hidden_activation":"gelu_pytorch_tanh","tie_word_embeddings":true})"},
    {"gemma3-4b",
     R"({"model_type":"gemma3_text","vocab_size":262208,"hidden_size":2560,"intermediate_size":10240,
        "num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,
        "query_pre_attn_scalar":256,"sliding_window":1024,"sliding_window_pattern":6,"rms_norm_eps":1e-6,
        "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"rope_scaling":{"rope_type":"linear","factor":8.0},
        "max_position_embeddings":131072,"hidden_activation":"gelu_pytorch_tanh","tie_word_embeddings":true})"},
    // Gemma 4 text parts (issue 9), from the text_config of google/gemma-4-E4B-it and
    // google/gemma-4-26B-A4B-it as far as known (see the gemma4 report: E4B's use_double_wide_mlp and
    // attention_k_eq_v are assumptions); the older global_head_dim / num_global_key_value_heads keys.
    {"gemma4-e4b",
     R"({"model_type":"gemma4_text","vocab_size":262144,"hidden_size":2560,"intermediate_size":10240,
        "num_hidden_layers":42,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":256,
        "global_head_dim":512,"attention_k_eq_v":false,"sliding_window":512,"num_kv_shared_layers":18,
        "hidden_size_per_layer_input":256,"vocab_size_per_layer_input":262144,"use_double_wide_mlp":false,
        "final_logit_softcapping":30.0,"rms_norm_eps":1e-6,"max_position_embeddings":131072,
        "rope_parameters":{"sliding_attention":{"rope_type":"default","rope_theta":10000.0},
                           "full_attention":{"rope_type":"proportional","partial_rotary_factor":0.25,
                                             "rope_theta":1000000.0}},
        "hidden_activation":"gelu_pytorch_tanh","tie_word_embeddings":true})"},
    {"gemma4-26b-a4b",
     R"({"model_type":"gemma4_text","vocab_size":262144,"hidden_size":2816,"intermediate_size":2112,
        "num_hidden_layers":30,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,
        "global_head_dim":512,"num_global_key_value_heads":2,"attention_k_eq_v":true,"sliding_window":1024,
        "num_kv_shared_layers":0,"hidden_size_per_layer_input":0,"enable_moe_block":true,"num_experts":128,
        "top_k_experts":8,"moe_intermediate_size":704,"final_logit_softcapping":30.0,"rms_norm_eps":1e-6,
        "max_position_embeddings":262144,
        "rope_parameters":{"sliding_attention":{"rope_type":"default","rope_theta":10000.0},
                           "full_attention":{"rope_type":"proportional","partial_rotary_factor":0.25,
                                             "rope_theta":1000000.0}},
        "hidden_activation":"gelu_pytorch_tanh","tie_word_embeddings":true})"},
    // Qwen3-MoE (issue 9): Qwen/Qwen3-30B-A3B's config.json (128 experts, 8 active, norm_topk_prob).
    {"qwen3-30b-a3b",
     R"({"model_type":"qwen3_moe","vocab_size":151936,"hidden_size":2048,"intermediate_size":6144,
        "num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
        "num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true,
        "decoder_sparse_step":1,"mlp_only_layers":[],"rms_norm_eps":1e-6,"rope_theta":1000000.0,
        "max_position_embeddings":40960,"tie_word_embeddings":false})"},
    // Qwen3.5 hybrid (issue 9): the text_config of Qwen/Qwen3.5-4B as published (hidden 2560, 32 layers with
    // full attention every 4th, 16 q / 4 kv heads of 256, partial rotary 0.25, intermediate 9216, vocab
    // 248320; DeltaNet 16 key / 32 value heads of 128, conv 4); tie_word_embeddings true is an assumption.
    {"qwen3.5-4b",
     R"({"model_type":"qwen3_5_text","vocab_size":248320,"hidden_size":2560,"intermediate_size":9216,
        "num_hidden_layers":32,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":256,
        "full_attention_interval":4,"linear_conv_kernel_dim":4,"linear_key_head_dim":128,
        "linear_value_head_dim":128,"linear_num_key_heads":16,"linear_num_value_heads":32,"rms_norm_eps":1e-6,
        "rope_parameters":{"rope_type":"default","rope_theta":10000000.0,"partial_rotary_factor":0.25},
        "max_position_embeddings":262144,"tie_word_embeddings":true})"},
};

}  // namespace

std::vector<std::string> synthetic_shape_names() {
  std::vector<std::string> out;
  for (const auto& s : kShapes) out.emplace_back(s.name);
  return out;
}

std::string synthetic_config_json(const std::string& name) {
  for (const auto& s : kShapes)
    if (name == s.name) return s.config;
  std::string list;
  for (const auto& s : kShapes) list += std::string(list.empty() ? "" : ", ") + s.name;
  throw Error("bench", "unknown synthetic shape '" + name + "' (known: " + list + ")");
}

std::string synthetic_config_json(const std::string& name, model::QuantSpec quant) {
  model::check_supported(quant, "--quant");
  std::string json = synthetic_config_json(name);
  json.erase(json.find_last_of('}'));
  return json + strfmt(R"(,"quantization":{"group_size":%d,"bits":%d,"mode":"affine"}})", quant.group_size,
                       quant.bits);
}

std::unique_ptr<model::Model> make_synthetic_model(const std::string& name, DType dtype, Device device,
                                                   std::optional<model::QuantSpec> quant) {
  constexpr uint64_t kSeed = 0x5eedull;
  const std::string json = quant ? synthetic_config_json(name, *quant) : synthetic_config_json(name);
  const model::ModelConfig cfg = model::parse_config(json, "synthetic shape " + name);
  model::WeightStore ws;
  if (quant) {
    ws = synthetic_quant_weights(cfg, dtype, kSeed);
  } else {
    for (const auto& spec : model::expected_tensors(cfg))
      ws.add(spec.name, model::synthetic_tensor(spec.name, spec.shape, dtype, kSeed));
  }
  return model::create_model(cfg, model::place_weights(std::move(ws), device, model::LoadOptions::Progress::kAuto));
}

}  // namespace bunsen::bench
