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

std::unique_ptr<model::Model> make_synthetic_model(const std::string& name, DType dtype, Device device) {
  const model::ModelConfig cfg = model::parse_config(synthetic_config_json(name), "synthetic shape " + name);
  model::WeightStore ws;
  for (const auto& spec : model::expected_tensors(cfg))
    ws.add(spec.name, model::synthetic_tensor(spec.name, spec.shape, dtype, /*seed=*/0x5eedull));
  return model::create_model(cfg, model::place_weights(std::move(ws), device, model::LoadOptions::Progress::kAuto));
}

}  // namespace bunsen::bench
